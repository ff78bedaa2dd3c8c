"""The desired state of one commit: every manifest file, parsed and validated, kept per
file so that the next commit re-reads only the paths its tree diff names.

The indexes (resources by key, files with problems, how often each kind/name occurs)
are updated from the previous commit's, so a commit that changes one file of 10,000
costs about one file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodus_gitops.floor.identity import ResourceKey
from nodus_gitops.floor.problems import Problem
from nodus_gitops.manifests import Manifest, bulk_loading
from nodus_gitops.plan import Desired
from nodus_gitops.validation import duplicate_problems, validate_file


@dataclass(frozen=True, slots=True)
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
    # Keys of the manifests in files that changed since `base` (before or after): what an
    # incremental plan must look at. None when the tree was read whole.
    base: str | None = None
    touched: set[ResourceKey] | None = None
    index: dict[ResourceKey, Desired] = field(default_factory=dict)
    problem_files: set[str] = field(default_factory=set)
    identity_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    duplicated: int = 0  # identities counted more than once (kept as counts change)

    @classmethod
    def read(cls, commit: str, project: str, blobs: Mapping[str, bytes],
             prefix: str = "") -> DesiredTree:
        tree = cls(commit, project)
        with bulk_loading():
            for path, content in blobs.items():
                tree._add(_display(path, prefix), content)
        return tree

    def advance(self, commit: str, changed: Mapping[str, bytes], deleted: list[str],
                prefix: str = "") -> None:
        """Move this tree to the next commit in place: only `changed` files are parsed
        again and only their index entries move, so the cost does not grow with the
        tree (a copy of 10,000 entries would cost more than the change itself)."""
        self.base, self.commit, self.touched = self.commit, commit, set()
        for path in [*deleted, *changed]:
            self._remove(_display(path, prefix))
        for path, content in changed.items():
            self._add(_display(path, prefix), content)

    def _keys(self, result: FileResult) -> set[ResourceKey]:
        return {ResourceKey(k, self.project, n) for k, n in result.identities}

    def _remove(self, name: str) -> None:
        old = self.files.pop(name, None)
        if old is None:
            return
        self.problem_files.discard(name)
        for identity in old.identities:
            self._count(identity, -1)
        for d in old.desired:
            if self.index.get(d.key) is d:
                del self.index[d.key]
                if self.identity_counts[(d.key.kind, d.key.name)]:  # defined again elsewhere
                    self._index_another_definition(d.key)
        if self.touched is not None:
            self.touched |= self._keys(old)

    def _index_another_definition(self, key: ResourceKey) -> None:
        """A key defined in two files lost the copy the index held: index the other one,
        as a fresh read would. Only duplicates (an invalid tree) get here, so the scan
        over every file is rare; without it, removing one copy of a moved resource would
        leave the index without it, and the next plan would delete it."""
        for result in self.files.values():
            for d in result.desired:
                if d.key == key:
                    self.index[key] = d
                    return

    def _add(self, name: str, content: bytes) -> None:
        manifests, problems = validate_file(name, content)
        desired = () if problems else tuple(
            Desired.of(m.key(self.project), m.body, m.file) for m in manifests)
        result = FileResult(tuple(manifests), tuple(problems), desired,
                            tuple((m.kind, m.name) for m in manifests))
        self.files[name] = result
        if problems:
            self.problem_files.add(name)
        for identity in result.identities:
            self._count(identity, +1)
        for d in desired:
            self.index.setdefault(d.key, d)
        if self.touched is not None:
            self.touched |= self._keys(result)

    def _count(self, identity: tuple[str, str], step: int) -> None:
        before = self.identity_counts[identity]
        after = before + step
        self.identity_counts[identity] = after
        self.duplicated += (after > 1) - (before > 1)

    @property
    def manifests(self) -> list[Manifest]:
        return [m for name in sorted(self.files) for m in self.files[name].manifests]

    @property
    def problems(self) -> list[Problem]:
        problems = [p for name in self.problem_files for p in self.files[name].problems]
        if self.duplicated:
            problems.extend(duplicate_problems(self.manifests))  # rare: name both places
        return sorted(problems)

    def desired(self) -> list[Desired]:
        return list(self.index.values())


def _display(path: str, prefix: str) -> str:
    """Paths as people see them in the repository (`examples-repo/jobs/hello.yaml`)."""
    return path if not prefix or path.startswith(prefix.rstrip("/") + "/") else (
        f"{prefix.rstrip('/')}/{path}")
