"""Every repository path a README names exists: a path with a folder (`stats/report/tables/grid.py`,
`costs/`) from the repository's root or from the README's own folder, and a bare module name
(`grid.py`) somewhere under the README's folder (under the root for the top README). A README that
names a moved or deleted file fails here, not in a newcomer's hands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a path with at least one folder, or a bare module name (a run's files, table.md, are not paths)
PATH = re.compile(r"(?<![\w./:-])(\.?[\w-]+(?:/[\w.*{},-]+)+/?|[\w-]+\.py\b)")


def _readmes() -> list[Path]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if Path(name).name == "README.md"]


def _top_folders() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} | {".ci"}


def _exists(name: str, readme: Path) -> bool:
    """From the root, from the README's folder, or from its folder's tests (a package README
    names its tests as tests/<package>/ holds them)."""
    here = readme.parent
    tests = ROOT / "tests" / here.relative_to(ROOT)
    if "/" not in name:
        places = [ROOT] if here == ROOT else [here, tests]
        return any(any(place.rglob(name)) for place in places)
    return any((base / name).exists() for base in (ROOT, here, tests))


def named_paths(readme: Path) -> list[str]:
    """The repository paths `readme` names (the ones this test checks)."""
    tests = ROOT / "tests" / readme.parent.relative_to(ROOT)
    folders = _top_folders() | {
        p.name
        for base in (readme.parent, tests)
        if base.is_dir()
        for p in base.iterdir()
        if p.is_dir()
    }
    out = []
    for match in PATH.finditer(readme.read_text(encoding="utf-8")):
        name = re.sub(r":\d+(-\d+)?$", "", match.group(1)).rstrip(".,;")
        if any(ch in name for ch in "*{}") or "://" in name:
            continue  # a pattern or an address, not one path
        first = name.split("/")[0]
        if "/" in name and first not in folders:
            continue  # runs/a, org/model: examples, not repository paths
        out.append(name)
    return out


def test_every_path_a_readme_names_exists():
    missing = [
        f"{readme.relative_to(ROOT)}: {name}"
        for readme in _readmes()
        for name in named_paths(readme)
        if not _exists(name, readme)
    ]
    assert not missing, "\n".join(missing)


def test_the_check_sees_the_paths_of_the_top_readme():
    # the check cannot pass by reading nothing: the top README names the package folders
    names = named_paths(ROOT / "README.md")
    assert {"engine/", "stats/"} <= {n if n.endswith("/") else n.split("/")[0] + "/" for n in names}
