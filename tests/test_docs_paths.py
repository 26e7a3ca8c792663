"""Every repository path a document names exists: in every tracked Markdown file (READMEs,
docs/, benchmarks/RESULTS.md) and in every docstring (module, class, function) of every tracked
Python file. A path with a folder (`stats/report/tables/grid.py`, `costs/`) is looked up from the
repository's root or from the document's own folder; a bare module name (`grid.py`) somewhere
under the document's folder (under the root for a top-level document, a docstring or a page of
docs/); a path followed by a name (`engine/attention/cpu_attention.prefix_chunk`) as its module;
a dotted name under `nudgeability.` as the package folder or module it names. A document that names a moved or
deleted file fails here, not in a newcomer's hands. A library's own file is named with its
library's folder first (`torch/_inductor/...`, `bitsandbytes/backends/cuda/ops.py`): those are
not repository paths and are left alone."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
from functools import cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# a path with at least one folder, or a bare module name (a run's files, table.md, are not paths)
PATH = re.compile(r"(?<![\w./:-])(\.?[\w-]+(?:/[\w.*{},-]+)+/?|[\w-]+\.py\b)")
DOTTED = re.compile(r"(?<![\w.])nudgeability((?:\.\w+)+)")


@cache
def _tracked() -> tuple[str, ...]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return tuple(name for name in listed if (ROOT / name).is_file())


def _documents() -> list[Path]:
    return [ROOT / name for name in _tracked() if name.endswith(".md")]


def _sources() -> list[Path]:
    return [ROOT / name for name in _tracked() if name.endswith(".py")]


@cache
def _top_folders() -> frozenset[str]:
    return frozenset(
        {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} | {".ci"}
    )


@cache
def _package_dirs() -> dict[str, str]:
    """`nudgeability.engine` -> `engine`, from pyproject.toml's `package-dir`."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["setuptools"]["package-dir"]


def _exists(name: str, here: Path, anywhere: bool = False) -> bool:
    """From the root, from the document's folder, or from its folder's tests (a package README
    names its tests as tests/<package>/ holds them); a dotted name after a path, as its module. A
    bare name under the document's folder, or under the root where `anywhere` (a docstring)."""
    tests = ROOT / "tests" / here.relative_to(ROOT)
    if "/" not in name:
        places = [ROOT] if here == ROOT or anywhere else [here, tests]
        # among the repository's own files (a venv inside the checkout holds others' modules)
        return any(
            Path(tracked).name == name and (ROOT / tracked).is_relative_to(place)
            for tracked in _tracked()
            for place in places
        )
    candidates = [name]
    stem, dot, _ = name.rpartition("/")[2].partition(".")
    if dot and not name.endswith((".py", ".md", "/")):
        candidates.append(f"{name.rpartition('/')[0]}/{stem}.py")
    ancestors = [here, *here.parents[: len(here.relative_to(ROOT).parts)]]  # a sibling package
    if here.is_relative_to(ROOT / "tests"):  # a test names its package's files from the mirror
        mirror = ROOT / here.relative_to(ROOT / "tests")
        ancestors += [mirror, *mirror.parents[: len(mirror.relative_to(ROOT).parts)]]
    return any((base / c).exists() for base in (*ancestors, tests) for c in candidates)


def _dotted_exists(suffix: str) -> bool:
    """`.engine.attention.static_decode.StaticDecode`: the longest prefix that is a package
    folder or module must exist, and the name must reach at least one folder below the top."""
    parts = suffix.strip(".").split(".")
    top = _package_dirs().get(f"nudgeability.{parts[0]}")
    if top is None:
        return False
    path = ROOT / top
    for part in parts[1:]:
        if (path / part).is_dir():
            path = path / part
        elif (path / f"{part}.py").is_file():
            return True
        else:  # a name the package or module defines: its __init__ must say it
            init = path / "__init__.py"
            return init.is_file() and re.search(rf"\b{part}\b", init.read_text("utf-8")) is not None
    return True


def _lost_module(name: str) -> bool:
    """A Python file under a folder that is neither this repository's nor an importable
    library's (a package folder that moved, named by its old path): stale, not an example."""
    first = name.split("/")[0]
    return name.endswith(".py") and importlib.util.find_spec(first) is None


def named_paths(text: str, here: Path) -> list[str]:
    """The repository paths `text`, a document in folder `here`, names."""
    tests = ROOT / "tests" / here.relative_to(ROOT)
    folders = _top_folders() | {
        p.name for base in (here, tests) if base.is_dir() for p in base.iterdir() if p.is_dir()
    }
    out = []
    for match in PATH.finditer(text):
        name = re.sub(r":\d+(-\d+)?$", "", match.group(1)).rstrip(".,;:")
        if any(ch in name for ch in "*{}") or "://" in name:
            continue  # a pattern or an address, not one path
        first = name.split("/")[0]
        if "/" in name and first not in folders and not _lost_module(name):
            continue  # runs/a, org/model, torch/...: examples or a library's files
        out.append(name)
    return out


def _docstrings(source: Path) -> str:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return "\n".join(
        doc
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        for doc in [ast.get_docstring(node, clean=False)]
        if doc
    )


def _missing(document: Path, text: str) -> list[str]:
    where = document.relative_to(ROOT)
    anywhere = document.suffix == ".py" or document.parent == ROOT / "docs"
    out = [
        f"{where}: {name}"
        for name in named_paths(text, document.parent)
        if not _exists(name, document.parent, anywhere)
    ]
    out += [
        f"{where}: nudgeability{m.group(1)}"
        for m in DOTTED.finditer(text)
        if not _dotted_exists(m.group(1))
    ]
    return out


def test_every_path_a_markdown_document_names_exists():
    missing = [
        line for doc in _documents() for line in _missing(doc, doc.read_text(encoding="utf-8"))
    ]
    assert not missing, "\n".join(missing)


def test_every_path_a_docstring_names_exists():
    missing = [line for source in _sources() for line in _missing(source, _docstrings(source))]
    assert not missing, "\n".join(missing)


def test_the_check_sees_the_paths_of_the_top_readme():
    # the check cannot pass by reading nothing: the top README names the package folders
    readme = ROOT / "README.md"
    names = named_paths(readme.read_text(encoding="utf-8"), ROOT)
    assert {"engine/", "stats/"} <= {n if n.endswith("/") else n.split("/")[0] + "/" for n in names}


def test_the_check_finds_a_stale_name(tmp_path):
    # a docstring naming a module that moved is found, and a real one is not
    source = ROOT / "splice" / "example.py"
    text = (
        '"""See units.py, splice/run/units/arms.py, estimate/run_estimate.py, torch/nn/linear.py'
        ' and nudgeability.splice.nowhere."""'
    )
    assert _missing(source, text) == [
        "splice/example.py: units.py",
        "splice/example.py: estimate/run_estimate.py",
        "splice/example.py: nudgeability.splice.nowhere",
    ]
    assert _missing(source, '"""See splice/run/units/arms.fork_arms."""') == []


def test_package_docstrings_are_one_line():
    # a package's map lives in its README, once: an __init__ says what the package is, in a line
    long = [
        name
        for name in _tracked()
        if name.endswith("__init__.py")
        for doc in [ast.get_docstring(ast.parse((ROOT / name).read_text(encoding="utf-8")))]
        if doc is None or len(doc.splitlines()) != 1
    ]
    assert not long, "\n".join(long)
