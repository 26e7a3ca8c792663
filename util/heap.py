"""The C heap's freed memory, handed back to the OS (glibc's `malloc_trim`).

torch's CPU tensors come from `malloc`. glibc serves an allocation below its mmap threshold from
its heap, and that threshold rises (up to 32 MiB) each time a larger mapped block is freed, so
after the first big tensors the activations of a long forward (tens of MB each) live in the heap
too. When they are freed the heap keeps them, between live blocks, resident for the life of the
process: measured on the demo (benchmarks/demo_memory.py, RESULTS.md), its first step (2,030
tokens of SmolLM2) left about 300 MiB of freed heap resident; in a quantised load
(models/quant/loader.py), the repacking kernels' temporaries, 239 MiB of SmolLM2's W4A16 load. `release_freed_heap` hands such
free pages back; the heap keeps its layout, and a page is mapped again when next written.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # another C library: nothing to hand back this way
        return None


def release_freed_heap() -> None:
    """Hand the heap's free pages back to the OS (module docstring); a no-op off glibc."""
    trim = _trim()
    if trim is not None:
        trim(0)
