"""The layers point one way. Every import inside nodus_gitops (lazy ones in functions
too) is read from the source, each module is placed in its layer, and an import that
points up, or a cycle between modules, fails with the file and line that makes it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import nodus_gitops
import pytest

# Lowest first. A module may import its own layer and those below it, never above.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("floor", ("floor", "schemas")),
    ("base", ("state", "providers")),
    ("engine", ("source", "manifests", "schema_check", "schema_refs", "crds", "validation",
                "composite", "envvars", "desired", "options", "frozen", "plan",
                "apply", "failpoints", "adoption", "leases", "sync", "outcomes", "repos",
                "workloads", "metrics", "metered", "spending", "follow_ups", "poll_trigger",
                "service", "config", "hosts")),
    ("top", ("checks", "web", "sdk", "output", "logging_setup", "plan_diff", "plan_text",
             "plan_report")),
    ("root", ("wiring", "backends")),
    ("entry", ("cli", "commands", "job_views", "locations", "completion", "cli_reference",
               "remote", "remote_copy", "progress", "doctor", "__main__", "__init__")),
)
RANK = {name: rank for rank, (_layer, names) in enumerate(LAYERS) for name in names}
LAYER_OF = {name: layer for layer, names in LAYERS for name in names}

# Upward edges that remain, each with why; this list may only shrink.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _package_dirs() -> dict[str, Path]:
    """nodus_gitops's subpackages that live in their own folders (package-dir)."""
    import nodus_gitops.providers
    import nodus_gitops.schemas
    import nodus_gitops.state

    return {"nodus_gitops.providers": Path(nodus_gitops.providers.__path__[0]),
            "nodus_gitops.state": Path(nodus_gitops.state.__path__[0]),
            "nodus_gitops.schemas": Path(nodus_gitops.schemas.__path__[0]),
            "nodus_gitops": Path(nodus_gitops.__path__[0])}


def _modules() -> Iterator[tuple[str, Path]]:
    seen: set[Path] = set()
    for package, folder in sorted(_package_dirs().items(), key=lambda p: -len(p[0])):
        for path in sorted(folder.rglob("*.py")):
            if path in seen or "shim" in path.parts:  # the shim runs inside Jobs, apart
                continue
            seen.add(path)
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__" and len(parts) > 1:
                parts = parts[:-1]
            yield ".".join([package, *parts]), path


UNITS = {p.stem if p.suffix else p.name for p in Path(nodus_gitops.__path__[0]).iterdir()
         if p.suffix == ".py" or (p / "__init__.py").exists()} | {"providers", "state", "schemas"}


def _imports(path: Path, module: str = "") -> Iterator[tuple[str, int]]:
    """Every module of the project `path` imports, with its line: `import` and `from`
    statements (relative ones resolved against `module`, the importer's dotted name), and
    `importlib.import_module("...")` or `__import__("...")` with a literal name."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if base == "nodus_gitops":  # a submodule, or a name of the root package
                yield from ((f"nodus_gitops.{a.name}" if a.name in UNITS else "nodus_gitops",
                             node.lineno) for a in node.names)
            elif base.startswith("nodus_gitops."):
                yield base, node.lineno
        elif isinstance(node, ast.Import):  # a bare `import nodus_gitops` is every module's
            yield from ((a.name, node.lineno) for a in node.names  # parent package: no edge
                        if a.name.startswith("nodus_gitops."))
        elif isinstance(node, ast.Call) and node.args and _is_dynamic_import(node.func):
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) \
                    and name.value.startswith("nodus_gitops"):
                yield name.value, node.lineno


def _is_dynamic_import(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id in ("__import__", "import_module")
            or isinstance(func, ast.Attribute) and func.attr == "import_module")


def _unit(module: str) -> str:
    """The first name under nodus_gitops: what a layer is made of."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


GRAPH = {module: (path, list(_imports(path, module))) for module, path in _modules()}


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({_unit(m) for m in GRAPH} - set(RANK))
    assert not unplaced, f"place these in LAYERS: {unplaced}"


def test_no_import_points_up() -> None:
    upward = []
    for module, (path, imports) in GRAPH.items():
        source = _unit(module)
        for target, line in imports:
            to = _unit(target)
            if RANK.get(to, -1) > RANK[source] and (source, to) not in KNOWN_UPWARD:
                upward.append(f"{path}:{line}: {module} ({LAYER_OF[source]}) imports "
                              f"{target} ({LAYER_OF.get(to)})")
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_known_upward_edges_still_exist() -> None:
    """An entry of KNOWN_UPWARD that no longer happens is deleted, so the list shrinks."""
    edges = {(_unit(m), _unit(t)) for m, (_p, imports) in GRAPH.items() for t, _l in imports}
    assert set(KNOWN_UPWARD) <= edges, sorted(set(KNOWN_UPWARD) - edges)


def _cycles() -> list[list[str]]:
    """Strongly connected sets of more than one unit (Tarjan): a module of the root
    package, or a subpackage (inside a subpackage, its modules may import each other)."""
    names = {_unit(m) for m in GRAPH}
    edges: dict[str, list[str]] = {n: [] for n in names}
    for module, (_path, imports) in GRAPH.items():
        edges[_unit(module)] += [_unit(t) for t, _l in imports if _unit(t) != _unit(module)
                                 and (_unit(module), _unit(t)) not in KNOWN_UPWARD]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(set(edges[v])):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(names):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    assert not _cycles(), _cycles()


@pytest.mark.parametrize("module", ["nodus_gitops.floor"])
def test_the_floor_imports_nothing_of_the_project(module: str) -> None:
    leaks = [f"{path}:{line}: {target}" for m, (path, imports) in GRAPH.items()
             if m.startswith(module) for target, line in imports
             if not target.startswith(module)]
    assert not leaks, leaks


def test_the_installed_package_is_the_one_under_test() -> None:
    assert Path(nodus_gitops.__file__).parent.name == "reconciler"


def test_the_scanner_sees_every_form_of_import(tmp_path: Path) -> None:
    source = tmp_path / "base.py"
    source.write_text("import importlib\nimport nodus_gitops\n"
                      "def lazy():\n    from ..sync import BindingSync\n"
                      "    from . import jsonfiles\n"
                      "    importlib.import_module('nodus_gitops.web.hooks')\n"
                      "    __import__('nodus_gitops.cli')\n")
    found = [name for name, _line in _imports(source, "nodus_gitops.providers.base")]
    assert found == ["nodus_gitops.sync", "nodus_gitops.providers",
                     "nodus_gitops.web.hooks", "nodus_gitops.cli"], found

