"""The Nodus API contract, for Job, Pipeline and Sweep: every request the provider sends
and every answer it reads. Runs recorded always, and live when NODUS_API_URL is set."""

from __future__ import annotations

import pytest
from nodus_gitops.floor.errors import NotFoundError, PermanentError
from nodus_gitops.floor.identity import (
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
)
from nodus_gitops.floor.phases import Phase
from nodus_gitops.providers.nodus import InvalidManifest

from tests.providers.nodus.conftest import (
    KINDS,
    Backend,
    fixture,
    sent_json,
    status,
)

SELECTOR = "nodus.dev/managed-by=nodus-gitops,nodus.dev/instance={}"
INVALID_TIMEOUT = {  # where each kind puts a Job's timeout, and the 422 it earns
    "Job": ("spec.timeout", "status-invalid-job.json"),
    "Pipeline": ("spec.stages[1].template.timeout", "status-invalid-pipeline.json"),
    "Sweep": ("spec.template.spec.timeout", "status-invalid-sweep.json"),
}


def _created_body(nodus: Backend, workload) -> dict:
    body = {**workload.manifest, "metadata": {**workload.manifest["metadata"],
                                              "namespace": nodus.project}}
    return body


@pytest.mark.parametrize("kind", KINDS)
def test_lifecycle_create_get_list_patch_delete(nodus: Backend, kind: str) -> None:
    wl = nodus.workload(kind)
    name, served = wl.key.name, nodus.served(wl)

    nodus.reply("POST", nodus.path(kind), status=201, json=served)
    created = nodus.provider.create(wl, "idem-create-1")
    (post,) = nodus.take()
    nodus.assert_request(post, "POST", nodus.path(kind), body=_created_body(nodus, wl),
                   idempotency_key="idem-create-1")
    assert created.key == wl.key
    assert created.labels[LABEL_MANAGED_BY] == MANAGED_BY_VALUE
    assert created.labels[LABEL_INSTANCE] == nodus.instance
    assert created.annotations[ANNOTATION_SPEC_HASH] == "h1"
    assert created.phase in set(Phase)
    if not nodus.live:
        assert created.provider_id == served["metadata"]["uid"]
        assert created.phase == served["status"]["phase"]
        assert created.cost_usd == served["status"]["costUSD"]

    nodus.reply("GET", nodus.path(kind, name), json=served)
    got = nodus.provider.get(wl.key)
    (get,) = nodus.take()
    nodus.assert_request(get, "GET", nodus.path(kind, name))
    assert got is not None and got.provider_id == created.provider_id

    for other in KINDS:
        listed = [served] if other == kind else []
        nodus.reply("GET", nodus.path(other),
                    params={"labelSelector": SELECTOR.format(nodus.instance)},
                    json={"apiVersion": "nodus.dev/v1", "kind": f"{other}List",
                          "metadata": {"resourceVersion": "52000"}, "items": listed})
    owned = nodus.provider.list_owned(nodus.project, nodus.instance)
    requests = nodus.take()
    assert len(requests) == len(KINDS)
    for request, other in zip(requests, KINDS, strict=True):
        nodus.assert_request(request, "GET", nodus.path(other),
                       params={"labelSelector": SELECTOR.format(nodus.instance)})
    assert [o.key for o in owned] == [wl.key]

    changes = {"spec": {"maxCostUSD": "0.02"}}
    nodus.reply("PATCH", nodus.path(kind, name),
                json=nodus.served(wl, spec={"maxCostUSD": "0.02"}))
    patched = nodus.provider.patch(wl, changes)
    (patch,) = nodus.take()
    meta = wl.manifest["metadata"]
    # Only the change and the ownership metadata: never the whole object.
    nodus.assert_request(patch, "PATCH", nodus.path(kind, name), body={
        "spec": {"maxCostUSD": "0.02"},
        "metadata": {"labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE,
                                LABEL_INSTANCE: nodus.instance},
                     "annotations": {k: v for k, v in meta["annotations"].items()
                                     if k.startswith("nodus.dev/source-") or
                                     k == ANNOTATION_SPEC_HASH}}})
    assert patched.key == wl.key

    nodus.reply("DELETE", nodus.path(kind, name),
                json={"kind": "Status", "status": "Success", "code": 200})
    nodus.provider.delete(wl.key)
    (delete,) = nodus.take()
    nodus.assert_request(delete, "DELETE", nodus.path(kind, name))
    assert delete.content == b""


@pytest.mark.parametrize("kind", KINDS)
def test_missing_resource_get_none_delete_ok_patch_not_found(nodus: Backend, kind: str) -> None:
    wl = nodus.workload(kind, name="never-created")
    name = wl.key.name
    nodus.reply("GET", nodus.path(kind, name), status=404, json=status("not-found", kind, name))
    assert nodus.provider.get(wl.key) is None
    nodus.reply("DELETE", nodus.path(kind, name), status=404,
                json=status("not-found", kind, name))
    nodus.provider.delete(wl.key)  # already gone is success
    nodus.reply("PATCH", nodus.path(kind, name), status=404,
                json=status("not-found", kind, name))
    with pytest.raises(NotFoundError, match=name):
        nodus.provider.patch(wl, {"spec": {"maxCostUSD": "1"}})
    get, delete, patch = nodus.take()
    nodus.assert_request(get, "GET", nodus.path(kind, name))
    nodus.assert_request(delete, "DELETE", nodus.path(kind, name))
    nodus.assert_request(patch, "PATCH", nodus.path(kind, name))


@pytest.mark.parametrize("kind", KINDS)
def test_create_conflict_adopts_its_own_earlier_create(nodus: Backend, kind: str) -> None:
    wl = nodus.workload(kind)
    name, served = wl.key.name, nodus.served(wl)
    nodus.reply("POST", nodus.path(kind), status=201, json=served)
    first = nodus.provider.create(wl, "idem-1")
    # A second key (as after a lost answer and a new commit): the server says 409.
    nodus.reply("POST", nodus.path(kind), status=409,
                json=status("already-exists", kind, name))
    nodus.reply("GET", nodus.path(kind, name), json=served)
    again = nodus.provider.create(wl, "idem-2")
    assert again.provider_id == first.provider_id
    post1, post2, get = nodus.take()
    nodus.assert_request(post1, "POST", nodus.path(kind), idempotency_key="idem-1")
    nodus.assert_request(post2, "POST", nodus.path(kind), idempotency_key="idem-2",
                   body=sent_json(post1))
    nodus.assert_request(get, "GET", nodus.path(kind, name))


@pytest.mark.parametrize("existing", ["unmanaged", "other-instance", "other-spec"])
def test_create_conflict_with_a_resource_not_ours_is_refused(nodus: Backend,
                                                              existing: str) -> None:
    theirs = {"unmanaged": {"managed": False}, "other-instance": {"instance": "prod"},
              "other-spec": {"spec_hash": "h0"}}[existing]
    there = nodus.workload("Job", **theirs)
    wl = nodus.workload("Job")
    name = wl.key.name
    nodus.reply("POST", nodus.path("Job"), status=201, json=nodus.served(there))
    nodus.provider.create(there, "idem-theirs")
    nodus.reply("POST", nodus.path("Job"), status=409,
                json=status("already-exists", "Job", name))
    nodus.reply("GET", nodus.path("Job", name), json=nodus.served(there))
    expected = {"unmanaged": "not managed by nodus-gitops", "other-instance": "'prod'",
                "other-spec": "another spec"}[existing]
    with pytest.raises(PermanentError, match=expected):
        nodus.provider.create(wl, "idem-ours")
    _, post, get = nodus.take()
    nodus.assert_request(post, "POST", nodus.path("Job"), idempotency_key="idem-ours")
    nodus.assert_request(get, "GET", nodus.path("Job", name))


@pytest.mark.parametrize("kind", KINDS)
def test_invalid_manifest_carries_the_servers_causes(nodus: Backend, kind: str) -> None:
    field, answer = INVALID_TIMEOUT[kind]
    wl = nodus.workload(kind)
    manifest = wl.manifest
    target = {"Job": lambda s: s, "Pipeline": lambda s: s["stages"][1]["template"],
              "Sweep": lambda s: s["template"]["spec"]}[kind](manifest["spec"])
    target["timeout"] = "ten minutes"
    nodus.reply("POST", nodus.path(kind), status=422,
                json=fixture(answer, name=wl.key.name))
    with pytest.raises(InvalidManifest) as caught:
        nodus.provider.create(wl, "idem-invalid")
    (post,) = nodus.take()
    nodus.assert_request(post, "POST", nodus.path(kind), body=_created_body(nodus, wl))
    fields = [f for f, _ in caught.value.causes]
    assert field in fields
    if not nodus.live:
        assert caught.value.causes == [(field, 'Invalid value: "ten minutes": is not a '
                                               "duration (use 90s, 10m, 2h)")]


def test_dry_run_shows_the_floor_the_server_picked(nodus: Backend) -> None:
    # No GPU type and no minMemory: the model annotation sets the floor (24Gi for 8B).
    wl = nodus.workload("Job", spec={"resources": {"gpu": {}}},
                        annotations={"nodus.dev/model": "meta-llama/Llama-3.1-8B"})
    nodus.reply("POST", nodus.path("Job"), params={"dryRun": "All"}, status=201,
                json=nodus.served(wl, "job-dry-run.json"))
    result = nodus.provider.dry_run(wl)
    (post,) = nodus.take()
    nodus.assert_request(post, "POST", nodus.path("Job"), params={"dryRun": "All"},
                   body=_created_body(nodus, wl))
    assert result.ok
    assert result.min_memory == "24Gi"
    assert result.floors == {"spec.resources.gpu.minMemory": "24Gi"}
    assert result.manifest["spec"]["resources"]["gpu"]["minMemory"] == "24Gi"
    if not nodus.live:
        assert result.estimate == "0.18"


def test_dry_run_of_an_invalid_manifest_returns_causes(nodus: Backend) -> None:
    wl = nodus.workload("Sweep")
    wl.manifest["spec"]["template"]["spec"]["timeout"] = "ten minutes"
    nodus.reply("POST", nodus.path("Sweep"), params={"dryRun": "All"}, status=422,
                json=fixture("status-invalid-sweep.json", name=wl.key.name))
    result = nodus.provider.dry_run(wl)
    (post,) = nodus.take()
    nodus.assert_request(post, "POST", nodus.path("Sweep"), params={"dryRun": "All"})
    assert not result.ok
    assert "spec.template.spec.timeout" in [f for f, _ in result.causes]


def test_wrong_api_key_is_a_permanent_error_naming_the_setting(nodus: Backend) -> None:
    bad = nodus.make_provider("nk_wrong_key_000")
    wl = nodus.workload("Job")
    nodus.reply("GET", nodus.path("Job", wl.key.name), status=401,
                json=fixture("status-unauthorized.json"))
    with pytest.raises(PermanentError) as caught:
        bad.get(wl.key)
    (get,) = nodus.take()
    nodus.assert_request(get, "GET", nodus.path("Job", wl.key.name), key="nk_wrong_key_000")
    message = str(caught.value)
    assert "401" in message and "NODUS_API_KEY" in message and "apiKeyEnv" in message
    assert "nk_wrong_key_000" not in message and nodus.key not in message
