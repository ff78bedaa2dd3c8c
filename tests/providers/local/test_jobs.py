"""The local backend runs Jobs to completion with the platform's results: outputs with
SHA-256, indexes, backoffLimit, timeout, memory, declared outputs, env and units."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest
from nodus_gitops.floor.errors import NotFoundError, PermanentError
from nodus_gitops.floor.phases import FIXES
from nodus_gitops.providers.base import Workload
from nodus_gitops.providers.local import copy_output, iter_logs, output_path

from tests.providers.local.conftest import HAS_BWRAP, PROJECT, manifest, writable

HELLO = """
import json, os
print("hello from index", os.environ["NODUS_INDEX"])
with open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "report.json"), "w") as f:
    json.dump({"index": os.environ["NODUS_INDEX"]}, f)
"""


SANDBOXES = [False, pytest.param(True, marks=pytest.mark.skipif(
    not HAS_BWRAP, reason="bubblewrap is not installed"))]


@pytest.mark.parametrize("bubblewrap", SANDBOXES)
def test_hello_job_succeeds_with_its_output_hashed(local_factory, tmp_path, bubblewrap):
    local = local_factory(sandbox="bubblewrap" if bubblewrap else "none")
    k = local.create(
        "hello", HELLO, outputs=[{"name": "report", "path": "/nodus/outputs/report.json"}]
    )
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    report = local.run(k).outputs / "report.json"
    expected = hashlib.sha256(report.read_bytes()).hexdigest()
    assert done.status["outputs"]["report"]["sha256"] == expected
    assert done.status["outputs"]["report"]["size"] == report.stat().st_size
    assert done.status["completedIndexes"] == "0"
    assert done.status["startTime"] and done.status["completionTime"]
    assert done.provider_id.startswith(f"local:{PROJECT}/hello/")
    assert list(iter_logs(local.root, k)) == ["hello from index 0"]

    assert output_path(local.root, k, "report") == report
    path, size, sha = copy_output(local.root, k, "report", tmp_path / "out.json")
    assert (path, size, sha) == (tmp_path / "out.json", report.stat().st_size, expected)
    assert json.loads(path.read_text()) == {"index": "0"}


def test_copy_output_refuses_a_stored_output_that_changed(local, tmp_path):
    k = local.create(
        "tamper", HELLO, outputs=[{"name": "report", "path": "/nodus/outputs/report.json"}]
    )
    done = local.wait(k)
    assert done.phase == "Succeeded"
    report = local.run(k).outputs / "report.json"
    if done.status["disk"] == "filesystem":  # stored outputs are read-only once it finished
        with pytest.raises(OSError, match="Read-only file system"):
            report.write_text("changed")
    with writable(local.run(k)):
        report.write_text("changed")
    with pytest.raises(PermanentError, match="does not match"):
        copy_output(local.root, k, "report", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(NotFoundError, match="no stored output 'nope'"):
        copy_output(local.root, k, "nope", tmp_path)


@pytest.mark.parametrize("bubblewrap", SANDBOXES)
def test_indexed_job_runs_every_index_two_at_a_time(local_factory, bubblewrap):
    local = local_factory(sandbox="bubblewrap" if bubblewrap else "none")
    code = """
import os, time, json
i = int(os.environ["NODUS_INDEX"])
assert os.environ["JOB_COMPLETION_INDEX"] == str(i) and os.environ["NODUS_COMPLETIONS"] == "4"
os.makedirs(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "shards"), exist_ok=True)
with open(os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "shards", f"part-{i}.jsonl"), "w") as f:
    f.write(json.dumps({"index": i, "start": time.time()}) + "\\n")
time.sleep(0.3)
"""
    k = local.create(
        "indexed",
        code,
        completions=4,
        parallelism=2,
        outputs=[{"name": "shards", "path": "/nodus/outputs/shards"}],
    )
    seen_active = set()
    done = local.wait(
        k, lambda o: seen_active.add(o.status.get("active")) or o.phase == "Succeeded"
    )
    assert done.status["completedIndexes"] == "0-3"
    assert done.status["succeeded"] == 4 and done.status["attempts"] == 4
    assert max(seen_active) <= 2
    shards = local.run(k).outputs / "shards"
    assert sorted(p.name for p in shards.iterdir()) == [f"part-{i}.jsonl" for i in range(4)]
    starts = sorted(json.loads((shards / f"part-{i}.jsonl").read_text())["start"] for i in range(4))
    assert starts[2] - starts[0] >= 0.25  # the third index waited for a free slot
    assert done.status["outputs"]["shards"]["type"] == "directory"
    assert [list(iter_logs(local.root, k, index=i)) for i in range(4)] == [[]] * 4


def test_backoff_limit_exceeded_after_retries(local):
    k = local.create("flaky", "import sys; print('boom'); sys.exit(3)", backoffLimit=2)
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "BackoffLimitExceeded")
    assert done.status["failed"] == 3 and done.status["attempts"] == 3
    assert "exited with code 3" in done.message and "\n" not in done.message
    assert done.fix == FIXES["BackoffLimitExceeded"]
    assert sorted(p.name for p in local.run(k).logs.iterdir()) == ["0-1.log", "0-2.log", "0-3.log"]


def test_timeout_fails_with_deadline_exceeded(local):
    k = local.create("slow", "import time; time.sleep(60)", timeout="1s")
    running = local.wait(k, "Running")
    assert running.status["timeoutTime"] is not None
    done = local.wait(k, timeout=10)
    assert (done.phase, done.reason, done.fix) == (
        "Failed",
        "DeadlineExceeded",
        FIXES["DeadlineExceeded"],
    )
    assert 0.9 <= done.status["wallSeconds"] < 5


def test_memory_limit_kills_with_oom(local):
    code = "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')"
    k = local.create("hog", code, resources={"memory": "64Mi"}, backoffLimit=3)
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "OOMKilled"), done
    assert done.fix == FIXES["OOMKilled"] and "64Mi" in done.message
    assert "survived" not in local.log(k)


def test_memory_limit_without_cgroups_uses_rlimit_as(local_factory):
    local = local_factory(use_cgroups=False)
    k = local.create("hog-rlimit", "b = bytearray(512 << 20)\nprint('survived')",
                     resources={"memory": "128Mi"})
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "OOMKilled"), local.log(k)
    assert "MemoryError" in local.log(k)


def test_declared_output_not_written_is_invalid_output_path(local):
    k = local.create(
        "forgot", "print('no outputs')", outputs=[{"name": "model", "path": "/nodus/outputs/model"}]
    )
    done = local.wait(k)
    assert (done.phase, done.reason) == ("Failed", "InvalidOutputPath")
    assert "model" in done.message and done.fix == FIXES["InvalidOutputPath"]
    assert "/nodus/outputs/model was not written" in done.message, done.message  # as the Job
    assert str(local.root) not in done.message  # sees it, not this host's folder for it
    assert done.status["outputs"] == {}


def test_output_symlink_outside_the_outputs_dir_is_not_followed(local, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    code = f"""
import os
d = os.path.join(os.environ["NODUS_OUTPUTS_DIR"], "dir")
os.makedirs(d)
open(os.path.join(d, "a.txt"), "w").write("a")
os.symlink({str(secret)!r}, os.path.join(d, "leak.txt"))
"""
    k = local.create("links", code, outputs=[{"name": "dir", "path": "/nodus/outputs/dir"}])
    done = local.wait(k)
    assert done.phase == "Succeeded"
    assert done.status["outputs"]["dir"]["size"] == 1
    path, size, _ = copy_output(local.root, k, "dir", tmp_path / "copy")
    assert sorted(p.name for p in path.iterdir()) == ["a.txt"] and size == 1


@pytest.mark.parametrize("bubblewrap", SANDBOXES)
def test_run_environment(local_factory, tmp_path, bubblewrap):
    local = local_factory(sandbox="bubblewrap" if bubblewrap else "none")
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("input!")
    code = """
import json, os
keys = ["NODUS_JOB", "NODUS_INDEX", "JOB_COMPLETION_INDEX", "NODUS_COMPLETIONS",
        "NODUS_OUTPUTS_DIR", "NODUS_CHECKPOINT_DIR", "NODUS_INPUT_TRAIN_DATA",
        "NODUS_PARAM_BATCH_SIZE", "GREETING", "NODUS_SECRET", "CUDA_VISIBLE_DEVICES",
        "SECRET_TOKEN"]
env = {k: os.environ.get(k) for k in keys}
env["input"] = open(os.path.join(os.environ["NODUS_INPUT_TRAIN_DATA"], "x.txt")).read()
env["cwd"] = os.getcwd()
print(json.dumps(env))
"""
    os.environ["SECRET_TOKEN"] = "reconciler-credential"
    try:
        k = local.create(
            "envy",
            code,
            env={"NODUS_PARAM_BATCH_SIZE": "64", "GREETING": "hi", "NODUS_SECRET": "x"},
            inputs=[{"name": "train-data", "path": str(data)}],
        )
        done = local.wait(k)
    finally:
        del os.environ["SECRET_TOKEN"]
    assert done.phase == "Succeeded", local.log(k)
    env = json.loads(local.log(k))
    run = local.run(k)
    assert env["NODUS_JOB"] == "envy" and env["NODUS_INDEX"] == env["JOB_COMPLETION_INDEX"] == "0"
    assert env["NODUS_COMPLETIONS"] == "1"
    assert env["NODUS_PARAM_BATCH_SIZE"] == "64" and env["GREETING"] == "hi"
    assert env["NODUS_SECRET"] is None and env["SECRET_TOKEN"] is None
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["input"] == "input!"
    if bubblewrap:
        assert env["NODUS_OUTPUTS_DIR"] == "/nodus/outputs"
        assert env["NODUS_CHECKPOINT_DIR"] == "/nodus/state"
        assert env["NODUS_INPUT_TRAIN_DATA"] == "/nodus/inputs/train-data"
        assert env["cwd"] == "/nodus/work"
    else:
        assert env["NODUS_OUTPUTS_DIR"] == str(run.run_outputs_for(0, 1))  # the run's own
        assert env["NODUS_CHECKPOINT_DIR"] == str(run.state_for(0))
        assert env["NODUS_INPUT_TRAIN_DATA"] == str(data)
        reasons = [e["reason"] for e in run.read_events()]
        assert reasons.count("NoSandbox") == 1
    assert "EnvIgnored" in [e["reason"] for e in run.read_events()]


def test_working_dir_and_argv_without_a_shell(local, tmp_path):
    k = local.create(
        "argv",
        command=[
            sys.executable,
            "-c",
            "import os, sys; print(os.getcwd(), sys.argv[1:])",
            "a b",
            "$HOME",
        ],
        workingDir=str(tmp_path),
    )
    assert local.wait(k).phase == "Succeeded"
    assert local.log(k) == f"{tmp_path} ['a b', '$HOME']"


def test_throughput_units_from_nodus_log_unit(local):
    code = """
import time
import nodus
for step in range(25):
    nodus.log.unit(step, 1.0)
time.sleep(0.2)
"""
    k = local.create("units", code, completions=2, parallelism=2)
    done = local.wait(k)
    assert done.phase == "Succeeded", local.log(k)
    assert done.status["units"] == 50
    assert done.status["unitsPerSecond"] == pytest.approx(50 / done.status["wallSeconds"], rel=0.01)


def test_unmapped_image_with_strict_images_fails_image_pull(local_factory, tmp_path):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "tool").write_text("#!/bin/sh\necho from-the-image\n")
    (venv_bin / "tool").chmod(0o755)
    local = local_factory(strict_images=True, images={"nodus/tools": str(venv_bin)})
    bad = local.create("bad-image", image="nodus/missing")
    good = local.create("good-image", command=["tool"], image="nodus/tools")
    done = local.wait(bad)
    assert (done.phase, done.reason, done.fix) == (
        "Failed",
        "ImagePullFailed",
        FIXES["ImagePullFailed"],
    )
    assert "nodus/missing" in done.message
    assert local.wait(good).phase == "Succeeded" and local.log(good) == "from-the-image"


def test_create_twice_with_one_key_starts_one_job(local):
    k = local.create("once", "print('ran')")
    again = local.provider.create(Workload(k, manifest("once", "print('ran')"), "hash"), "once-1")
    assert again.key == k
    assert local.wait(k).phase == "Succeeded"
    assert (
        local.provider.create(Workload(k, manifest("once"), "hash"), "once-1").phase == "Succeeded"
    )
    assert len(list(local.run(k).logs.iterdir())) == 1
    with pytest.raises(PermanentError, match="already exists"):
        local.provider.create(Workload(k, manifest("once"), "hash"), "another-key")


def test_invalid_spec_is_a_permanent_error(local):
    from nodus_gitops.floor.identity import ResourceKey

    k = ResourceKey("Job", PROJECT, "broken")
    with pytest.raises(PermanentError, match="spec.command"):
        local.provider.create(Workload(k, manifest("broken", command=[]), "h"), "k")
    assert local.provider.get(k) is None
    with pytest.raises(PermanentError, match="runs Jobs"):
        local.provider.get(ResourceKey("Pipeline", PROJECT, "p"))


def test_follow_logs_streams_until_the_job_ends(local):
    code = "import time\nfor i in range(5):\n    print('line', i)\n    time.sleep(0.1)"
    k = local.create("chatty", code)
    lines = list(iter_logs(local.root, k, follow=True))
    assert lines == [f"line {i}" for i in range(5)]
    assert local.provider.get(k).phase == "Succeeded"


def test_two_reconcilers_creating_one_job_at_once_start_it_once(local):
    import threading

    from nodus_gitops.floor.identity import ResourceKey
    k = ResourceKey("Job", PROJECT, "race")
    providers = [local.reopen() for _ in range(4)]
    results = []
    barrier = threading.Barrier(len(providers))

    def create(p):
        barrier.wait()
        results.append(p.create(Workload(k, manifest("race", "print('ran')"), "h"), "race-1"))

    threads = [threading.Thread(target=create, args=(p,)) for p in providers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    local.keys.append(k)
    assert len({o.provider_id for o in results}) == 1
    assert local.wait(k).phase == "Succeeded"
    assert local.log(k) == "ran" and len(list(local.run(k).logs.iterdir())) == 1
    assert [p.name for p in local.run(k).path.parent.iterdir()] == ["race"]


def test_patch_refuses_changes_that_need_a_new_job(local):
    k = local.create("fixed", "import time; time.sleep(30)")
    with pytest.raises(PermanentError, match="spec.command cannot change"):
        local.patch(k, command=["true"])
    local.patch(k, state="Cancelled")
    assert local.wait(k).phase == "Cancelled"


def test_env_in_the_kubernetes_list_form_reaches_the_command(local):
    """`env: [{name: X, value: "1"}]`, as the platform's kubectl users write it, runs as
    the mapping form does."""
    code = "import os; print(os.environ['GREETING'], os.environ['COUNT'])"
    k = local.create("listed-env", code,
                     env=[{"name": "GREETING", "value": "hi"}, {"name": "COUNT", "value": "3"}])
    done = local.wait(k)
    assert done.phase == "Succeeded", done
    assert local.log(k).strip() == "hi 3"
