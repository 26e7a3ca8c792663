"""The fixed-shape decode's tiles and owner tables (engine/attention/decode_layout.py), checked
after every `load()` against a brute-force reading of the step plan: each tile holds rows of one
group and lists that group's prefix blocks and its rows' own blocks, each once; every slot's
owner entry is exactly what the plan's rows hold; and a step sends only what changed. The
outputs go through `block_sparse_flex` (each tile sees only the blocks it lists), against HF."""

from __future__ import annotations

import pytest
from helpers.capture_hazards import block_sparse_flex
from helpers.engine_reference import assert_matches_reference, mixed_fork_requests, random_ids

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention import static_decode
from nudgeability.engine.kv.kv_pool import SCRATCH_BLOCK
from nudgeability.models.testing.tiny import tiny_model


def _prefix_blocks(group, bs: int) -> list[int]:
    out: list[int] = []
    for s in group.segments:
        if s.length:
            out += range(s.start // bs, (s.start + s.length - 1) // bs + 1)
    return out


def check_tables(static, plan) -> None:
    """What a step's tables must say, derived from the plan alone."""
    bs, tile, chunks = static.block_size, static_decode.Q_TILE, plan.row_chunks
    n, rows = len(chunks), static.rows
    slot_row, query_slot = static.slot_row.tolist(), static.query_slot.tolist()
    counts = static.kv_num_blocks[0, 0].tolist()
    members: dict[int, list[int]] = {}
    for i in range(rows):
        assert slot_row[query_slot[i]] == i  # a row's output is read from a slot computing it
        members.setdefault(query_slot[i] // tile, []).append(i)
    for t in range(static.tiles):
        listed = static.kv_indices[0, 0, t, : counts[t]].tolist()
        mine = members.get(t, [])
        if not mine:
            assert counts[t] == 0
            continue
        assert all(slot_row[s] in mine for s in range(t * tile, (t + 1) * tile))
        if mine[0] >= n:  # pad rows, alone in their tiles
            assert all(i >= n for i in mine) and listed == [SCRATCH_BLOCK]
            continue
        assert all(i < n for i in mine) and len({id(chunks[i][0].group) for i in mine}) == 1
        expected = _prefix_blocks(chunks[mine[0]][0].group, bs)
        for i in mine:
            expected += [first // bs for first in chunks[i][0].blocks]
        assert sorted(listed) == sorted(expected)  # each block once: the prefix once per tile
    owner, pos = static.slot_owner.tolist(), static.slot_pos.tolist()
    held = {}
    for row, _, _ in chunks:
        for j, first in enumerate(row.blocks):
            held.update({first + k: (row.id, j * bs + k) for k in range(bs)})
    keys = {row.id for row, _, _ in chunks}
    for slot in range(len(owner)):
        if slot in held:
            assert (owner[slot], pos[slot]) == held[slot], slot
        else:
            assert owner[slot] not in keys, (slot, owner[slot])


@pytest.fixture
def checked(monkeypatch):
    """Every `load()` checked (`check_tables`); lists each one's bucket, its rows' block counts
    (row id -> blocks) and the sizes of the parts it sent."""
    loads = []
    load, step = static_decode.StaticDecode.load, static_decode.DecodeLayout.step

    def recorded_step(self, plan, pad_id):
        out = step(self, plan, pad_id)
        blocks = {row.id: len(row.blocks) for row, _, _ in plan.row_chunks}
        loads.append((self.rows, blocks, out[1]))
        return out

    def checked_load(self, plan, pad_id):
        n = load(self, plan, pad_id)
        check_tables(self, plan)
        return n

    monkeypatch.setattr(static_decode.DecodeLayout, "step", recorded_step)
    monkeypatch.setattr(static_decode.StaticDecode, "load", checked_load)
    monkeypatch.setattr(static_decode, "flex_attention", block_sparse_flex)
    return loads


def test_tiles_follow_groups_through_preemption_and_bucket_changes(checked):
    """Forks of 1 to 4 arms and lone prompts under a budget that preempts (rows recomputed into
    other blocks), and a fork of 20 arms (two tiles of one group, buckets 32 then 16)."""
    model = tiny_model("qwen3", num_layers=2, seed=5)
    engine = Engine(model, max_batch_tokens=300, block_size=4, static_decode=True)
    requests = mixed_fork_requests()
    requests.append(
        ForkRequest(
            random_ids(30, seed=3),
            [random_ids(1 + i % 3, seed=i) for i in range(20)],
            [SamplingParams(max_new_tokens=4 + i % 5, ignore_eos=True) for i in range(20)],
        )
    )
    outs = engine.fork_many(requests[:-1], return_logits=True)
    outs += engine.fork_many(requests[-1:], return_logits=True)
    prompts = [random_ids(n, seed=40 + n) for n in (3, 17, 9)]
    lone = engine.generate(prompts, SamplingParams(max_new_tokens=6), return_logits=True)
    assert engine.stats.preemptions > 0
    assert {rows for rows, _, _ in checked} >= {16, 32}
    # HF for the 4-arm fork, arms on both sides of the 20-arm fork's tile boundary, a lone prompt
    picked = [(2, i) for i in range(4)] + [(5, i) for i in (0, 15, 16, 19)]
    for r, i in picked:
        request = requests[r]
        prompt = request.prefix_ids + request.suffixes[i]
        budget = request.params[i].max_new_tokens
        assert_matches_reference(model, outs[r][i], prompt, budget, engine.eos_ids)
    assert_matches_reference(model, lone[1], prompts[1], 6, engine.eos_ids)
