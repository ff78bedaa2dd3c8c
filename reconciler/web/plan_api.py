"""`POST /api/v1/repos/<id>/plan[?ref=REF]`: the plan a `nodus-gitops plan` would print of
that binding's branch tip (or REF), made by this server against its own state (the
CLI's `plan --server`). The text and the JSON are masked as the dashboard masks a
sync's plan; `exitCode` is the local command's (0 no changes, 2 changes, 1 problems)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import NodusGitopsError
from nodus_gitops.plan_report import plan_report
from nodus_gitops.web.redact import Masker, configured_secrets, mask_change, mask_plan

if TYPE_CHECKING:
    from nodus_gitops.service import Service

MAX_REF = 255  # git's own limit on a ref name's length
RETRY_AFTER_SECONDS = 5


def plan_answer(service: Service, binding_id: str,
                ref: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, body, headers) of a plan request."""
    if binding_id not in service.syncs:
        return 404, {"error": f"no repo binding {binding_id!r}"}, {}
    if ref is not None and (not ref or ref.startswith("-") or len(ref) > MAX_REF
                            or any(c.isspace() or ord(c) < 32 or c == "\x7f" for c in ref)):
        return 400, {"error": f"ref: {ref[:40]!r} is not a branch, tag, SHA or ref name"}, {}
    try:
        planned = service.plan_ref(binding_id, ref)
        report = None if planned is None else plan_report(*planned)
    except NodusGitopsError as exc:  # the remote, the ref, the commit: said as it is
        secrets = configured_secrets(service.settings)
        return 422, {"error": Masker(secrets).text(f"cannot plan {binding_id}: {exc}")}, {}
    if report is None:
        return 503, {"error": f"a sync of {binding_id} is still running: try again in a "
                              "moment"}, {"Retry-After": str(RETRY_AFTER_SECONDS)}
    secrets = configured_secrets(service.settings)
    masker = Masker(secrets)
    data = mask_plan(report.as_json(), secrets)
    return 200, {
        "binding": binding_id, "commit": report.commit, "exitCode": report.exit_code,
        "text": masker.text(report.text(lambda change: mask_change(masker, change))),
        "json": json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, default=str),
    }, {}
