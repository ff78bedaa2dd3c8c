"""Loading manifest files: YAML documents with file and line for every field path.

Parsing uses libyaml (`CSafeLoader`): the C parser composes the node tree and the safe
constructor builds plain Python values. The node tree is kept beside the value so a
problem found later can name the line of any field without parsing again.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from nodus_gitops.floor.errors import ManifestError
from nodus_gitops.floor.identity import ResourceKey

MAX_FILE_BYTES = 1024 * 1024
# Expanded node count above which a document that uses aliases is an alias bomb.
MAX_EXPANDED_NODES = 100_000
# The file endings of a manifest: the one list (the Git source and the SDK go by it too).
MANIFEST_SUFFIXES = (".yaml", ".yml")

PathPart = str | int
FieldPath = tuple[PathPart, ...]


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
# YAML 1.1 implicit types by first character, timestamps left out: manifests carry RFC 3339
# text, not datetime objects.
_IMPLICIT = {
    first: tuple((tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP)
    for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


class _Loader(yaml.CSafeLoader):
    """libyaml's safe loader with a lean resolver (libyaml calls it once per scalar);
    plain scalars repeat a lot (keys, enum values), so their tags are remembered."""

    _resolved: dict[str, str] = {}  # plain scalar -> tag; bounded below

    def resolve(self, kind: type, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode:
            if not implicit[0]:
                return _STR
            tag = self._resolved.get(value)
            if tag is None:
                tag = _STR
                for candidate, regexp in _IMPLICIT.get(value[:1], ()):
                    if regexp.match(value):
                        tag = candidate
                        break
                if len(self._resolved) > 50_000:
                    self._resolved.clear()
                if len(value) < 64:
                    self._resolved[value] = tag
            return tag
        return _SEQ if kind is yaml.SequenceNode else _MAP


# Plain text repeats across manifests (keys, images, sizes, commands): one str object for
# each value rather than one per occurrence. Over 20,000 manifests 740,000 strings hold
# 47,000 distinct values; kept whole they were 40 MB of the 91 MB the parsed tree takes.
# Bounded as _Loader._resolved is: once full it starts again (shared values stay shared).
_SHARED: dict[str, str] = {}
_MAX_SHARED = 50_000
_MAX_SHARED_LEN = 64

_NULL = "tag:yaml.org,2002:null"
_SCALAR_BUILDERS = {
    "tag:yaml.org,2002:int": "construct_yaml_int",
    "tag:yaml.org,2002:float": "construct_yaml_float",
    "tag:yaml.org,2002:bool": "construct_yaml_bool",
}


class _Builder:
    """Builds plain values from a composed node tree, faster than PyYAML's generic
    constructor: strings pass through, other scalars use the safe constructors, a
    shared (aliased) node is built once, and duplicate keys are an error."""

    def __init__(self, loader: _Loader) -> None:
        self._loader = loader
        self._memo: dict[int, Any] = {}
        self._scalars = {tag: getattr(loader, name) for tag, name in _SCALAR_BUILDERS.items()}

    def build(self, node: yaml.Node) -> Any:
        tag = node.tag
        if tag == _STR:
            value = node.value
            return _SHARED.setdefault(value, value) if len(value) < _MAX_SHARED_LEN else value
        if tag == _NULL:
            return None
        scalar = self._scalars.get(tag)
        if scalar is not None:
            return scalar(node)
        memo = self._memo.get(id(node))
        if memo is not None:
            return memo
        if isinstance(node, yaml.MappingNode):
            if any(k.tag == _MERGE for k, _ in node.value):
                value = self._loader.construct_object(node, deep=True)  # merge keys: rare
            else:
                value = {}
                for key_node, value_node in node.value:
                    key = self.build(key_node)
                    if isinstance(key, list | dict):
                        raise yaml.constructor.ConstructorError(
                            None, None, "a list or mapping cannot be a key",
                            key_node.start_mark)
                    if key in value:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}", key_node.start_mark)
                    value[key] = self.build(value_node)
        elif isinstance(node, yaml.SequenceNode):
            value = [self.build(item) for item in node.value]
        else:
            value = self._loader.construct_object(node)
        self._memo[id(node)] = value
        return value


@dataclass(frozen=True, eq=False, slots=True)
class Document:
    """One YAML document of a file: its value and the node tree it was built from."""

    file: str
    index: int
    line: int
    data: Any
    # The node tree, for lines of fields; dropped (None) once a document is known valid,
    # since ten thousand of them cost memory and garbage-collection time.
    node: yaml.Node | None = field(repr=False)

    def line_of(self, path: Iterable[PathPart], *, key: bool = False) -> int:
        """The 1-based line of the field at `path`, or of its nearest existing parent.
        With `key=True` the line of the mapping key itself (for an unknown field)."""
        node, line = self.node, self.line
        if node is None:
            return line
        for part in path:
            child = _child(node, part)
            if child is None:
                break
            key_node, node = child
            # A block mapping or list starts on the line after its key: name the key.
            at_key = key or isinstance(node, yaml.MappingNode | yaml.SequenceNode)
            line = (key_node if at_key and key_node is not None else node).start_mark.line + 1
        return line


def _child(node: yaml.Node, part: PathPart) -> tuple[yaml.Node | None, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if key_node.value == part or (
                isinstance(part, int) and key_node.value == str(part)
            ):
                return key_node, value_node
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
        if 0 <= part < len(node.value):
            return None, node.value[part]
    return None


@dataclass(frozen=True, eq=False, slots=True)
class Manifest:
    """A document that looks like a Nodus resource (a mapping); fields not yet validated."""

    doc: Document

    @property
    def file(self) -> str:
        return self.doc.file

    @property
    def line(self) -> int:
        return self.doc.line

    @property
    def body(self) -> dict[str, Any]:
        return self.doc.data

    @property
    def kind(self) -> str:
        kind = self.body.get("kind")
        return kind if isinstance(kind, str) else ""

    @property
    def name(self) -> str:
        meta = self.body.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else ""

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.body.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def annotations(self) -> dict[str, Any]:
        meta = self.body.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        return ann if isinstance(ann, dict) else {}

    def without_nodes(self) -> Manifest:
        return Manifest(dataclasses.replace(self.doc, node=None))

    def key(self, project: str) -> ResourceKey:
        return ResourceKey(self.kind, project, self.name)

    @property
    def label(self) -> str:
        """`Kind/name` as problems and plans print it."""
        return f"{self.kind or '?'}/{self.name or '?'}"


def _mark_line(error: yaml.YAMLError) -> int:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return mark.line + 1 if mark is not None else 1


def _check_tags(file: str, content: bytes) -> None:
    """Explicit tags (`!!python/object`, `!Ref`) have no meaning in a manifest."""
    for token in yaml.scan(content, Loader=yaml.CSafeLoader):
        if isinstance(token, yaml.TagToken):
            handle, suffix = token.value
            raise ManifestError(
                file, token.start_mark.line + 1,
                f"YAML tag {(handle or '') + suffix!r} is not allowed in a manifest",
            )


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    cached = memo.get(id(node))
    if cached is not None:
        return cached
    memo[id(node)] = 1  # guards against recursive aliases
    if isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        size = 1
    memo[id(node)] = size
    return size


class Oversized(bytes):
    """The content of a file over MAX_FILE_BYTES, never read: empty, with the file's
    `size`. The Git source sizes a blob from its object header and hands this on rather
    than inflating 100 MB only to refuse it."""

    size: int

    def __new__(cls, size: int) -> Oversized:
        content = super().__new__(cls)
        content.size = size
        return content

    def __eq__(self, other: object) -> bool:  # two sizes are two contents, not one b""
        return isinstance(other, Oversized) and other.size == self.size

    def __hash__(self) -> int:
        return hash((Oversized, self.size))

    def __repr__(self) -> str:
        return f"Oversized(size={self.size})"


def load_documents(file: str, content: bytes | str) -> list[Document]:
    """Every non-empty document in one file. Raises ManifestError (with the line) for
    YAML errors, tags, duplicate keys, alias bombs and oversized files."""
    if isinstance(content, str):
        content = content.encode("utf-8")
    size = content.size if isinstance(content, Oversized) else len(content)
    if size > MAX_FILE_BYTES:
        raise ManifestError(
            file, 1, f"file is {size} bytes; manifests are limited to {MAX_FILE_BYTES}"
        )
    if b"!" in content:
        try:
            _check_tags(file, content)
        except yaml.YAMLError as e:
            raise ManifestError(file, _mark_line(e), f"invalid YAML: {_problem(e)}") from None
    may_alias = b"*" in content and b"&" in content
    documents: list[Document] = []
    loader = _Loader(content)
    try:
        index = 0
        while loader.check_node():
            node = loader.get_node()
            if may_alias and _expanded_size(node, {}) > MAX_EXPANDED_NODES:
                raise ManifestError(
                    file, node.start_mark.line + 1,
                    f"document expands to more than {MAX_EXPANDED_NODES} nodes through "
                    "aliases (an alias bomb)",
                )
            if len(_SHARED) > _MAX_SHARED:
                _SHARED.clear()
            data = _Builder(loader).build(node)
            if data is not None:
                documents.append(Document(file, index, node.start_mark.line + 1, data, node))
            index += 1
    except yaml.YAMLError as e:
        raise ManifestError(file, _mark_line(e), f"invalid YAML: {_problem(e)}") from None
    except RecursionError:
        raise ManifestError(file, 1, "YAML nests too deeply") from None
    finally:
        loader.dispose()
    return documents


def _problem(error: yaml.YAMLError) -> str:
    problem = getattr(error, "problem", None)
    context = getattr(error, "context", None)
    if problem and context:
        return f"{context}, {problem}"
    return problem or str(error).splitlines()[0]


def outside_link(path: Path, root: Path) -> bool:
    """A symbolic link that leads out of `root` (a manifests tree must not read it)."""
    return path.is_symlink() and not path.resolve().is_relative_to(root.resolve())


@contextmanager
def bulk_loading() -> Iterator[None]:
    """Pause the cyclic garbage collector while thousands of files are parsed. Parsing
    only allocates (it frees almost nothing), so each collection scans every value kept so
    far for nothing: over 10,000 manifests that costs more than the parsing itself.
    Reference counting still frees everything it can; the collector resumes after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def is_manifest_path(path: str) -> bool:
    """Whether a file of this name is read as manifests (`.yaml` or `.yml`)."""
    return path.endswith(MANIFEST_SUFFIXES)


def iter_manifest_files(paths: Iterable[str | Path],
                        unreadable: list[str] | None = None) -> Iterator[tuple[str, Path]]:
    """`(display path, path)` for every YAML file under the given files or directories,
    in a stable order; hidden directories (`.git`) are skipped. A directory that cannot be
    listed is added to `unreadable` (its display path), never passed over in silence."""
    for root in paths:
        root = Path(root)
        if root.is_file():
            yield str(root), root
            continue
        found = []
        refused: list[OSError] = []
        resolved_root = root.resolve()
        for folder, dirs, names in os.walk(root, onerror=refused.append):
            here = Path(folder)
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in names:
                path = here / name
                if not is_manifest_path(name):
                    continue
                rel = path.relative_to(root)
                if path.is_symlink() and not path.resolve().is_relative_to(resolved_root):
                    # Never read what a link points at outside the tree (Git does not
                    # follow links either); the caller reports it.
                    found.append((rel.as_posix(), path))
                elif path.is_file():
                    found.append((rel.as_posix(), path))
        if unreadable is not None:
            unreadable += [_shown(root, Path(e.filename)) for e in refused if e.filename]
        for rel, path in sorted(found):
            yield _shown(root, root / rel), path


def _shown(root: Path, path: Path) -> str:
    """`path` as validate names it: relative to `root`, after the root as it was given."""
    rel = path.relative_to(root).as_posix()
    return rel if str(root) in (".", "") else f"{root.as_posix().rstrip('/')}/{rel}"
