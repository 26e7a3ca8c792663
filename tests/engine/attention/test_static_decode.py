"""The CUDA path's logic, forced on CPU: fixed-shape decode steps (FlexAttention over the pool,
the buffers a CUDA graph replays) and the CUDA attention kernels' branch (stand-ins with the
kernels' signatures). The capture itself, and the kernels' speed, only a GPU can show
(`benchmarks/gpu_check.py`)."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from helpers.cuda_standins import lse_padded
from helpers.engine_reference import assert_matches_reference, random_ids
from torch.nn.attention.flex_attention import create_mask
from torch.profiler import ProfilerActivity, profile

import nudgeability.engine.attention.lse_kernels as lse_kernels
import nudgeability.engine.attention.shared_prefix_attention as attention
from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.engine.attention import static_decode
from nudgeability.models.testing.tiny import tiny_model


def test_fixed_shape_decode_steps_give_every_arm_its_solo_tokens(tiny):
    arch, model = tiny
    engine = Engine(model, static_decode=True)
    prefix = random_ids(120, seed=1)
    suffixes = [random_ids(n, seed=100 + n) for n in (1, 2, 0, 5, 8, 13)]
    arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=20), return_logits=True)
    for suffix, arm in zip(suffixes, arms):
        assert_matches_reference(model, arm, prefix + suffix, 20, engine.eos_ids)
    prompts = [random_ids(n, seed=10 + n) for n in (1, 5, 37, 120, 64, 2)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16), return_logits=True)
    for prompt, out in zip(prompts, outs):
        assert_matches_reference(model, out, prompt, 16, engine.eos_ids)


@pytest.mark.parametrize("arch", ["qwen3", "gemma4"])
def test_fixed_shape_decode_reads_a_stem_segment_and_a_window(arch):
    """A fork whose prefix is a run and a stem (two segments) decodes right in fixed shapes."""
    model = tiny_model(arch, seed=3)
    prompt, cut = random_ids(50, seed=2), 12
    base = Engine(model).generate([prompt], SamplingParams(max_new_tokens=20, ignore_eos=True))[0]
    prefix = prompt + base.token_ids[:cut]
    suffixes = [random_ids(3, seed=5), random_ids(6, seed=6)]
    request = ForkRequest(prefix, suffixes, SamplingParams(max_new_tokens=12), stem=cut + 1)
    engine = Engine(model, static_decode=True)
    for suffix, arm in zip(suffixes, engine.fork_many([request], return_logits=True)[0]):
        assert_matches_reference(model, arm, prefix + suffix, 12, engine.eos_ids)


def _dense_flex(q, k, v, block_mask, scale, enable_gqa, kernel_options=None):
    """A fixed-shape stand-in for CPU flex_attention's reference path (which branches on the
    mask's contents): the same masked softmax, materialised."""
    rows, slots = q.shape[2], k.shape[2]
    mask = create_mask(block_mask.mask_mod, 1, 1, rows, slots, device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def test_fixed_shape_steps_keep_their_buffers_and_shapes_and_read_the_device_once(
    host_reads, monkeypatch
):
    """What a CUDA graph captures, the forward, runs the same operations on the same shapes and
    buffers at every decode step of a bucket, rows leaving or not; the step reads the device once.
    (FlexAttention's own kernel is a stand-in here: its CPU reference branches on the mask.)"""
    monkeypatch.setattr(static_decode, "flex_attention", _dense_flex)
    model = tiny_model("llama", num_layers=2, seed=4)
    engine = Engine(model, static_decode=True)
    refs = engine.submit_fork(
        ForkRequest(
            random_ids(40, seed=7),
            [random_ids(n, seed=n) for n in (4, 9, 2)],
            [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (12, 12, 6)],
        )
    )
    while not all(engine.peek(r) for r in refs):
        engine.step()
    shapes, buffers = [], []
    forward = engine.runner.forward

    def recorded(cache, ids, positions):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            hidden = forward(cache, ids, positions)
        shapes.append(
            collections.Counter(
                (e.name, str(e.input_shapes)) for e in prof.events() if e.name.startswith("aten::")
            )
        )
        layout = cache.layout
        buffers.append([t.data_ptr() for t in (layout.input_ids, layout.slots, layout.kv_indices)])
        return hidden

    engine.runner.forward = recorded  # this engine's runner only: the instance's attribute
    first = len(host_reads)
    while engine.busy:
        engine.step()
    # one bucket (16 rows) for all 11 decode steps, even after a row left at step 5; the first
    # also builds the block masks (a graph is captured after warm-up runs)
    assert len(shapes) == 11 and all(s == shapes[1] for s in shapes[1:])
    assert all(b == buffers[0] for b in buffers)
    assert [dict(c) for c in host_reads[first:]] == [{"tolist": 1}] * 11


def test_the_cuda_kernels_branch_gives_the_solo_tokens(monkeypatch):
    """`lse_kernels.attend_cuda` forced on CPU with stand-ins of the two CUDA kernels' signatures and outputs
    (flash: no mask, half precision only; memory-efficient: a 4-D aligned bias, a padded lse):
    the branch's bias alignment, expansion and lse slicing keep every arm equal to its solo run."""
    seen = collections.Counter()

    def flash(q, k, v, dropout, causal, debug, *, scale):
        seen["flash"] += 1
        out, lse = lse_kernels.attend_explicit(q, k, v, None, scale)
        return out, lse

    def efficient(q, k, v, bias, compute_lse, dropout, causal, *, scale):
        seen["efficient"] += 1
        if bias is not None:
            assert bias.dim() == 4 and bias.shape[2] == q.shape[2]
            assert bias.stride(-2) % 16 == 0 or bias.stride(-2) == 0  # aligned rows
        out, lse = lse_kernels.attend_explicit(q, k, v, bias, scale)
        return out, lse_padded(lse, q.shape[2])

    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "flash", flash)
    monkeypatch.setitem(lse_kernels.CUDA_KERNELS, "efficient", efficient)
    monkeypatch.setattr(attention, "_attend", lse_kernels.attend_cuda)
    monkeypatch.setattr(attention, "fixed_shape_cpu", lambda t: False)
    for arch, dtype in (("gemma4", torch.float32), ("llama", torch.bfloat16)):
        model = tiny_model(arch, seed=9).to(dtype)
        engine = Engine(model)
        prefix = random_ids(90, seed=11)
        suffixes = [random_ids(n, seed=500 + n) for n in (2, 9, 0)]
        arms = engine.fork(prefix, suffixes, SamplingParams(max_new_tokens=10), return_logits=True)
        if dtype == torch.float32:
            for suffix, arm in zip(suffixes, arms):
                assert_matches_reference(model, arm, prefix + suffix, 10, engine.eos_ids)
    assert seen["efficient"] > 0 and seen["flash"] > 0
