"""The project's one GPU check: every section, in turn, inside one time budget, as one table.

    python benchmarks/gpu_check.py                 # all sections, 420 s in all
    python benchmarks/gpu_check.py --only run      # one section (nudge run itself)
    python benchmarks/gpu_check.py --budget 300
    python benchmarks/gpu_check.py --dry-run       # the whole script on CPU, with stand-ins

The runner and its sections are benchkit.gpu (check.py says how the budget is shared and
where the table goes; nudge_run.py, quant.py, engine.py, plan.py, fused.py, invariant.py, paged.py and
stream_units.py are the sections);
this script only makes the package importable and calls it.

`--dry-run` runs every section on CPU with stand-ins: tiny random models (models/testing) of
small shapes, a few rows and tokens, so that the suite can run the whole script
(tests/benchmarks/test_gpu_check_dry_run.py) and it cannot rot again. It writes no RESULTS.md.

It needs only what a GPU image carries (torch, Triton, transformers, numba), from a bare
checkout: when `nudgeability` is not installed, `bootstrap()` maps the package onto this
repository's folders as pyproject.toml's `package-dir` does. bitsandbytes and compressed-tensors
are not needed: the layers are built with this repository's own packing, and the NF4 rows say
they were skipped, and why, where bitsandbytes does not import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import re
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bootstrap() -> str:
    """Make `import nudgeability` work: the installed package if there is one, else a package
    object whose subpackages are this checkout's folders, per pyproject.toml's `package-dir`
    (`nudgeability.engine` = `engine/`, ...). Returns which of the two it used."""
    try:
        import nudgeability  # noqa: F401

        return "installed"
    except ImportError:
        pass
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r"package-dir\s*=\s*\{([^}]*)\}", text)
    mapping = dict(re.findall(r'"nudgeability\.(\w+)"\s*=\s*"([^"]+)"', found.group(1)))
    if not mapping:
        raise RuntimeError("pyproject.toml has no package-dir for nudgeability")
    folders = {name: REPO / folder for name, folder in mapping.items()}

    class Finder(importlib.abc.MetaPathFinder):
        """`nudgeability.<name>` from its folder; deeper modules follow the folder's __path__."""

        def find_spec(self, fullname, path=None, target=None):
            top, _, name = fullname.partition(".")
            if top != "nudgeability" or name not in folders:
                return None
            folder = folders[name]
            return importlib.util.spec_from_file_location(
                fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
            )

    sys.meta_path.insert(0, Finder())
    package = types.ModuleType("nudgeability")
    package.__path__ = []  # a namespace of the mapped folders only (the finder above)
    sys.modules["nudgeability"] = package
    return "bootstrapped from " + ", ".join(f"{f}/" for f in mapping.values())


if __name__ == "__main__":
    how = bootstrap()
    from benchkit.gpu.check import main

    raise SystemExit(main(how=how))
