"""The CPU thread count of torch, set once per process and recorded with what it produced.

Two torch processes that each use every core slow each other down about tenfold (their threads
spin-wait on each other's cores), so a shard sharing a machine should get its own share of the
cores: `nudge run --threads` and `nudge bench --threads` call `set_threads`.
"""

from __future__ import annotations

import torch


def set_threads(threads: int | None) -> int:
    """Set torch's CPU threads (None: leave torch's default); returns the count now in use."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"--threads {threads!r}: must be a positive integer")
        torch.set_num_threads(threads)
    return torch.get_num_threads()
