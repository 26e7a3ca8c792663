"""Peak resident memory of one piece of work, measured in a child process.

Linux keeps the peak RSS of a process (VmHWM) and lets a process reset it by writing "5" to
/proc/self/clear_refs, so a child can report: the runtime baseline (Python + torch, no model), the
RSS with the model loaded, and the peak during the work alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def run_child(script: str, *args: str) -> dict:
    """Run `python script --child args...`; it prints one JSON object as its last stdout line."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {script} {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
