"""The engine's former static batching, as it was: its own code, read from git.

`benchmarks/campaign.py` compares the engine with the code it replaced, not with an imitation:
the `engine/` package at `FORMER_COMMIT` (plan_batches fixes each batch's groups before it
starts, every row reserves its whole budget of suffix slots, prefixes are padded to the batch's
longest, the batch runs until its last row finishes). The files are written to a temporary
package named `former_static_engine` with their imports pointed at it, and its attention registered
under another name, so that both engines live in one process.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

FORMER_COMMIT = "970209c"  # main before issue 23: the last commit of the static engine
_NAME = "former_static_engine"
_MOVED = {"nudgeability.models.progress": "nudgeability.util.progress"}


def load_former_engine():
    """The former `engine` package as a module, or raise RuntimeError saying why not."""
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    repo = Path(__file__).resolve().parents[1]
    listing = _git(repo, "ls-tree", "--name-only", f"{FORMER_COMMIT}:engine")
    target = Path(tempfile.mkdtemp(prefix="former-engine-")) / _NAME
    target.mkdir()
    for name in listing.split():
        if not name.endswith(".py"):
            continue
        text = _git(repo, "show", f"{FORMER_COMMIT}:engine/{name}")
        text = text.replace("nudgeability.engine", _NAME)
        # What it imported from outside engine/ and has moved since (issue 21, the regrouping).
        for was, now in _MOVED.items():
            text = text.replace(was, now)
        text = text.replace('NAME = "nudge_fork"', 'NAME = "nudge_fork_former"')
        (target / name).write_text(text)
    sys.path.insert(0, str(target.parent))
    return importlib.import_module(_NAME)


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(
            f"the former engine (git {FORMER_COMMIT}) cannot be read from {repo}: {exc}"
        ) from None
