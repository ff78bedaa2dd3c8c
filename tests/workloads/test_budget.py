"""How a composite's one cost cap is shared by its children (`budget.share`, pure):
table-driven cases, one rule each."""

from __future__ import annotations

from decimal import Decimal as D

import pytest
from nodus_gitops.workloads.budget import Spend, share

DIME = D("0.1")  # USD a second


def running(cid: str, cost: str, lease: str, **kw) -> Spend:
    return Spend(cid, D(cost), started=True, lease=D(lease), **kw)


CASES = [
    # (what, cap, children, candidates) -> (admitted, leases, at_cap)
    ("two cells without estimates share what is free by need, so they reach the cap "
     "together", "0.30", [Spend("0", rate=DIME), Spend("1", rate=DIME)], ["0", "1"],
     (("0", "1"), {"0": "0.15", "1": "0.15"}, False)),
    ("a cell is leased its estimate and no more while the estimate covers the next reads",
     "100", [Spend("0", rate=D(1), estimate=D(30)), Spend("1", rate=D(1), estimate=D(30))],
     ["0", "1"], (("0", "1"), {"0": "30", "1": "30"}, False)),
    ("a cell whose estimate passes what is left does not start, nor any after it",
     "1.00", [Spend("0", D("0.52"), started=True, finished=True, rate=D(1),
                    estimate=D("0.6")),
              Spend("1", rate=D(1), estimate=D("0.6")), Spend("2", rate=D(1),
                                                             estimate=D("0.1"))],
     ["1", "2"], ((), {}, True)),
    ("a refused cell waits while another still runs; that one, near its estimate, is "
     "topped up with what is free", "1.00",
     [running("0", "0.2", "0.6", rate=D(1), estimate=D("0.6")),
      Spend("1", rate=D(1), estimate=D("0.6"))], ["1"], ((), {"0": "1"}, False)),
    ("every running cell at its lease with nothing free: at the cap",
     "0.30", [running("0", "0.15", "0.15", rate=DIME), running("1", "0.15", "0.15",
                                                                 rate=DIME)],
     [], ((), {}, True)),
    ("a raised cap tops the held cells up again", "1.30",
     [running("0", "0.15", "0.15", rate=DIME), running("1", "0.15", "0.15", rate=DIME)],
     [], ((), {"0": "0.65", "1": "0.65"}, False)),
    ("a cap raised far enough tops them up by ten seconds of spend", "10",
     [running("0", "0.15", "0.15", rate=DIME), running("1", "0.15", "0.15", rate=DIME)],
     [], ((), {"0": "1.15", "1": "1.15"}, False)),
    ("a stage held by its own lower cap is not the composite's cap", "50",
     [running("0", "0.30", "0.30", rate=D(1), own_cap=D("0.30"))], [], ((), {}, False)),
    ("a lease never passes the child's own cap", "50",
     [Spend("0", rate=D(1), own_cap=D("0.30"))], ["0"], (("0",), {"0": "0.30"}, False)),
    ("spend past the cap (a Job's own precision) frees nothing", "0.30",
     [running("0", "0.32", "0.15", rate=DIME), Spend("1", rate=DIME)], ["1"],
     ((), {}, True)),
]


@pytest.mark.parametrize(("what", "cap", "children", "candidates", "expected"), CASES,
                         ids=[c[0][:60] for c in CASES])
def test_share(what, cap, children, candidates, expected) -> None:
    allowance = share(D(cap), children, candidates)
    admitted, leases, at_cap = expected
    assert allowance.admitted == admitted
    assert {k: str(v.normalize()) for k, v in allowance.leases.items()} == {
        k: str(D(v).normalize()) for k, v in leases.items()}
    assert allowance.at_cap is at_cap


def test_leases_and_finished_spend_never_pass_the_cap() -> None:
    cap = D("2.00")
    children = [running("0", "0.40", "0.50", rate=DIME), Spend("1", D("0.70"), started=True,
                                                               finished=True),
                Spend("2", rate=D(1)), Spend("3", rate=D(1), estimate=D("0.2"))]
    allowance = share(cap, children, ["2", "3"])
    leases = {c.id: allowance.leases.get(c.id, c.lease) for c in children if not c.finished}
    assert allowance.admitted == ("2", "3")
    assert sum(v for v in leases.values() if v is not None) + D("0.70") <= cap
