"""The Nodus provider: Jobs, Pipelines and Sweeps through the Kubernetes-style Nodus API.

Resources live at `/apis/nodus.dev/v1/namespaces/{project}/{jobs|pipelines|sweeps}`.
The platform runs stages and cells itself, so every kind passes straight through. Every
request goes through `_request`, and every failed answer through `errors.raise_for_status`:
one seam for I/O, one for errors. Creates carry the reconciler's Idempotency-Key, so a
create retried after a timeout never starts a second run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from nodus_gitops.floor.errors import NotFoundError, PermanentError, ProviderError, TransientError
from nodus_gitops.floor.identity import (
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    ResourceKey,
)
from nodus_gitops.floor.problems import Problem
from nodus_gitops.providers.base import DryRuns, Estimates, Observed, Suspends, Workload
from nodus_gitops.providers.nodus.config import NodusConfig
from nodus_gitops.providers.nodus.errors import (
    AlreadyExists,
    Cause,
    Conflict,
    InvalidManifest,
    causes_to_problems,
    raise_for_status,
    transport_error,
)
from nodus_gitops.providers.nodus.objects import (
    PLURALS,
    api_path,
    create_body,
    dry_run_key,
    estimate_of,
    gpu_floors,
    observed_from,
    patch_body,
)

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class DryRunResult:
    """What the server would store (`manifest`, defaults filled in) or why it would refuse
    (`causes`), with the cost estimate and the GPU memory floor it picked."""

    manifest: dict[str, Any]
    causes: list[Cause] = field(default_factory=list)
    message: str | None = None
    estimate: str | None = None
    min_memory: str | None = None
    floors: dict[str, str] = field(default_factory=dict)  # field path -> minMemory

    @property
    def ok(self) -> bool:
        return not self.causes and self.message is None

    def problems(self, manifest_file: str, doc_line_of: Callable[[tuple], int], *,
                 kind: str = "", name: str = "") -> list[Problem]:
        return causes_to_problems(self.causes, manifest_file, doc_line_of, kind=kind, name=name)


class _BearerAuth(httpx.Auth):
    """Sets `Authorization: Bearer` per request (a token file may rotate)."""

    def __init__(self, token: Callable[[], str]) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        request.headers["Authorization"] = f"Bearer {self._token()}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(<hidden>)"


class NodusProvider(Estimates, DryRuns, Suspends):
    """A `providers.base.Provider` for the Nodus API. `transport` and `now` are seams for
    tests; `conflict_retries` bounds re-reads after a 409 Conflict on patch. Logs and
    outputs stay on the platform (read them with its own tools): no `HasLogs`."""

    name = "nodus"
    native_kinds = frozenset(PLURALS)

    def __init__(self, config: NodusConfig, *, transport: httpx.BaseTransport | None = None,
                 now: Callable[[], datetime] | None = None, conflict_retries: int = 3) -> None:
        self.config = config
        self._now = now or (lambda: datetime.now(UTC))
        self._conflict_retries = conflict_retries
        auth = _BearerAuth(config.credential.token) if config.credential else None
        self._client = httpx.Client(base_url=config.url, auth=auth, verify=config.verify,
                                    timeout=config.timeout, transport=transport,
                                    headers={"Accept": "application/json",
                                             "User-Agent": "nodus-gitops"})

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any], *,
                      environ: Mapping[str, str] | None = None, base_dir: Path | None = None,
                      **kwargs: Any) -> NodusProvider:
        """The provider a config's `providers.<name>` section describes."""
        config = NodusConfig.from_settings(name, settings, environ=environ, base_dir=base_dir)
        return cls(config, **kwargs)

    def __repr__(self) -> str:
        return f"NodusProvider(url={self.config.url!r}, key from {self.config.credential_setting})"

    def close(self) -> None:
        self._client.close()

    def can_suspend(self) -> bool:
        return True  # the platform suspends and resumes on a patch of spec.state

    def __enter__(self) -> NodusProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the Provider protocol ----------------------------------------------------------

    def create(self, workload: Workload, idempotency_key: str) -> Observed:
        key = workload.key
        try:
            obj = self._request("POST", api_path(key.kind, key.project), f"create {key}",
                                json=create_body(workload),
                                headers={"Idempotency-Key": idempotency_key})
        except AlreadyExists as exists:
            return self._adopt(workload, exists)
        return observed_from(obj, key)

    def patch(self, workload: Workload, changes: dict[str, Any]) -> Observed:
        key = workload.key
        body = patch_body(workload, changes)
        for attempt in range(self._conflict_retries + 1):
            try:
                obj = self._request("PATCH", api_path(key.kind, key.project, key.name),
                                    f"patch {key}", json=body,
                                    headers={"Content-Type": MERGE_PATCH})
                return observed_from(obj, key)
            except Conflict as conflict:
                if attempt == self._conflict_retries:
                    raise Conflict(f"{conflict} (still conflicting after {attempt} retries)",
                                   conflict.delay) from None
                self._check_still_ours(workload)
        raise AssertionError("unreachable")

    def delete(self, key: ResourceKey) -> None:
        try:
            self._request("DELETE", api_path(key.kind, key.project, key.name), f"delete {key}")
        except NotFoundError:
            return  # already gone is success

    def get(self, key: ResourceKey) -> Observed | None:
        obj = self._get_object(key)
        return observed_from(obj, key) if obj is not None else None

    def list_owned(self, project: str, instance: str) -> list[Observed]:
        selector = f"{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_INSTANCE}={instance}"
        owned: list[Observed] = []
        for kind in PLURALS:
            params = {"labelSelector": selector}
            while True:  # follow `metadata.continue` when the server pages
                page = self._request("GET", api_path(kind, project),
                                     f"list {kind}s in {project}", params=params)
                for item in page.get("items") or []:
                    labels = (item.get("metadata") or {}).get("labels") or {}
                    # Labels can be copied: keep only what carries both of ours.
                    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY_VALUE and \
                            labels.get(LABEL_INSTANCE) == instance:
                        name = item["metadata"]["name"]
                        owned.append(observed_from(item, ResourceKey(kind, project, name)))
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
                params = {"labelSelector": selector, "continue": token}
        return sorted(owned, key=lambda o: o.key)

    # --- dry runs and estimates -----------------------------------------------------------

    def dry_run(self, workload: Workload, changes: dict[str, Any] | None = None) -> DryRunResult:
        """What the server would do with `workload` (`?dryRun=All`): a create, or with
        `changes` a patch. A new manifest that exists already is dry-run as a merge patch
        of its spec and metadata. A 422 is returned as causes, not raised."""
        key = workload.key
        item = api_path(key.kind, key.project, key.name)
        params = {"dryRun": "All"}
        patch_headers = {"Content-Type": MERGE_PATCH}
        try:
            if changes is not None:
                obj = self._request("PATCH", item, f"dry-run patch {key}", params=params,
                                    json=patch_body(workload, changes), headers=patch_headers)
            else:
                body = create_body(workload)
                try:
                    obj = self._request("POST", api_path(key.kind, key.project),
                                        f"dry-run create {key}", params=params, json=body,
                                        headers={"Idempotency-Key": dry_run_key(body)})
                except AlreadyExists:
                    whole = {"metadata": patch_body(workload, {})["metadata"],
                             "spec": workload.manifest.get("spec", {})}
                    obj = self._request("PATCH", item, f"dry-run patch {key}", params=params,
                                        json=whole, headers=patch_headers)
        except InvalidManifest as invalid:
            return DryRunResult({}, causes=invalid.causes, message=str(invalid))
        floors = gpu_floors(obj)
        return DryRunResult(obj, estimate=estimate_of(obj),
                            min_memory=next(iter(floors.values()), None), floors=floors)

    def estimate(self, manifest: dict[str, Any], project: str | None = None) -> str:
        """The server's cost estimate for a manifest, in US dollars. Raises ValueError when
        it has none (the plan then shows no estimate; the apply reports the real error)."""
        meta = manifest.get("metadata") or {}
        project = project or meta.get("namespace") or self.config.project or "default"
        key = ResourceKey(str(manifest.get("kind")), project, str(meta.get("name")))
        if key.kind not in PLURALS:
            raise ValueError(f"no estimate for kind {key.kind!r}")
        try:
            result = self.dry_run(Workload(key, manifest, ""))
        except ProviderError as e:
            raise ValueError(f"no estimate: {e}") from e
        if result.estimate is None:
            raise ValueError(f"no estimate for {key}: {result.message or 'none reported'}")
        return result.estimate

    # --- internals ------------------------------------------------------------------------

    def _request(self, method: str, path: str, what: str, *, json: Any = None,
                 params: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, json=json, params=params,
                                            headers=headers)
        except httpx.HTTPError as e:
            raise transport_error(e, what) from None
        log.debug("nodus api", extra={"method": method, "path": path,
                                      "status": response.status_code})
        raise_for_status(response, what, credential=self.config.credential_setting,
                         now=self._now)
        try:
            body = response.json() if response.content else {}
        except ValueError:
            raise TransientError(f"{what}: the Nodus API answered {response.status_code} "
                                 "with a body that is not JSON; retrying later") from None
        return body if isinstance(body, dict) else {}

    def _get_object(self, key: ResourceKey) -> dict[str, Any] | None:
        try:
            return self._request("GET", api_path(key.kind, key.project, key.name), f"get {key}")
        except NotFoundError:
            return None

    def _adopt(self, workload: Workload, exists: AlreadyExists) -> Observed:
        """A 409 on create: the earlier attempt of this very create (its answer was lost)
        is adopted; anything else is refused, saying who owns it."""
        key = workload.key
        live = self._get_object(key)
        if live is None:
            raise TransientError(f"create {key}: it existed a moment ago and is gone now; "
                                 "retrying") from exists
        meta = live.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        ours = (workload.manifest.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_VALUE:
            raise PermanentError(f"{key.short} already exists in project {key.project} and is "
                                 "not managed by nodus-gitops; delete it or rename the manifest")
        if labels.get(LABEL_INSTANCE) != ours.get(LABEL_INSTANCE):
            raise PermanentError(f"{key.short} already exists in project {key.project}, owned "
                                 f"by the nodus-gitops instance {labels.get(LABEL_INSTANCE)!r}, "
                                 f"not {ours.get(LABEL_INSTANCE)!r}; rename the manifest")
        if notes.get(ANNOTATION_SPEC_HASH) != workload.spec_hash:
            raise PermanentError(f"{key.short} already exists with another spec (spec hash "
                                 f"{notes.get(ANNOTATION_SPEC_HASH)!r}, this commit "
                                 f"{workload.spec_hash!r}) and is not in the inventory; delete "
                                 "it to let this commit create it")
        log.info("adopted existing resource", extra={"resource": str(key)})
        return observed_from(live, key)

    def _check_still_ours(self, workload: Workload) -> None:
        """Before retrying a conflicting patch, re-read: it must still exist and be ours."""
        live = self._get_object(workload.key)
        if live is None:
            raise NotFoundError(f"patch {workload.key}: it no longer exists")
        labels = (live.get("metadata") or {}).get("labels") or {}
        ours = (workload.manifest.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_VALUE or \
                labels.get(LABEL_INSTANCE) != ours.get(LABEL_INSTANCE):
            raise PermanentError(f"patch {workload.key}: it was replaced by a resource this "
                                 "instance does not manage; not patching it")
