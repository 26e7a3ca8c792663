"""The compiled FlexAttention decode (opt-in on CUDA) passes the block-size rules of Inductor's
lowering, checked on the exact call the engine makes, for every bucket, GQA ratio, head size and
pool block size it can produce. The rules cannot run here (the lowering needs a GPU); they are
written out below from torch 2.13's source, in this test's words."""

from __future__ import annotations

import pytest
import torch

from nudgeability.engine.attention import decode_buckets, static_decode
from nudgeability.engine.kv.kv_cache import LayerKV
from nudgeability.engine.kv.kv_pool import KVPool

# torch/_inductor/template_heuristics/triton.py, CUDAConfigHeuristic: the one default forward
# config (BLOCK_M, BLOCK_N) of the main flex kernel per (dtype, head_dim) without max-autotune,
# on sm90 (h100 table) and sm80 (a100 table); missing keys take (64, 64) up to head_dim 256, and
# above 256 (32, 16) in fp32 and (64, 32) otherwise.
MAIN_DEFAULTS = {
    (9, 0): {
        (torch.float32, 64): (128, 32),
        (torch.float32, 128): (32, 64),
        (torch.float32, 256): (32, 32),
        (torch.bfloat16, 64): (128, 128),
        (torch.bfloat16, 128): (128, 64),
        (torch.bfloat16, 256): (64, 32),
    },
    (8, 0): {
        (torch.float32, 64): (128, 32),
        (torch.float32, 128): (128, 32),
        (torch.float32, 256): (64, 16),
        (torch.bfloat16, 64): (128, 64),
        (torch.bfloat16, 128): (128, 64),
        (torch.bfloat16, 256): (32, 64),
    },
}
DECODE_BLOCK_N = 64  # flex_decoding's one default config (FlexDecodeConfig block_n=64)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def lowering_problems(q_shape, kv_shape, mask, options, dtype, capability) -> list[str]:
    """What Inductor's FlexAttention lowering (torch 2.13, torch/_inductor/kernel/flex/) would
    reject in this call; empty when it compiles a kernel.

    - Kernel choice (torch/_inductor/kernel/flex/flex_decoding.py, `_use_flex_decoding`): the decode kernel runs when the
      query is shorter than 128, the GQA ratio is a power of two, the mask has one head and the
      option FORCE_USE_FLEX_ATTENTION is not set; otherwise the main kernel
      (torch/_inductor/kernel/flex/flex_attention.py).
    - Decode kernel: BLOCK_M is the option's value or max(next_pow2(q_len * ratio), 16); a
      config survives only if the mask's Q block is a multiple of BLOCK_M and its KV block a
      multiple of the config's BLOCK_N (capped at the KV block). None left: no kernel.
    - Main kernel: BLOCK_M / BLOCK_N are the options' values, else the default config's; the
      mask's Q block must be a multiple of BLOCK_M and its KV block of BLOCK_N ("Q and KV block
      size must be divisible by BLOCK_M and BLOCK_N" when it is the only config).
    - Either: BLOCK_M / BLOCK_N powers of two (FlexKernelOptions) and at least 16 (Triton's dot);
      head_dim at least 16 (the lowering raises below); the mask made for these lengths.
    """
    options = options or {}
    _, hq, q_len, d = q_shape
    _, hkv, kv_len, _ = kv_shape
    ratio = hq // hkv
    q_block, kv_block = mask.BLOCK_SIZE
    problems = []
    if tuple(mask.seq_lengths) != (q_len, kv_len):
        problems.append(f"mask made for {mask.seq_lengths}, call has {(q_len, kv_len)}")
    if d < 16:
        problems.append(f"head_dim {d} < 16")
    decode = (
        not options.get("FORCE_USE_FLEX_ATTENTION", False)
        and q_len < 128
        and _pow2(ratio)
        and mask.kv_indices.shape[1] == 1
    )
    if decode:
        block_m = options.get("BLOCK_M", max(_next_pow2(q_len * ratio), 16))
        block_n = min(DECODE_BLOCK_N, kv_block)
        if q_block % block_m or kv_block % block_n:
            problems.append(
                f"flex_decoding: no config (Q block {q_block} vs BLOCK_M {block_m}, "
                f"KV block {kv_block} vs BLOCK_N {block_n})"
            )
        sizes = (block_m, options.get("BLOCK_N", block_n))
    else:
        table = MAIN_DEFAULTS[capability]
        if d <= 256:
            default = table.get((dtype, d), (64, 64))
        else:
            default = (32, 16) if dtype == torch.float32 else (64, 32)
        sizes = (options.get("BLOCK_M", default[0]), options.get("BLOCK_N", default[1]))
        if q_block % sizes[0] or kv_block % sizes[1]:
            problems.append(
                f"main kernel: Q block {q_block} / KV block {kv_block} not divisible by "
                f"BLOCK_M {sizes[0]} / BLOCK_N {sizes[1]}"
            )
    if not all(_pow2(s) and s >= 16 for s in sizes):
        problems.append(f"block sizes {sizes} not powers of two >= 16")
    return problems


def _engine_call(monkeypatch, rows, ratio, head_dim, block_size, kv=2, blocks=40):
    """The flex call `flex_decode_attention` makes for one layer of a bucket: (q shape, kv
    shape, block mask, kernel options)."""
    seen = {}

    def recorder(q, k, v, block_mask=None, scale=None, enable_gqa=False, kernel_options=None):
        seen.update(q=tuple(q.shape), k=tuple(k.shape), mask=block_mask, options=kernel_options)
        return torch.zeros_like(q)

    monkeypatch.setattr(static_decode, "flex_attention", recorder)
    pool = KVPool(blocks, block_size, 1, "cpu", zero=True)
    static = static_decode.StaticDecode(rows, pool, torch.device("cpu"), block_size)
    k = torch.zeros(kv, blocks * block_size, head_dim)
    handle = LayerKV(static, k, k, None)
    q = torch.zeros(1, kv * ratio, rows, head_dim)
    static_decode.flex_decode_attention(q, handle, 1.0, None)
    return seen


@pytest.mark.parametrize("block_size", [16, 32, 64])
@pytest.mark.parametrize("rows", decode_buckets.BUCKETS)
def test_every_bucket_and_gqa_ratio_passes_the_lowering_block_rules(monkeypatch, rows, block_size):
    failures = []
    for ratio in range(1, 9):  # 3, 5, 6, 7: not powers of two (SmolLM2's is 3)
        for head_dim in (64, 128, 256, 512):
            call = _engine_call(monkeypatch, rows, ratio, head_dim, block_size)
            for capability in MAIN_DEFAULTS:
                for dtype in (torch.bfloat16, torch.float32):
                    found = lowering_problems(
                        call["q"], call["k"], call["mask"], call["options"], dtype, capability
                    )
                    if found:
                        failures.append((ratio, head_dim, capability, dtype, found[0]))
    assert not failures, f"{len(failures)} shapes fail, e.g. {failures[:3]}"


@pytest.mark.parametrize("block_size", [4, 8, 24, 48, 128])
def test_a_pool_block_the_kernel_cannot_tile_is_refused_up_front(monkeypatch, block_size):
    """Block sizes outside 16/32/64: either the call passes the rules or the engine refuses the
    compiled path before the first step (static_decode.refusal, recorded as a fallback)."""
    refusal = static_decode.refusal(block_size, {64})
    if block_size % 16:
        assert refusal is not None
        return
    assert refusal is None
    for rows in decode_buckets.BUCKETS:
        call = _engine_call(monkeypatch, rows, 3, 128, block_size)
        assert not lowering_problems(
            call["q"], call["k"], call["mask"], call["options"], torch.bfloat16, (9, 0)
        )
    assert static_decode.refusal(16, {8, 64}) is not None  # head_dim below 16
