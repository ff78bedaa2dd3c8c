"""The Sweeps page's "From Python" example, run as written with only its import line
changed and a pure-Python command instead of bench.py, against a real served
reconciler."""

from __future__ import annotations

from tests.sdk.conftest import World


def test_from_python_example(configured: World, capsys) -> None:
    from nodus_gitops import sdk as nodus

    sweep = nodus.Sweep(
        {"image": "nodus/pytorch",
         "command": ["python3", "-c", "import nodus; nodus.log.unit('x', 1)"]},
        grid={"gpu": ["L4", "H100"], "BATCH_SIZE": [8, 16]},
        repetitions=2, max_parallel=6, max_cost=25,
    ).run()
    report = sweep.wait(timeout=60)
    print(report.phase, report.best.by_cost)
    for cell in sweep.cells():
        print(cell.index, cell.phase, cell.cost_usd, cell.wall_seconds)

    assert report.phase == "Succeeded", report
    assert [c.index for c in report.cells] == list(range(8))
    assert [c.gpu for c in report.cells] == ["L4"] * 4 + ["H100"] * 4
    assert [c.params["BATCH_SIZE"] for c in report.cells] == ["8", "8", "16", "16"] * 2
    assert report.best.by_cost in range(8) and report.best.by_throughput in range(8)
    cells = sweep.cells()
    assert [c.job for c in cells] == [f"{sweep.name}-{i}" for i in range(8)]
    assert all(c.phase == "Succeeded" and c.units_per_second for c in cells)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Succeeded {report.best.by_cost}" and len(out) == 9

    # The commit the script made is in Git, with the manifest the reconciler ran.
    head = next(c for c in configured.commits() if str(c.id) == sweep.commit)
    assert head.message.startswith(f"sweep {sweep.name}: create\n")
    assert (head.author.name, head.author.email) == ("Sweep Script", "sweeps@example.test")
    written = configured.file(f"sweeps/{sweep.name}.yaml")
    assert written["spec"]["maxCostUSD"] == "25.00"
    assert written["spec"]["matrix"] == {"gpu": ["L4", "H100"],
                                         "params": {"BATCH_SIZE": ["8", "16"]}}
