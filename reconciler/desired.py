"""The desired state of one commit: every manifest file, parsed and validated, kept per
file so that the next commit re-reads only the paths its tree diff names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.manifests import Manifest
from reconciler.plan import Desired
from reconciler.validation import Problem, duplicate_problems, validate_file


@dataclass(frozen=True)
class FileResult:
    manifests: tuple[Manifest, ...]
    problems: tuple[Problem, ...]
    desired: tuple[Desired, ...]  # spec hashes computed once per file version
    identities: tuple[tuple[str, str], ...]  # (kind, name) of each manifest


@dataclass
class DesiredTree:
    """All manifests of a commit under the binding's path, with every problem."""

    commit: str
    project: str
    files: dict[str, FileResult] = field(default_factory=dict)

    @classmethod
    def read(cls, commit: str, project: str, blobs: Mapping[str, bytes],
             prefix: str = "") -> DesiredTree:
        tree = cls(commit, project)
        tree._load(blobs, prefix)
        return tree

    def updated(self, commit: str, changed: Mapping[str, bytes], deleted: list[str],
                prefix: str = "") -> DesiredTree:
        """The next commit's tree from this one: only `changed` files are parsed again."""
        tree = DesiredTree(commit, self.project, dict(self.files))
        for path in deleted:
            tree.files.pop(_display(path, prefix), None)
        tree._load(changed, prefix)
        return tree

    def _load(self, blobs: Mapping[str, bytes], prefix: str) -> None:
        for path, content in blobs.items():
            name = _display(path, prefix)
            manifests, problems = validate_file(name, content)
            desired = () if problems else tuple(
                Desired.of(m.key(self.project), m.body, m.file) for m in manifests)
            self.files[name] = FileResult(tuple(manifests), tuple(problems), desired,
                                          tuple((m.kind, m.name) for m in manifests))

    @property
    def manifests(self) -> list[Manifest]:
        return [m for name in sorted(self.files) for m in self.files[name].manifests]

    @property
    def problems(self) -> list[Problem]:
        problems = [p for r in self.files.values() for p in r.problems]
        seen: set[tuple[str, str]] = set()
        clash = False
        for result in self.files.values():
            for identity in result.identities:
                clash = clash or identity in seen
                seen.add(identity)
        if clash:  # rare: only then look at every manifest to name both places
            problems.extend(duplicate_problems(self.manifests))
        return sorted(problems)

    def desired(self) -> list[Desired]:
        return [d for name in sorted(self.files) for d in self.files[name].desired]


def _display(path: str, prefix: str) -> str:
    """Paths as people see them in the repository (`examples-repo/jobs/hello.yaml`)."""
    return path if not prefix or path.startswith(prefix.rstrip("/") + "/") else (
        f"{prefix.rstrip('/')}/{path}")
