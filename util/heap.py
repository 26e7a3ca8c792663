"""The C heap's freed memory: kept for the next forward (glibc's `mallopt`), handed back to the OS
after a long one (`malloc_trim`).

torch's CPU tensors come from `malloc`. glibc serves an allocation below its mmap threshold from
its heap, and that threshold rises (up to 32 MiB) each time a larger mapped block is freed, so
after the first big tensors the activations of a long forward (tens of MB each) live in the heap
too. When they are freed the heap keeps them, between live blocks, resident for the life of the
process: a long prefill, or a quantised load's repacking temporaries (models/quant/loader.py),
leaves hundreds of MiB of freed heap resident. `release_freed_heap` hands such free pages back;
the heap keeps its layout, and a page is mapped again when next written.

*Between those hand-backs the heap keeps what it frees* (`hold_freed_heap`). By default glibc
also shrinks the heap on its own, from inside `free`, whenever more than twice its (moving) mmap
threshold lies free at the top. A layer of a thousand-token forward frees activations of a few
MiB each, so the top passes that mark once per layer: the heap grows and shrinks by as much in
every layer (`strace -e brk` shows it), and every page given back is faulted in afresh by the
next layer, which costs the prefill time in the OS. Held means the automatic shrink off and the
mmap threshold pinned at glibc's own ceiling for its moving one (32 MiB: a block that large is
still mapped on its own and unmapped when freed). The peak resident size does not change (the
freed pages are what the same forward allocates next), and the engine's own hand-backs after
long forwards (engine/model_runner.py) still return them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's ceiling for its moving mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD = 32 << 20
# free bytes at the heap's top before `free` shrinks it: the most mallopt's int takes (2 GiB),
# more than a forward here frees
HELD_TOP = 2**31 - 1


@cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return libc if libc is not None and hasattr(libc, "malloc_trim") else None
    except OSError:  # another C library: nothing to hand back this way
        return None


@cache
def hold_freed_heap() -> bool:
    """Keep the heap's freed top for reuse until `release_freed_heap` hands it back, instead of
    glibc shrinking it from inside `free` (module docstring). Once per process; False (and
    nothing changed) off glibc. Large blocks stay mapped on their own above MMAP_THRESHOLD."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, HELD_TOP)
    )


def held_heap_tunables() -> str:
    """`hold_freed_heap`'s policy as glibc tunables (`GLIBC_TUNABLES`, read when a process
    starts): for a process whose code does not call it, such as an earlier commit's run side by
    side with this one (tests/util/test_heap.py checks that the two hold the same pages)."""
    return f"glibc.malloc.trim_threshold={HELD_TOP}:glibc.malloc.mmap_threshold={MMAP_THRESHOLD}"


def release_freed_heap() -> None:
    """Hand the heap's free pages back to the OS (module docstring); a no-op off glibc."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
