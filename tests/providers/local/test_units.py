"""Pure parts of the local backend, table-driven: spec parsing, index ranges, GPU
matching, recovery decisions and output digests."""

from __future__ import annotations

import hashlib

import pytest
from nodus_gitops.providers.local.gpus import Slot, gpu_type_from_name, matches
from nodus_gitops.providers.local.outputs import digest
from nodus_gitops.providers.local.recovery import decide
from nodus_gitops.providers.local.spec import (
    GpuRequest,
    SpecError,
    compact_indexes,
    parse_duration,
    parse_gpu,
    parse_job,
    parse_memory,
)

from tests.providers.local.conftest import manifest


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1),
        ("10m", 600),
        ("2h", 7200),
        ("1h30m", 5400),
        ("500ms", 0.5),
        (90, 90),
        ("15", 15),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "1x", "m1", "1 h", True])
def test_bad_durations_name_the_field(bad):
    with pytest.raises(SpecError, match="timeout"):
        parse_duration(bad, "timeout")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64Mi", 64 << 20),
        ("4Gi", 4 << 30),
        ("1G", 10**9),
        ("512", 512),
        (1024, 1024),
    ],
)
def test_memory(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize(
    ("value", "request_"),
    [
        ("L4", GpuRequest("L4", 1)),
        ("H100:8", GpuRequest("H100", 8)),
        ("H100!", GpuRequest("H100", 1, exact=True)),
        ({"type": "A10", "count": 2, "minMemory": "24Gi"}, GpuRequest("A10", 2, 24 << 30)),
        ({"minMemory": "40Gi"}, GpuRequest(None, 1, 40 << 30)),
        (None, None),
    ],
)
def test_gpu_requests(value, request_):
    assert parse_gpu(value) == request_


def test_gpu_matching_and_names():
    h100 = Slot("gpu0", 0, "H100", 80 << 30, False)
    assert matches(h100, GpuRequest("h100")) and matches(h100, GpuRequest(None, 1, 40 << 30))
    assert not matches(h100, GpuRequest("L4")) and not matches(h100, GpuRequest(None, 1, 96 << 30))
    assert gpu_type_from_name("NVIDIA H100 80GB HBM3") == "H100"
    assert gpu_type_from_name("NVIDIA H200") == "H200"
    assert gpu_type_from_name("Tesla T4") == "T4"


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([], ""),
        ([0], "0"),
        ([0, 1, 2, 5], "0-2,5"),
        ([3, 1, 2, 7, 8, 10], "1-3,7-8,10"),
    ],
)
def test_compact_indexes(indexes, text):
    assert compact_indexes(indexes) == text


def test_job_defaults_and_reserved_env():
    spec = parse_job(
        manifest(
            "j",
            env=[{"name": "NODUS_X", "value": "1"}, {"name": "NODUS_PARAM_A", "value": "2"}],
            completions=3,
            parallelism=8,
            activeDeadlineSeconds=30,
        )
    )
    assert (spec.completions, spec.parallelism, spec.backoff_limit) == (3, 3, 6)
    assert spec.env == (("NODUS_PARAM_A", "2"),) and spec.dropped_env == ("NODUS_X",)
    assert spec.timeout == 30 and spec.memory_limit is None and spec.cpu == 1
    assert spec.recovery.continuity == "Checkpointed"
    with pytest.raises(SpecError, match="outputs"):
        _ = (
            parse_job(manifest("j", outputs=[{"name": "o", "path": "/etc/passwd"}]))
            .outputs[0]
            .relative
        )


def _status(**kw):
    base = {
        "phase": "Running",
        "runs": {"0": {}},
        "recoveries": 0,
        "shortRecoveries": 0,
        "segmentStart": 100.0,
        "heartbeat": 200.0,
    }
    return {**base, **kw}


@pytest.mark.parametrize(
    ("status", "recovery", "desired", "action", "reason"),
    [
        (_status(), {}, "Running", "recover", None),
        (_status(phase="Suspended", runs={}), {}, "Suspended", "restart", None),
        (_status(phase="Queued", runs={}), {}, "Running", "restart", None),
        (_status(), {}, "Cancelled", "cancel", None),
        (_status(), {"continuity": "Ephemeral"}, "Running", "fail", "RecoveryLimitExceeded"),
        (_status(), {"onInterruption": "Fail"}, "Running", "fail", "RecoveryLimitExceeded"),
        (_status(), {"maxAttempts": 1}, "Running", "fail", "RecoveryLimitExceeded"),
        (_status(recoveries=2, indexRecoveries={"0": 2}), {"maxAttempts": 3}, "Running", "fail",
         "RecoveryLimitExceeded"),
        (_status(recoveries=2, indexRecoveries={"1": 2}), {"maxAttempts": 3}, "Running",
         "recover", None),
        (_status(phase="Recovering", runs={}), {"maxAttempts": 1}, "Running", "restart", None),
        (_status(heartbeat=110.0), {"minProgressDuration": "30s"}, "Running", "recover", None),
        (_status(heartbeat=110.0, recoveries=1), {"minProgressDuration": "30s"}, "Running",
         "recover", None),
        (
            _status(heartbeat=110.0, shortRecoveries=1, recoveries=2),
            {"minProgressDuration": "30s"},
            "Running",
            "fail",
            "NoProgress",
        ),
        (_status(shortRecoveries=1), {"minProgressDuration": "30s"}, "Running", "recover", None),
    ],
)
def test_recovery_decisions(status, recovery, desired, action, reason):
    decision = decide(status, parse_job(manifest("j", recovery=recovery)), desired)
    assert (decision.action, decision.reason) == (action, reason)


def test_a_recovery_says_what_each_lost_index_has_used_of_its_attempts():
    spec = parse_job(manifest("j", recovery={"maxAttempts": 3}))
    lost = decide(_status(runs={"0": {}, "2": {}}, recoveries=4, indexRecoveries={"2": 1}),
                  spec, "Running")
    assert lost.action == "recover"
    assert lost.message == ("the supervisor is gone; index 0 has lost 1 of its 3 attempts; "
                            "index 2 has lost 2 of its 3 attempts (recovery.maxAttempts)")
    # Lost while provisioning: no index was running, so none used an attempt.
    early = decide(_status(phase="Provisioning", runs={}), spec, "Running")
    assert early.action == "recover"
    assert early.message is not None and "no index was running" in early.message


def test_directory_digest_covers_names_and_contents(tmp_path):
    d = tmp_path / "out"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("a")
    (d / "sub" / "b.txt").write_text("bb")
    size, sha = digest(d, tmp_path)
    lines = "".join(
        f"{rel}\0{len(body)}\0{hashlib.sha256(body.encode()).hexdigest()}\n"
        for rel, body in (("a.txt", "a"), ("sub/b.txt", "bb"))
    )
    assert (size, sha) == (3, hashlib.sha256(lines.encode()).hexdigest())
    (d / "sub" / "b.txt").rename(d / "sub" / "c.txt")
    assert digest(d, tmp_path)[1] != sha


def test_a_jobs_events_stay_bounded_and_say_what_went(tmp_path) -> None:
    """One line an attempt, without end (a Job retried for ever): the events file keeps
    its newest half past MAX_EVENTS_BYTES, the first line saying how many went."""
    from nodus_gitops.providers.local.rundir import MAX_EVENTS_BYTES, RunDir

    run = RunDir(tmp_path / "p" / "j")
    run.path.mkdir(parents=True)
    for attempt in range(12_000):
        run.event("Failed", f"attempt {attempt} exited with code 1 " + "x" * 60, "Warning")
    assert run.events.stat().st_size <= MAX_EVENTS_BYTES
    events = run.read_events()
    assert events[0]["reason"] == "EventsTrimmed" and "older events were dropped" in \
        events[0]["message"]
    assert events[-1]["message"].startswith("attempt 11999 ")
    numbers = [int(e["message"].split()[1]) for e in events[1:]]
    assert numbers == sorted(numbers) and len(numbers) > 1000  # the newest, in order
