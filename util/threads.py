"""The CPU thread count of torch, set once per process and recorded with what it produced.

Two torch processes that each use every core slow each other down about tenfold (their threads
spin-wait on each other's cores), so a shard sharing a machine should get its own share of the
cores: `nudge run --threads` and `nudge bench --threads` call `set_threads`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch


def set_threads(threads: int | None) -> int:
    """Set torch's CPU threads (None: leave torch's default); returns the count now in use."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"--threads {threads!r}: must be a positive integer")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The cores this process may use: torch's thread count (which honours OMP_NUM_THREADS, else
    counts the machine's cores), at most the CPUs it is pinned to (taskset, a batch system's
    affinity) and the CPU quota of its cgroup v2 (docker --cpus, Kubernetes limits), which
    torch's count ignores."""
    cores = torch.get_num_threads()
    if hasattr(os, "sched_getaffinity"):
        cores = min(cores, len(os.sched_getaffinity(0)))
    try:
        quota, period = cgroup.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores)
