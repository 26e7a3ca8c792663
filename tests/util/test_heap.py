"""`release_freed_heap` (util/heap.py) hands freed heap pages back: the process's resident size,
read from /proc, falls by what was freed below a live block."""

from __future__ import annotations

import ctypes.util
import sys
from pathlib import Path

import pytest
import torch

from nudgeability.util.heap import release_freed_heap

MIB = 2**20


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(
    sys.platform != "linux" or "libc.so" not in (ctypes.util.find_library("c") or ""),
    reason="glibc's heap",
)
def test_freed_chunks_below_a_live_block_go_back_to_the_os():
    chunks = [torch.ones(16 * 1024) for _ in range(1600)]  # 100 MiB of 64 KiB heap chunks
    pin = torch.ones(16)  # above them: the heap cannot shrink from its top
    del chunks
    before = rss()
    release_freed_heap()
    assert before - rss() > 75 * MIB  # without the call: 0 (measured)
    del pin
