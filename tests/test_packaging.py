"""The code folders install under the `nudgeability.` namespace and nowhere else."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("backends", "cli", "costs", "engine", "models", "splice", "stats", "util")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_under_the_namespace():
    on_disk = {
        "nudgeability." + ".".join(init.parent.relative_to(ROOT).parts)
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    assert listed == on_disk


def test_folders_map_to_the_namespace_and_import_from_this_checkout():
    package_dir = _pyproject()["tool"]["setuptools"]["package-dir"]
    assert package_dir == {f"nudgeability.{f}": f for f in FOLDERS}
    for folder in FOLDERS:
        spec = importlib.util.find_spec(f"nudgeability.{folder}")
        assert Path(spec.origin).resolve() == (ROOT / folder / "__init__.py").resolve()


def test_no_top_level_engine_models_splice_or_stats_is_installed(tmp_path):
    # A user's own `models` or `stats` package must not be shadowed by ours. Checked from another
    # directory: `python -m pytest` itself puts the checkout's root on sys.path.
    code = "import importlib.util as u; print([n for n in %r if u.find_spec(n) and %r in (u.find_spec(n).origin or '')])"
    out = subprocess.run(
        [sys.executable, "-c", code % (FOLDERS, str(ROOT))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert out.stdout.strip() == "[]"
    assert (
        subprocess.run([sys.executable, "-c", "import nudgeability.stats"], cwd=tmp_path).returncode
        == 0
    )


def test_the_nudge_console_script_points_at_the_cli():
    assert _pyproject()["project"]["scripts"] == {"nudge": "nudgeability.cli:main"}
    from nudgeability.cli import main

    assert callable(main)


def test_the_cpu_extra_pins_torch_and_shipped_data_is_package_data():
    project = _pyproject()["project"]
    assert "torch==2.13.0" in project["optional-dependencies"]["cpu"]
    # Every file git tracks inside a package folder that is not Python source must be matched by
    # one of its package's package-data patterns, or a wheel install would leave it behind.
    data = _pyproject()["tool"]["setuptools"]["package-data"]
    tracked = subprocess.run(
        ["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    unshipped = []
    for name in tracked:
        path = ROOT / name
        if path.suffix == ".py" or path.name == "README.md":
            continue
        package = path.parent
        while not (package / "__init__.py").exists():
            package = package.parent
        dotted = "nudgeability." + ".".join(package.relative_to(ROOT).parts)
        inside = path.relative_to(package)
        if not any(inside.match(pattern) for pattern in data.get(dotted, [])):
            unshipped.append(name)
    assert unshipped == []
