"""The engine's former static batching, as it was: its own code at git `FORMER_COMMIT`, run in a
child process beside today's package.

`benchmarks/campaign.py` compares the engine with the code it replaced, not with an imitation: the
whole checkout at `FORMER_COMMIT` (plan_batches fixes each batch's groups before it starts, every
row reserves its whole budget of suffix slots, prefixes are padded to the batch's longest, the
batch runs until its last row finishes). `former_tree` extracts it with `git archive` into a
temporary folder, unchanged; `run_former` runs `former_child.py` in a child process whose
`nudgeability` is that tree (a one-line package whose `__path__` is the tree's root, which is what
pyproject's `package-dir` maps), so old code imports old code and nothing is rewritten. The child
loads the checkpoint itself, times only the engine's work, and sends back a `Run`.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from functools import cache
from pathlib import Path

from .campaign import Run

FORMER_COMMIT = "970209c"  # main before issue 23: the last commit of the static engine
REPO = Path(__file__).resolve().parents[1]
_CHILD = Path(__file__).with_name("former_child.py")
_RUN_CHILD = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"


def former_tree(repo: Path = REPO) -> Path:
    """A folder holding the `nudgeability` package of `FORMER_COMMIT` (its checkout under it), or
    RuntimeError saying why not (a shallow clone lacks the commit)."""
    return commit_tree(FORMER_COMMIT, repo)


@cache
def child_place(commit: str | None, repo: Path = REPO) -> tuple[dict[str, str], Path]:
    """The environment and working folder of a child process that runs today's code (`commit`
    None: this process's environment, the repository) or `commit`'s unchanged (its
    `commit_tree` first on PYTHONPATH, its checkout as the folder, where its own scripts lie)."""
    env = dict(os.environ)
    if commit is None:
        return env, repo
    path = commit_tree(commit, repo)
    env["PYTHONPATH"] = str(path)
    return env, path.parent / "checkout"  # `commit_tree`'s layout


def run_child(args: list[str], commit: str | None, extra_env: dict[str, str] | None = None) -> str:
    """The standard output of `python *args` run in a child on today's code or `commit`'s
    (`child_place`), with `extra_env` added to its environment; RuntimeError with the tail of
    its standard error when it fails."""
    env, cwd = child_place(commit)
    env.update(extra_env or {})
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{commit or 'today'}: {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def commit_tree(commit: str, repo: Path = REPO) -> Path:
    """A folder holding the `nudgeability` package of `commit` (its checkout under it), put
    first on a child's PYTHONPATH to run that commit's code unchanged; RuntimeError saying why
    not (a shallow clone lacks the commit)."""
    root = Path(tempfile.mkdtemp(prefix=f"nudge-{commit}-"))
    # removed when this process exits (a fork of it, which inherits the hook, leaves it)
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(root, ignore_errors=True))
    archive = root / "tree.tar"
    try:
        with open(archive, "wb") as out:
            subprocess.run(
                ["git", "-C", str(repo), "archive", "--format=tar", commit],
                stdout=out,
                stderr=subprocess.PIPE,
                check=True,
            )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(f"git {commit} cannot be read from {repo}: {exc}") from None
    with tarfile.open(archive) as tar:
        tar.extractall(root / "checkout", filter="data")
    package = root / "path" / "nudgeability"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__path__ = [{str(root / 'checkout')!r}]\n")
    return root / "path"


def run_former(model_dir: str | Path, work, *, kv: int, threads: int | None = None) -> Run:
    """The former engine's static batches on `work` (as `campaign.run_engine` takes it) under a
    KV budget of `kv` token slots, on the checkpoint in `model_dir` (fp32, CPU); its decode steps
    counted. `threads`: torch's CPU threads in the child (None: torch's choice)."""
    request = {"model": str(model_dir), "work": list(work), "kv": kv, "threads": threads}
    # The child must not see this checkout's package: only the former tree names `nudgeability`.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(former_tree())
    out = subprocess.run(
        [sys.executable, "-c", _RUN_CHILD, str(_CHILD)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=former_tree(),
        env=env,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the former engine failed:\n{out.stderr[-3000:]}")
    return Run(**json.loads(out.stdout.strip().splitlines()[-1]))
