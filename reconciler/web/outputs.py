"""`GET /api/v1/resources/Job/<project>/<name>/outputs/<output>`: a succeeded Job's stored
output (a stage's or a cell's Job too), for `nodus-gitops cp --server`.

The backend copies it into a folder of its own first, checked against the SHA-256 it
recorded when the Job finished (`HasOutputs.copy_output`); that copy is what is sent, a
file as it is and a directory as a tar archive, with the recorded digest in
`X-Nodus-Output-Sha256` so that the client checks what arrived against it. Outputs are
a Job's data, not masked as logs are: the app serves them only where the dashboard
requires authentication."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus_gitops.floor.errors import NodusGitopsError, NotFoundError
from nodus_gitops.floor.identity import ResourceKey, is_resource_name
from nodus_gitops.providers.base import HasOutputs
from nodus_gitops.web.logs import provider_of
from nodus_gitops.workloads.children import find_child

if TYPE_CHECKING:
    from nodus_gitops.service import Service

SHA256_HEADER = "X-Nodus-Output-Sha256"
TYPE_HEADER = "X-Nodus-Output-Type"  # file | directory
NAME_HEADER = "X-Nodus-Output-Name"  # the name the copy has (cp into a folder uses it)
TAR = "application/x-tar"


@dataclass(frozen=True)
class FileBody:
    """A file sent as the answer's body; `folder` is removed once it has been sent."""

    path: Path
    folder: Path

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def output_answer(service: Service, project: str, name: str,
                  output: str) -> tuple[int, Any, dict[str, str], str]:
    """(status, body, headers, content type) for one output of the Job `name`."""
    parts = output.split("/")  # a gang's other ranks: rank-<r>/<output>
    if not is_resource_name(name) or len(parts) > 2 or not all(map(is_resource_name, parts)):
        return 404, {"error": f"no output {output!r} of job/{name}"}, {}, "application/json"
    key = ResourceKey("Job", project, name)
    record = service.store.get_resource(key)
    if record is None:
        child = find_child(service.store, project, name)
        record = child.parent if child is not None and child.created else None
    if record is None:
        return 404, {"error": f"no resource Job/{project}/{name}"}, {}, "application/json"
    backend = provider_of(service, record)
    if not isinstance(backend, HasOutputs):
        said = "is not served here" if backend is None else (
            f"runs on the {backend.name} backend, which stores no outputs the reconciler "
            "can copy")
        return 404, {"error": f"job/{name} {said}"}, {}, "application/json"
    folder = Path(tempfile.mkdtemp(prefix="nodus-output-"))
    try:
        copied, _size, sha = backend.copy_output(key, output, folder)
        headers = {SHA256_HEADER: sha, NAME_HEADER: copied.name,
                   TYPE_HEADER: "directory" if copied.is_dir() else "file"}
        if copied.is_dir():
            archive = folder / ".archive.tar"
            with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
                tar.add(copied, arcname=copied.name)
            return 200, FileBody(archive, folder), headers, TAR
        return 200, FileBody(copied, folder), headers, "application/octet-stream"
    except NotFoundError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return 404, {"error": str(exc)}, {}, "application/json"
    except NodusGitopsError as exc:  # the stored output changed after the Job finished
        shutil.rmtree(folder, ignore_errors=True)
        return 409, {"error": str(exc)}, {}, "application/json"
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
