"""Data flows one way: every import of the package, lazy ones too, against the layer table.

No module imports itself round a loop either, however long the loop and whatever the layers:
an import for types only (under `if TYPE_CHECKING`) runs nothing and is the one exception.

The table is the top README's ("Layers", in "Where things live"): one row per layer, bottom first,
each naming the package it holds and the layers it imports from; a layer may import what those
may, and so on down. This file parses that table (the README is its one owner) and walks every
module of every folder pyproject.toml installs with `ast`: `import`, `from ... import` at the top,
inside functions and under `if TYPE_CHECKING` alike, and a string naming a module exactly (what
`importlib.import_module` is given, as the `nudge` command's table of subcommands). A module
belongs to the layer whose package is the longest prefix of its name.

Set NUDGE_LAYERS_ROOT to another checkout (e.g. `git worktree add /tmp/old 397192c`) to walk its
code against this table.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parents[1]
ROOT = Path(os.environ.get("NUDGE_LAYERS_ROOT") or HERE)
NAMESPACE = "nudgeability"
HEADER = "| layer | package | imports from |"


@dataclass(frozen=True)
class Layer:
    name: str
    package: str  # dotted, without the namespace: "splice.tasks"
    imports: tuple[str, ...]  # the packages of the layers it imports from directly


def read_layers(readme: Path) -> list[Layer]:
    """The README's layer table, bottom first."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # the header, then the |---| line
    layers = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        name, package, imports = (cell.strip() for cell in line.strip("|").split("|"))
        (package,) = re.findall(r"`([\w.]+)`", package)
        layers.append(Layer(name, package, tuple(re.findall(r"`([\w.]+)`", imports))))
    return layers


def may_import(layers: list[Layer]) -> dict[str, set[str]]:
    """Each layer's package -> every package it may import (itself included)."""
    allowed: dict[str, set[str]] = {}
    for layer in layers:  # bottom first: what a layer names is already closed
        allowed[layer.package] = {layer.package}.union(*(allowed[p] for p in layer.imports))
    return allowed


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module, dotted without the namespace
    target: str  # the imported module
    where: str  # path:line
    typing_only: bool = False  # under `if TYPE_CHECKING`: never executed


def modules_of(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module the checkout at `root` installs: dotted name -> (file, is a package)."""
    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    modules = {}
    for dotted, folder in package_dir.items():
        prefix = dotted.removeprefix(NAMESPACE + ".")
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            is_package = parts[-1] == "__init__"
            name = ".".join((prefix, *(parts[:-1] if is_package else parts)))
            modules[name] = (path, is_package)
    return modules


def imports_of(root: Path) -> tuple[dict[str, tuple[Path, bool]], list[Edge]]:
    """The modules under `root` and every import edge between two of them."""
    modules = modules_of(root)

    def known(name: str) -> str | None:  # the module a dotted name lands in, or None (not ours)
        if not name.startswith(NAMESPACE + "."):
            return None
        name = name.removeprefix(NAMESPACE + ".")
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges = []
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            for statement in node.body
            for inner in ast.walk(statement)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([NAMESPACE, *base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                # `from pkg import sub` imports the module pkg.sub when there is one
                targets = [f"{module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                targets = [node.value] if known(node.value) == node.value.partition(".")[2] else []
            else:
                continue
            for target in filter(None, map(known, targets)):
                if target != name:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    edges.append(Edge(name, target, where, id(node) in typing_only))
    return modules, edges


def layer_of(module: str, packages: list[str]) -> str | None:
    """The package of the layer `module` belongs to (the longest prefix), or None."""
    found = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(found, key=len, default=None)


def unplaced(modules: dict[str, tuple[Path, bool]], edges: list[Edge], packages) -> list[str]:
    """Modules in no layer. A package that only groups layers (splice/) holds no code of its own:
    its __init__ imports nothing of ours, and it is the only module outside the table allowed."""
    importing = {edge.source for edge in edges}

    def grouping(module: str) -> bool:
        below = any(other.startswith(module + ".") for other in modules)
        return modules[module][1] and module not in importing and below

    return sorted(m for m in modules if layer_of(m, packages) is None and not grouping(m))


def against_the_layers(edges: list[Edge], layers: list[Layer]) -> list[str]:
    """One line per import that reaches a layer its own layer may not import."""
    allowed = may_import(layers)
    packages = list(allowed)
    wrong = []
    for edge in edges:
        source, target = layer_of(edge.source, packages), layer_of(edge.target, packages)
        if source is not None and target is not None and target not in allowed[source]:
            wrong.append(
                f"{edge.where}: {edge.source} imports {edge.target} ({source} -> {target})"
            )
    return list(dict.fromkeys(wrong))  # two names of one import statement: one line


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of nodes that reach each other round a loop (Tarjan's components), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def cycles(edges: list[Edge], layers: list[Layer]) -> list[list[str]]:
    """Every set of layers whose packages import each other round a loop."""
    packages = [layer.package for layer in layers]
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        source, target = layer_of(edge.source, packages), layer_of(edge.target, packages)
        if None not in (source, target) and source != target:
            graph[source].add(target)
    return loops(graph)


def module_cycles(edges: list[Edge]) -> list[str]:
    """One line per loop of modules that import each other when they run (a package's
    `__init__` is its own module), naming the imports that close it."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        if not edge.typing_only:
            graph[edge.source].add(edge.target)
    lines = []
    for loop in loops(graph):
        inside = set(loop)
        wheres = sorted(
            {
                f"{e.where} ({e.source} -> {e.target})"
                for e in edges
                if not e.typing_only and e.source in inside and e.target in inside
            }
        )
        lines.append(" <-> ".join(loop) + ": " + "; ".join(wheres))
    return lines


@functools.cache
def _checkout() -> tuple[dict[str, tuple[Path, bool]], list[Edge]]:
    """This checkout's modules and imports, walked once for the tests below."""
    return imports_of(ROOT)


def test_the_layer_table_is_ordered_and_covers_every_installed_folder():
    layers = read_layers(HERE / "README.md")
    assert len(layers) >= 10, "the README's layer table was not found"
    seen: set[str] = set()
    for layer in layers:
        below = [p for p in layer.imports if p not in seen]
        assert below == [], f"layer {layer.name} imports from {below}, not rows above it"
        seen.add(layer.package)
    modules, edges = _checkout()
    assert unplaced(modules, edges, [layer.package for layer in layers]) == []


def test_no_module_imports_against_the_layers():
    layers = read_layers(HERE / "README.md")
    assert against_the_layers(_checkout()[1], layers) == []


def test_no_two_layers_import_each_other():
    layers = read_layers(HERE / "README.md")
    assert cycles(_checkout()[1], layers) == []


def test_no_module_imports_itself_round_a_loop():
    assert module_cycles(_checkout()[1]) == []


def test_the_walk_finds_lazy_type_only_and_named_imports_and_cycles(tmp_path):
    """The checker on a hand-made tree: each kind of import it must see, one upward edge each."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "nudgeability.low" = "low", "nudgeability.high" = "high" }\n'
    )
    for folder in ("low", "high"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "high" / "top.py").write_text("from nudgeability.low.base import x\n")
    (tmp_path / "low" / "base.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from nudgeability.high import top\n"
        "def lazy():\n    from ..high.top import y\n"
        'NAMES = {"top": "nudgeability.high.top"}\n'
        "x = 1\n"
    )
    layers = [Layer("low", "low", ()), Layer("high", "high", ("low",))]
    modules, edges = imports_of(tmp_path)
    wrong = against_the_layers(edges, layers)
    assert [line.partition(": ")[0] for line in wrong] == [
        "low/base.py:3",  # under TYPE_CHECKING
        "low/base.py:5",  # inside a function, relative
        "low/base.py:6",  # a module named in a string
    ]
    assert cycles(edges, layers) == [["high", "low"]]
    assert [edge.where for edge in edges if edge.typing_only] == ["low/base.py:3"]
    loop = module_cycles(edges)  # the lazy import and the named one close it; the typing one not
    assert [line.partition(":")[0] for line in loop] == ["high.top <-> low.base"]
    assert "low/base.py:3" not in loop[0] and "low/base.py:5" in loop[0]
    assert unplaced(modules, edges, ["low"]) == ["high.top"]  # high/ only groups
