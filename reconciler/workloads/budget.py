"""How a Pipeline's or Sweep's one cost cap is shared by its stage or cell Jobs while they
run (a pure function: no I/O, no clock).

Each started child runs with a lease: its Job's own maxCostUSD, set by the controller, so
the backend stops it at its share exactly as it stops a Job at its cap, however seldom
anyone reads the composite. The leases and the spend of finished children never add up
to more than the cap. A backend only ever raises a Job's cap, so leases only grow:

1. A child starts only if its estimate fits in what is free of the cap (a child with no
   estimate only if anything is free); it is leased its estimate.
2. What stays free tops up the unfinished children, never past their own caps: one with
   no estimate to `TOP_UP_SECONDS` of spend ahead, one with an estimate once its lease
   would run out within `MARGIN_SECONDS` (it ran longer than expected). When not all fit,
   what is free is split by need, so the children reach their leases together, at the
   cap. A child leased only its estimate leaves the rest free for the next to start.
3. The composite is at its cap when no child can spend more (each is at its lease) and
   something still waits: a child held below its own cap, or one that did not fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal

# The service reads unfinished composites every 2 s: a lease is topped up well before a
# child reaches it, and a child holds little more than it is about to spend.
TOP_UP_SECONDS = Decimal(10)
MARGIN_SECONDS = Decimal(5)
CENT_MILLIONTH = Decimal("0.000001")  # the precision of a backend's costUSD


@dataclass(frozen=True)
class Spend:
    """One stage or cell as the shared cap sees it."""

    id: str
    cost: Decimal = Decimal(0)
    started: bool = False
    finished: bool = False
    lease: Decimal | None = None  # the maxCostUSD its Job runs with
    own_cap: Decimal | None = None  # the stage's or template's own maxCostUSD
    estimate: Decimal | None = None  # expected cost to completion; None: unknown
    rate: Decimal | None = None  # USD a second while it runs; None: unknown


@dataclass(frozen=True)
class Allowance:
    admitted: tuple[str, ...]  # the candidates that may start now, in order
    leases: dict[str, Decimal]  # the new lease of each child whose lease changes
    at_cap: bool


def share(cap: Decimal, children: list[Spend], candidates: list[str]) -> Allowance:
    """Which `candidates` (ready children, in start order) start, the leases, and
    whether the composite is at its cap."""
    by_id = {c.id: c for c in children}
    unfinished = [c for c in children if c.started and not c.finished]
    held = {c.id: max(c.lease or Decimal(0), c.cost) for c in unfinished}
    free = cap - sum((c.cost for c in children if c.finished), Decimal(0)) - sum(
        held.values(), Decimal(0))

    admitted: list[str] = []
    for cid in candidates:
        c = by_id[cid]
        need = _bounded(c.estimate, c.own_cap)
        if (free <= 0) if need is None else (need > free):
            break  # in start order: a later child never overtakes this one
        admitted.append(cid)
        held[cid] = need or Decimal(0)
        free -= need or Decimal(0)

    wants: dict[str, Decimal] = {}
    for c in [*unfinished, *(by_id[a] for a in admitted)]:
        target = _target(c, held[c.id], free)
        if target > held[c.id]:
            wants[c.id] = target - held[c.id]
    total = sum(wants.values(), Decimal(0))
    if free <= 0:
        grants: dict[str, Decimal] = {}
    elif total <= free:
        grants = wants
    else:
        grants = {cid: _floor(free * want / total) for cid, want in wants.items()}
    # Every unfinished child gets a lease, one that ran uncapped too (a cap just added).
    unleased = {c.id for c in unfinished if c.lease is None}
    leases = {cid: _floor(held[cid] + grants.get(cid, Decimal(0))) for cid in held
              if cid in grants or cid in admitted or cid in unleased}
    for cid, lease in leases.items():
        held[cid] = lease

    def spent(c: Spend) -> bool:
        return held[c.id] - c.cost < CENT_MILLIONTH

    progressing = any(not spent(c) for c in unfinished) or bool(admitted)
    below_own = any(spent(c) and (c.own_cap is None or held[c.id] < c.own_cap)
                    for c in unfinished)
    refused = len(admitted) < len(candidates)
    return Allowance(tuple(admitted), leases, not progressing and (below_own or refused))


def _target(c: Spend, current: Decimal, free: Decimal) -> Decimal:
    """The lease a child would like: its estimate, or `TOP_UP_SECONDS` of spend ahead."""
    if c.rate is None:
        ahead = current + max(free, Decimal(0))  # no rate to go by: whatever is free
    elif c.estimate is not None and current - c.cost >= c.rate * MARGIN_SECONDS:
        ahead = current  # its estimate still covers the next reads
    else:
        ahead = c.cost + c.rate * TOP_UP_SECONDS
    target = max(c.estimate or Decimal(0), ahead)
    return min(target, c.own_cap) if c.own_cap is not None else target


def _bounded(value: Decimal | None, cap: Decimal | None) -> Decimal | None:
    if value is None or cap is None:
        return value
    return min(value, cap)


def _floor(value: Decimal) -> Decimal:
    return value.quantize(CENT_MILLIONTH, rounding=ROUND_DOWN)
