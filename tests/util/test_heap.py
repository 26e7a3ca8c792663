"""util/heap.py: `release_freed_heap` hands freed heap pages back (a process's resident size,
read from /proc, falls by what was freed below a live block); `hold_freed_heap` keeps the freed
top for the next forward (minor page faults, read from getrusage)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from nudgeability.util.heap import held_heap_tunables

MIB = 2**20

# 100 MiB of 64 KiB chunks from the heap, then a block above them, from the heap's top, which
# keeps it from shrinking once they are freed; plain malloc calls in a fresh process, so that
# the block lands above them (with torch tensors in the test's process, a small one sometimes
# took a hole below, the freed chunks went back with the top by themselves, and the call had
# nothing left to hand back: a flaky failure, about one run in ten).
RELEASE = """
import ctypes, sys
import pathlib
from nudgeability.util.heap import release_freed_heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
CHUNK = 64 * 1024
chunks = [libc.malloc(CHUNK) for _ in range(1600)]
for chunk in chunks:
    ctypes.memset(chunk, 1, CHUNK)
pin = libc.malloc(100 * 1024)  # under glibc's first mmap threshold (128 KiB): from the top
ctypes.memset(pin, 1, 100 * 1024)
for chunk in chunks:
    libc.free(chunk)
before = rss()
if sys.argv[1] == "release":
    release_freed_heap()
print(before - rss())
"""


def _freed_bytes_given_back(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", RELEASE, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(
    sys.platform != "linux" or "libc.so" not in (ctypes.util.find_library("c") or ""),
    reason="glibc's heap",
)
def test_freed_chunks_below_a_live_block_go_back_to_the_os():
    assert _freed_bytes_given_back("keep") < 5 * MIB  # control: the live block holds them
    assert _freed_bytes_given_back("release") > 75 * MIB


# A forward's shape of allocation, through malloc as torch's CPU tensors are allocated (c10's
# alloc_cpu): per layer an MLP's three activations (gate, up and their product, 6 MiB each at
# 1,024 tokens of SmolLM2), written, then all freed before the next layer's. Plain malloc calls,
# so that no small allocation of the interpreter or of torch lands above them and pins the
# heap's top by chance (with torch tensors the default shrank it in some processes, not others).
FORWARDS = """
import ctypes, resource, sys
from nudgeability.util.heap import hold_freed_heap
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "held":
    assert hold_freed_heap()
BLOCK = 1024 * 1536 * 4
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def forward():
    for _ in range(8):
        blocks = [libc.malloc(BLOCK) for _ in range(3)]
        for block in blocks:
            ctypes.memset(block, 1, BLOCK)
        for block in blocks:
            libc.free(block)
forward(); forward()
before = faults()
for _ in range(4):
    forward()
print(faults() - before)
"""
LAYER_PAGES = 3 * 1024 * 1536 * 4 // 4096  # the pages of one layer's three activations


def _faults_of_four_forwards(mode: str, env: dict | None = None) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FORWARDS, mode],
        capture_output=True,
        text=True,
        check=True,
        env=None if env is None else {**os.environ, **env},
    )
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(
    sys.platform != "linux" or "libc.so" not in (ctypes.util.find_library("c") or ""),
    reason="glibc's heap",
)
def test_a_held_heap_maps_a_forwards_activations_once():
    """glibc's own shrink from inside `free` gives each layer's freed activations back, and the
    next layer faults every page in again: four forwards of 8 such layers map about 4 x 8 x 4,600
    pages afresh (the control; measured 146,432 here). Held (`hold_freed_heap`), the same
    forwards reuse the heap's pages and map none again (measured 0)."""
    pages = 4 * 8 * LAYER_PAGES
    assert _faults_of_four_forwards("glibc") > pages // 2  # control: the default maps again
    assert _faults_of_four_forwards("held") < pages // 100


@pytest.mark.skipif(
    sys.platform != "linux" or "libc.so" not in (ctypes.util.find_library("c") or ""),
    reason="glibc's heap",
)
def test_the_held_heap_as_tunables_holds_it_in_a_process_that_never_asks():
    """`held_heap_tunables` in GLIBC_TUNABLES gives a process that never calls
    `hold_freed_heap` (as an earlier commit's code) the same policy: the control's forwards
    again, mapping none of their pages afresh."""
    pages = 4 * 8 * LAYER_PAGES
    held = _faults_of_four_forwards("glibc", {"GLIBC_TUNABLES": held_heap_tunables()})
    assert held < pages // 100
