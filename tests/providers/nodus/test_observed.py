"""What the provider reads from the API's objects (status per kind, dry-run defaults and
estimates) and how server causes land on a manifest's lines."""

from __future__ import annotations

import json

import pytest
from nodus_gitops.floor.errors import PermanentError
from nodus_gitops.floor.identity import LABEL_INSTANCE, LABEL_MANAGED_BY, ResourceKey
from nodus_gitops.manifests import load_documents
from nodus_gitops.providers.nodus import causes_to_problems
from nodus_gitops.providers.nodus.errors import field_path
from nodus_gitops.providers.nodus.objects import PLURALS, gpu_floors, observed_from

from tests.providers.nodus.conftest import TESTDATA, Backend, fixture, status


def _observe(name: str, kind: str = "Job"):
    obj = fixture(name)
    return observed_from(obj, ResourceKey(kind, "team-a", obj["metadata"]["name"]))


def test_failed_job_carries_reason_message_and_fix() -> None:
    observed = _observe("job-failed-oom.json")
    assert (observed.phase, observed.reason, observed.fix) == (
        "Failed", "OOMKilled", "request more spec.resources.memory or a larger GPU")
    assert observed.message == "index 0 ran out of memory (4Gi) on attempt 1"
    assert observed.cost_usd == "0.07"
    assert observed.provider_id == "6f1c2d3e-0a4b-4c5d-9e8f-112233445566"


def test_indexed_job_keeps_completed_indexes() -> None:
    observed = _observe("job-indexed-outputs.json")
    assert observed.phase == "Succeeded"
    assert observed.status["completedIndexes"] == "0-3"
    assert observed.labels[LABEL_MANAGED_BY] == "nodus-gitops"


def test_pipeline_status_keeps_its_stages() -> None:
    observed = _observe("pipeline-train-eval.json", "Pipeline")
    assert observed.phase == "Running" and observed.cost_usd == "0.02"
    assert [(s["name"], s["phase"], s["job"]) for s in observed.status["stages"]] == [
        ("prepare", "Succeeded", "train-eval-prepare"), ("train", "Running", "train-eval-train"),
        ("eval", "Queued", "train-eval-eval")]


def test_sweep_status_keeps_cells_best_and_estimate() -> None:
    observed = _observe("sweep-batch-size.json", "Sweep")
    assert observed.phase == "Succeeded" and observed.cost_usd == "0.31"
    assert len(observed.status["cells"]) == 6
    assert observed.status["best"] == {"byCost": 2, "byThroughput": 5}
    assert observed.status["estimate"]["costUSD"] == "0.33"


def test_an_object_without_status_is_queued_and_uses_its_name() -> None:
    obj = {"metadata": {"name": "fresh", "labels": {LABEL_INSTANCE: "test"}}, "spec": {}}
    observed = observed_from(obj, ResourceKey("Job", "team-a", "fresh"))
    assert (observed.phase, observed.cost_usd, observed.provider_id) == ("Queued", "0", "fresh")


def test_gpu_floors_are_found_in_every_kind() -> None:
    pipeline = {"kind": "Pipeline", "spec": {
        "defaults": {"resources": {"gpu": {"minMemory": "32Gi"}}},
        "stages": [{"name": "a", "template": {}},
                   {"name": "b", "template": {"resources": {"gpu": {"minMemory": "80Gi"}}}}]}}
    assert gpu_floors(pipeline) == {"spec.defaults.resources.gpu.minMemory": "32Gi",
                                    "spec.stages[1].template.resources.gpu.minMemory": "80Gi"}
    sweep = {"kind": "Sweep", "spec": {"template": {"spec": {"resources": {
        "gpu": {"minMemory": "48Gi"}}}}}}
    assert gpu_floors(sweep) == {"spec.template.spec.resources.gpu.minMemory": "48Gi"}
    assert gpu_floors({"kind": "Job", "spec": {"resources": {"gpu": "L4"}}}) == {}


def test_estimate_reads_the_dry_runs_status_estimate(recorded: Backend) -> None:
    wl = recorded.workload("Sweep")
    recorded.reply("POST", recorded.path("Sweep"), params={"dryRun": "All"}, status=201,
                   json=recorded.served(wl, "sweep-dry-run.json"))
    assert recorded.provider.estimate(wl.manifest, project="team-a") == "0.33"
    (post,) = recorded.take()
    recorded.assert_request(post, "POST", recorded.path("Sweep"), params={"dryRun": "All"})
    assert post.headers["Idempotency-Key"].startswith("dry-run-")


def test_estimate_without_one_raises_value_error(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    served = recorded.served(wl)
    del served["status"]
    recorded.reply("POST", recorded.path("Job"), params={"dryRun": "All"}, status=201,
                   json=served)
    with pytest.raises(ValueError, match="no estimate"):
        recorded.provider.estimate(wl.manifest, project="team-a")
    recorded.reply("POST", recorded.path("Job"), params={"dryRun": "All"}, status=503,
                   json=fixture("status-service-unavailable.json"))
    with pytest.raises(ValueError, match="503"):  # the plan shows no estimate, no traceback
        recorded.provider.estimate(wl.manifest, project="team-a")


def test_dry_run_of_an_existing_resource_becomes_a_dry_run_patch(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    path = recorded.path("Job", wl.key.name)
    recorded.reply("POST", recorded.path("Job"), params={"dryRun": "All"}, status=409,
                   json=status("already-exists", "Job", wl.key.name))
    recorded.reply("PATCH", path, params={"dryRun": "All"},
                   json=recorded.served(wl, "job-dry-run.json"))
    result = recorded.provider.dry_run(wl)
    assert result.ok and result.estimate == "0.18"
    _, patch = recorded.take()
    recorded.assert_request(patch, "PATCH", path, params={"dryRun": "All"})
    body = patch.read()
    assert b'"spec"' in body and b'"status"' not in body and b'"apiVersion"' not in body


def test_dry_run_of_a_change_sends_only_the_change(recorded: Backend) -> None:
    wl = recorded.workload("Pipeline")
    path = recorded.path("Pipeline", wl.key.name)
    recorded.reply("PATCH", path, params={"dryRun": "All"}, json=recorded.served(wl))
    recorded.provider.dry_run(wl, {"spec": {"maxCostUSD": "0.90"}})
    (patch,) = recorded.take()
    recorded.assert_request(patch, "PATCH", path, params={"dryRun": "All"})
    assert set(json.loads(patch.content)) == {"spec", "metadata"}


def test_removing_all_labels_keeps_the_ownership_labels(recorded: Backend) -> None:
    wl = recorded.workload("Job")
    path = recorded.path("Job", wl.key.name)
    recorded.reply("PATCH", path, json=recorded.served(wl))
    recorded.provider.patch(wl, {"metadata": {"labels": None}})
    (patch,) = recorded.take()
    labels = json.loads(patch.content)["metadata"]["labels"]
    assert labels == {LABEL_MANAGED_BY: "nodus-gitops", LABEL_INSTANCE: "test"}


def test_unknown_kind_is_refused_before_any_request(recorded: Backend) -> None:
    with pytest.raises(PermanentError, match="no kind 'Function'"):
        recorded.provider.get(ResourceKey("Function", "team-a", "x"))
    assert set(PLURALS) == recorded.provider.native_kinds


@pytest.mark.parametrize("text, path", [
    ("spec.timeout", ("spec", "timeout")),
    ("spec.stages[1].template.timeout", ("spec", "stages", 1, "template", "timeout")),
    ("metadata.annotations[nodus.dev/model]", ("metadata", "annotations", "nodus.dev/model")),
    ("", ()),
])
def test_field_path(text: str, path: tuple) -> None:
    assert field_path(text) == path


def test_causes_land_on_the_lines_of_the_manifest() -> None:
    name = "train-eval-pipeline.yaml"
    (doc,) = load_documents(name, (TESTDATA / "seeds" / name).read_bytes())
    lines = (TESTDATA / "seeds" / name).read_text().splitlines()
    causes = fixture("status-invalid-pipeline.json", name="train-eval")["details"]["causes"]
    problems = causes_to_problems([(c["field"], c["message"]) for c in causes], name,
                                  doc.line_of, kind="Pipeline", name="train-eval")
    (problem,) = problems
    assert problem.path == "spec.stages[1].template.timeout"
    # The seed's train stage sets no timeout: the nearest parent, its template, is named.
    assert lines[problem.line - 1].strip() == "template:"
    assert problem.line > lines.index("    - name: train")
    assert str(problem).startswith(f"{name}:{problem.line}: Pipeline/train-eval: ")
    (on_timeout,) = causes_to_problems([("spec.timeout", "bad")], name, doc.line_of)
    assert on_timeout.line == doc.line_of(("spec",))  # the Pipeline has no spec.timeout
