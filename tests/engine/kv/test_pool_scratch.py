"""`KVPool.scratch` (the checks before the run write there, engine/kernel_checks.py): blocks
handed out inside hold zeros again after it, the scratch block what it held, a held block what it
held, and the pool hands out the blocks it would have without it."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.kv.kv_pool import SCRATCH_BLOCK, KVPool


def _pool(zero: bool) -> KVPool:
    pool = KVPool(10, 4, 2, "cpu", zero=zero)
    pool.layer(0, 2, 8, torch.float32)  # layer 1 is made inside the scratch context
    return pool


@pytest.mark.parametrize("zero", [True, False])  # the fixed-shape decode's pool; CPU's mapped one
def test_a_scratch_context_leaves_the_pool_as_it_found_it(zero):
    pool, twin = _pool(zero), _pool(zero)
    for p in (pool, twin):
        held = p.take_block()
        p.k[0][:, held : held + 4] = 3.0
        p.k[0][:, SCRATCH_BLOCK * 4 : SCRATCH_BLOCK * 4 + 4] = 5.0  # pad writes before
        p.give_blocks([p.take_block()])  # a block handed out before: taken first next time
    before = [t.clone() for t in pool.k + pool.v if t is not None]
    with pool.scratch():
        run = pool.take_run(9)
        block = pool.take_block()
        pool.layer(1, 2, 8, torch.float32)
        for t in pool.k + pool.v:
            t[:, run : run + 12] = 7.0
            t[:, block : block + 4] = 7.0
            t[:, SCRATCH_BLOCK * 4 : SCRATCH_BLOCK * 4 + 4] = 9.0
        pool.give_run(run, 9)
    assert torch.equal(pool.k[0], before[0]) and torch.equal(pool.v[0], before[1])
    assert not pool.k[1].any() and not pool.v[1].any()  # made inside: zeros, as made after
    assert (pool.in_use, pool.peak_in_use) == (twin.in_use, twin.peak_in_use)
    assert (pool._free, pool._touched, pool._warm) == (twin._free, twin._touched, twin._warm)
    assert [pool.take_block(), pool.take_run(5)] == [twin.take_block(), twin.take_run(5)]
