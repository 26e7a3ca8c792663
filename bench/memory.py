"""Peak memory of one piece of work: this process's (`memory_mark` / `memory_peak`, CUDA's
allocator peak or the RSS rise on CPU) or a child process's (`run_child`).

Linux keeps the peak RSS of a process (VmHWM) and lets a process reset it by writing "5" to
/proc/self/clear_refs, so a child can report: the runtime baseline (Python + torch, no model), the
RSS with the model loaded, and the peak during the work alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch


def rss_kib(field: str = "VmRSS") -> int:
    """A field of /proc/self/status in KiB (VmRSS now, VmHWM the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field}: peak memory needs Linux")


def reset_peak() -> None:
    """Reset VmHWM to the current RSS."""
    Path("/proc/self/clear_refs").write_text("5")


def memory_mark(device: torch.device) -> int:
    """Start a peak measurement; returns the baseline (bytes) it is measured from."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return 0
    reset_peak()
    return rss_kib("VmRSS") * 1024


def memory_peak(device: torch.device, before: int) -> int:
    """The peak (bytes) since `memory_mark` returned `before`."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return max(0, rss_kib("VmHWM") * 1024 - before)


def run_child(script: str, *args: str) -> dict:
    """Run `python script --child args...`; it prints one JSON object as its last stdout line."""
    out = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {script} {args} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
