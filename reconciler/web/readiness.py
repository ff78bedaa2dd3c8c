"""`/readyz`: whether this `serve` does its job. Not ready while the state store does not
answer, while a binding cannot read its branch (its last poll failed: the branch deleted,
the remote gone or refusing), or while a binding has not been polled for 3x its interval
(a binding not polled yet counts as on time for 3x its interval after start). Each reason
names the binding."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.redaction import mask_url_passwords

if TYPE_CHECKING:
    from nodus_gitops.service import Service


def readiness(service: Service, started: float) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body); `started` is the server's start on the monotonic clock."""
    try:
        records = {b.id: b for b in service.store.list_bindings()}
    except Exception as exc:  # any driver error: the store is unreachable
        reason = mask_url_passwords(str(exc))
        return 503, {"status": "unavailable", "error": f"state store: {reason}"}
    now, reasons = datetime.now(UTC), []
    for binding_id, sync in service.syncs.items():
        limit = 3 * sync.binding.interval
        record = records.get(binding_id)
        polled = record.last_poll_at if record else None
        # A failed poll counts its failures on the sync and records its error in the
        # store (a sync's own errors are recorded there too, but do not count).
        if getattr(sync, "failures", 0) and record is not None and record.last_error:
            reasons.append(f"{binding_id}: cannot read its branch: "
                           f"{mask_url_passwords(record.last_error)}")
        elif polled is None and time.monotonic() - started > limit:
            reasons.append(f"{binding_id}: not polled yet, {limit:g}s (3x interval) after start")
        elif polled is not None and (seconds := (now - polled).total_seconds()) > limit:
            reasons.append(f"{binding_id}: last polled {seconds:.0f}s ago, more than {limit:g}s "
                           "(3x interval)")
    if reasons:
        return 503, {"status": "not ready", "reasons": reasons}
    return 200, {"status": "ready"}
