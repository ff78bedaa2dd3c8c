"""Recovery from a lost state store on the Nodus API: a real sync creates through the
provider against a respx-served API that keeps what it is sent (to the documented
shapes: server fields in metadata, a status, 409 AlreadyExists, list by labelSelector,
merge patches); the state database is lost, a commit touches no manifest, and the new
process adopts what the API lists with this instance's labels, without a create."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from nodus_gitops.floor.identity import (
    ANNOTATION_SOURCE_REPO,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.providers.nodus import NodusConfig, NodusProvider
from nodus_gitops.workloads import CompositeProvider

from tests.fixtures_git import ManifestRepo
from tests.providers.nodus.conftest import API_KEY, RECORDED_URL, fixture
from tests.support.lost_store import PROJECT, LostStore, actions

KINDS = {"jobs": "Job", "pipelines": "Pipeline", "sweeps": "Sweep"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


class NodusAPI:
    """The resource endpoints of one Nodus API, keeping what it is sent."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as the server does: its own metadata fields and a status added."""
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        meta.update(uid=str(uuid.uuid4()), resourceVersion="1", generation=1,
                    creationTimestamp="2026-11-30T09:00:00Z")
        obj["status"] = {"phase": "Running", "costUSD": "0.01"}
        self.objects[(meta["namespace"], plural, meta["name"])] = obj
        return obj

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        assert "dryRun" not in request.url.params, "no dry run in a sync"
        parts = request.url.path.split("/")  # /apis/nodus.dev/v1/namespaces/NS/PLURAL[/NAME]
        ns, plural = parts[5], parts[6]
        name = parts[7] if len(parts) > 7 else None
        if request.method == "POST":
            body = json.loads(request.content)
            name = body["metadata"]["name"]
            if (ns, plural, name) in self.objects:
                return httpx.Response(409, json=fixture("status-already-exists.json",
                                                        plural=plural, name=name))
            return httpx.Response(201, json=self.put(plural, body))
        if name is None:  # a list, by label selector
            wanted = dict(p.split("=", 1) for p in
                          request.url.params.get("labelSelector", "").split(",") if p)
            items = [o for (n, p, _), o in sorted(self.objects.items()) if (n, p) == (ns, plural)
                     and wanted.items() <= o["metadata"].get("labels", {}).items()]
            return httpx.Response(200, json={"apiVersion": "nodus.dev/v1",
                                             "kind": f"{KINDS[plural]}List",
                                             "metadata": {}, "items": items})
        obj = self.objects.get((ns, plural, name))
        if obj is None:
            return httpx.Response(404, json=fixture("status-not-found.json", plural=plural,
                                                    name=name))
        if request.method == "GET":
            return httpx.Response(200, json=obj)
        if request.method == "PATCH":
            status = obj.pop("status")
            obj = merge_patch(obj, json.loads(request.content))
            obj["metadata"]["generation"] += 1
            obj["status"] = status
            self.objects[(ns, plural, name)] = obj
            return httpx.Response(200, json=obj)
        assert request.method == "DELETE"
        del self.objects[(ns, plural, name)]
        return httpx.Response(200, json={"kind": "Status", "status": "Success"})

    def changes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.requests if m != "GET"]


def job(name: str, cap: str = "1.00") -> str:
    return (f"apiVersion: nodus.dev/v1\nkind: Job\nmetadata:\n  name: {name}\n"
            "  labels:\n    team: vision\nspec:\n  image: nodus/pytorch\n"
            f"  command: [python, -c, pass]\n  resources:\n    gpu: L4\n"
            f"  maxCostUSD: \"{cap}\"\n")


PIPELINE = ("apiVersion: nodus.dev/v1\nkind: Pipeline\nmetadata:\n  name: p\nspec:\n"
            "  stages:\n    - name: s\n      template:\n        command: [python, -c, pass]\n")


@pytest.fixture
def api() -> Any:
    server = NodusAPI()
    with respx.mock(assert_all_mocked=True) as router:
        router.route(host="nodus.test").mock(side_effect=server)
        yield server


@pytest.fixture
def rig(api: NodusAPI, manifest_repo: ManifestRepo, state_url: str, tmp_path: Path):
    config = NodusConfig.from_settings("nodus", {"url": RECORDED_URL},
                                       environ={"NODUS_API_KEY": API_KEY})
    provider = NodusProvider(config)
    r = LostStore(manifest_repo, state_url, CompositeProvider(provider, tmp_path / "workloads"),
                  tmp_path)
    yield r
    r.close()
    provider.close()


def test_lost_store_on_nodus_adopts_without_a_create(api: NodusAPI, rig: LostStore) -> None:
    first = rig.push({"manifests/a.yaml": job("a"), "manifests/p.yaml": PIPELINE})
    assert rig.reconcile().result == "applied"
    assert api.changes() == [("POST", f"/apis/nodus.dev/v1/namespaces/{PROJECT}/jobs"),
                             ("POST", f"/apis/nodus.dev/v1/namespaces/{PROJECT}/pipelines")]
    uids = {k: r.provider_id for k, r in rig.inventory().items()}
    api.put("jobs", {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {
        "name": "foreign", "namespace": PROJECT,
        "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_INSTANCE: "elsewhere"},
        "annotations": {ANNOTATION_SOURCE_REPO: rig.binding.url}}, "spec": {}})

    rig.lose_store()
    head = rig.push_no_manifest()
    api.requests.clear()
    adopted = rig.adopt()
    report = rig.reconcile()

    a, p = ResourceKey("Job", PROJECT, "a"), ResourceKey("Pipeline", PROJECT, "p")
    assert adopted == [a, p]
    assert (report.result, report.commit, actions(report)) == ("noop", head, {})
    assert api.changes() == []  # no create, patch or delete
    inventory = rig.inventory()
    assert {k: r.provider_id for k, r in inventory.items()} == uids
    assert {r.source_commit for r in inventory.values()} == {first}
    # The server's own metadata (namespace, uid, ...) is not taken for Git's.
    assert inventory[a].manifest["metadata"] == {"name": "a", "labels": {"team": "vision"}}
    assert inventory[a].cost_usd == "0.01"
    assert (PROJECT, "jobs", "foreign") in api.objects  # not taken, not deleted

    rig.push({"manifests/a.yaml": job("a", cap="2.00"), "manifests/p.yaml": None})
    api.requests.clear()
    report = rig.reconcile()

    assert actions(report) == {"a": "patch", "p": "delete"}
    assert report.result == "applied"
    assert api.changes() == [
        ("PATCH", f"/apis/nodus.dev/v1/namespaces/{PROJECT}/jobs/a"),
        ("DELETE", f"/apis/nodus.dev/v1/namespaces/{PROJECT}/pipelines/p")]
    assert api.objects[(PROJECT, "jobs", "a")]["spec"]["maxCostUSD"] == "2.00"
    assert set(rig.inventory()) == {a}
