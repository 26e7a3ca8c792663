"""On CPU the KV pool's resident memory is its blocks in use (engine/kv/kv_pool.py): a storage
never takes pages the C heap already holds, and a grow copies only the blocks that are held. The
resident bytes are the kernel's own count (`mincore`), not the pool's bookkeeping."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest
import torch

from nudgeability.engine.kv.kv_pool import KVPool

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="mincore and RSS: Linux")

PAGE = os.sysconf("SC_PAGE_SIZE")
KV, D, BLOCK = 2, 64, 16  # a block of one head: 16 slots x 64 fp32 = 4 KiB, one page
LIBC = ctypes.CDLL(None)
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident(t: torch.Tensor) -> int:
    """Bytes of `t`'s storage in resident pages, as the kernel reports them."""
    start, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
    first = start // PAGE * PAGE
    pages = -(-(start + size - first) // PAGE)
    vec = (ctypes.c_ubyte * pages)()
    assert LIBC.mincore(first, start + size - first, vec) == 0
    return sum(b & 1 for b in bytes(vec)) * PAGE


def pool(blocks: int) -> KVPool:
    p = KVPool(blocks, BLOCK, 1, "cpu")
    with torch.inference_mode():  # as the engine makes its layers, inside the forward
        p.layer(0, KV, D, torch.float32)
    return p


def block_bytes() -> int:
    return KV * BLOCK * D * 4


def write(p: KVPool, start: int, count: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        p.k[0][:, start : start + count] = torch.randn(KV, count, D, generator=g)
        p.v[0][:, start : start + count] = torch.randn(KV, count, D, generator=g)


@pytest.mark.skipif(PAGE != 4096, reason="the block-to-page arithmetic assumes 4 KiB pages")
def test_a_new_pool_takes_no_page_the_heap_had_freed():
    # glibc serves a block below its mmap threshold from the heap, and the threshold rises to the
    # largest mapped block freed so far: once a 24 MiB tensor is freed, 16 MiB comes from the heap,
    # where the 100 MiB of chunks freed below `pin` are still resident
    big = torch.empty(6 * 2**20)
    del big
    chunks = [torch.ones(16 * 1024) for _ in range(1600)]
    pin = torch.ones(16)
    del chunks
    p = pool(2048)  # keys and values of 16 MiB each
    assert resident(p.k[0]) == resident(p.v[0]) == 0
    start = p.take_run(3 * BLOCK)
    write(p, start, 3 * BLOCK, seed=1)
    assert resident(p.k[0]) == resident(p.v[0]) == 3 * block_bytes()
    del pin


@pytest.mark.skipif(PAGE != 4096, reason="the block-to-page arithmetic assumes 4 KiB pages")
def test_a_grow_keeps_the_held_blocks_and_maps_only_them():
    p = pool(64)
    run = p.take_run(5 * BLOCK)  # blocks 1-5
    singles = [p.take_block() for _ in range(4)]  # blocks 63, 62, 61, 60
    write(p, 0, 64 * BLOCK, seed=2)  # every slot written, the scratch block too
    p.give_blocks(singles[1:3])  # 62 and 61 go back: written, now free
    p.give_run(run + 3 * BLOCK, 2 * BLOCK)  # blocks 4 and 5 too
    held = [0, 1, 2, 3, 60, 63]  # the scratch block is never free
    before_k, before_v = p.k[0].clone(), p.v[0].clone()

    p.grow(256)

    assert p.k[0].shape == (KV, 256 * BLOCK, D) and p.num_blocks == 256
    for b in held:
        slots = slice(b * BLOCK, (b + 1) * BLOCK)
        assert torch.equal(p.k[0][:, slots], before_k[:, slots])
        assert torch.equal(p.v[0][:, slots], before_v[:, slots])
    assert resident(p.k[0]) == resident(p.v[0]) == len(held) * block_bytes()
    assert p.touched_blocks == len(held)
    # the freed blocks are handed out again as before: highest first
    assert p.take_block() == 255 * BLOCK


@pytest.mark.skipif(PAGE != 4096, reason="the block-to-page arithmetic assumes 4 KiB pages")
def test_a_block_given_back_is_taken_again_before_a_fresh_one():
    p = pool(64)
    first, second = p.take_block(), p.take_block()  # blocks 63 and 62
    write(p, first, BLOCK, seed=3)
    write(p, second, BLOCK, seed=4)
    p.grow(128)  # blocks 64-127: fresh, and above every block handed out so far
    top = p.take_block()
    assert top == 127 * BLOCK
    write(p, top, BLOCK, seed=5)
    p.give_blocks([second])
    again = p.take_block()
    assert again == second  # not block 126, whose pages were never written
    write(p, again, BLOCK, seed=6)
    # 63, 62 (again) and 127, and the scratch block 0, copied by the grow as a held block
    assert resident(p.k[0]) == resident(p.v[0]) == 4 * block_bytes()
