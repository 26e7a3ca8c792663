"""Write one benchmark's section of benchmarks/RESULTS.md, leaving the other sections alone."""

from __future__ import annotations

import fcntl
import platform
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

# benchmarks/RESULTS.md, beside this package, in the repository's root
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
_HEADER = (
    "# Benchmark results\n\nOne section per script of benchmarks/ that writes one: its latest "
    "figures, the command that produced them and the machine, rewritten whole by the script "
    "(benchkit/results.py). Earlier figures are in git history.\n"
)


def machine() -> str:
    import torch

    cores = len(__import__("os").sched_getaffinity(0))
    return f"{platform.machine()}, {cores} cores, Python {platform.python_version()}, torch {torch.__version__}"


def command_line() -> str:
    """This process's command, the script named by its path from the repository's root (as the
    README says to run it), wherever it was started from."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(ROOT):
        script = script.relative_to(ROOT)
    return " ".join(["python", str(script), *sys.argv[1:]])


def write_section(name: str, body: str, command: str | None = None) -> None:
    """Replace (or append) the section `name` of RESULTS.md with `body`.

    The section records the command that produced it, the date and the machine.
    """
    command = command or command_line()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- BEGIN {name} -->\n## {name}\n\n"
        f"Command: `{command}`  \nRun: {stamp} on {machine()}\n\n{body.strip()}\n<!-- END {name} -->\n"
    )
    pattern = re.compile(
        rf"<!-- BEGIN {re.escape(name)} -->.*?<!-- END {re.escape(name)} -->\n", re.S
    )
    # Two scripts finishing together must not lose each other's section: read-modify-write under a lock.
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        text = RESULTS.read_text() if RESULTS.exists() else _HEADER
        text = (
            pattern.sub(lambda _: section, text)
            if pattern.search(text)
            else text.rstrip("\n") + "\n\n" + section
        )
        tmp = RESULTS.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(RESULTS)


def publish(name: str, body: str, *, write: bool = True) -> None:
    """Print `body` and, unless `write` is False (a script's --no-write), make it the section
    `name` of RESULTS.md."""
    print(body)
    if write:
        write_section(name, body)
