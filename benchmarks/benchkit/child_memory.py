"""Peak memory of a child process (`run_child`: it reports its own, by costs/memory.py `rss_kib`
and `reset_peak`) and of a whole process tree (`tree_peaks`: sampled from outside).

Linux keeps the peak RSS of a process (VmHWM) and lets a process reset it by writing "5" to
/proc/self/clear_refs, so a child can report: the runtime baseline (Python + torch, no model), the
RSS with the model loaded, and the peak during the work alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def run_child(script: str, *args: str) -> dict:
    """Run `python script --child args...`; it prints one JSON object as its last stdout line."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {script} {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pss(pid: int) -> int:
    """A process's proportional set size in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_peaks(proc: subprocess.Popen, every: float) -> dict[str, int]:
    """Until `proc` ends, sampled each `every` seconds: the peaks of its process tree's summed
    RSS and summed PSS (bytes), the most processes in the tree, and how many held the PSS peak."""
    import psutil

    top = psutil.Process(proc.pid)
    out = {"rss": 0, "pss": 0, "processes": 0, "at_peak": 0}
    while proc.poll() is None:
        try:
            procs = [top, *top.children(recursive=True)]
            out["rss"] = max(out["rss"], sum(p.memory_info().rss for p in procs if p.is_running()))
            now = sum(pss(p.pid) for p in procs)
            if now > out["pss"]:  # how many processes held the peak: before or after a fork
                out["pss"], out["at_peak"] = now, len(procs)
            out["processes"] = max(out["processes"], len(procs))
        except psutil.Error:
            pass
        time.sleep(every)
    return out
