"""The house's sizes: every Python file under 400 lines, and every folder at most 15 modules, so a
reader can hold a file in view and a folder's names in mind (the split goes at a seam, never at
the count: the limits only say when to look for one)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
MAX_MODULES = 15  # per folder, not counting __init__.py


def _python_files() -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in listed if (ROOT / name).is_file()]


def test_no_file_over_400_lines():
    long = {
        name: n
        for name in _python_files()
        for n in [len((ROOT / name).read_text(encoding="utf-8").splitlines())]
        if n > MAX_LINES
    }
    assert not long, "\n".join(f"{name}: {n} lines" for name, n in sorted(long.items()))


def test_no_folder_over_15_modules():
    # the code's folders; the suite's mirror them with one file per behaviour, read one at a time
    modules = Counter(
        str(Path(name).parent)
        for name in _python_files()
        if Path(name).name != "__init__.py" and not name.startswith("tests/")
    )
    wide = {folder: n for folder, n in modules.items() if n > MAX_MODULES}
    assert not wide, "\n".join(f"{folder}/: {n} modules" for folder, n in sorted(wide.items()))
