"""Peak memory of one piece of work in this process (`memory_mark` / `memory_peak`): CUDA's
allocator peak, or on CPU the RSS rise.

Linux keeps the peak RSS of a process (VmHWM) and lets a process reset it by writing "5" to
/proc/self/clear_refs (`reset_peak`). The benchmarks' child-process measure is
benchmarks/benchkit/child_memory.py (not installed).
"""

from __future__ import annotations

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
