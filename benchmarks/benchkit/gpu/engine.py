"""The engine's section of the GPU check (`benchmarks/gpu_check.py`): issue 23 on one CUDA device.

    python benchmarks/gpu_check.py --only engine [--budget 480]

A random-init Qwen3-8B-shaped model in bf16 (36 layers, hidden 4096, 32 query / 8 KV heads of
128, vocabulary 151,936; nothing is downloaded), in five parts, each stopped at the deadline:

1. **arm ≡ solo**: 8 arms forked from a 1,024-token prefix (prefilled in two chunks), 32 new
   tokens, on `nudge run`'s engine (engine_inputs.py `make_engine`: the fixed-shape decode, its
   graphs captured at start, fused layers; the row says which decode path the arms took, "eager"
   where it fell back), against HF's own forward over each arm's full sequence (largest logit
   difference relative to the largest logit, and argmax agreement), for the bf16 model and with
   every linear but the LM head swapped for W4A16 and FP8 layers (quant.py's packing), each
   `dense` and `fused`, and for a bf16 model of the same shape whose later half of layers has a
   sliding window of 256 (its prefix chunks through flash's own window);
2. **batch invariance**: one prompt alone against the same prompt at a random position among
   2, 16 and 64 others (vLLM's needle test): bitwise-equal logits or not, and the largest gap;
   then **graph replay**: each captured decode step of a fork against the same fixed-shape
   forward called directly on the same buffers (bitwise equal or not; CUDA only);
3. **decode steps against the bandwidth floor**: the median step at 1, 12, 64 and 256 rows (groups
   of up to 16 arms on 1,024-token prefixes), with and without static decode / CUDA graphs,
   against the bytes the step reads over the measured copy bandwidth (costs/floor.py, the
   one floor); a row that fails says so and the others still run;
4. **prefill**: one prompt's prefill through the engine against HF's forward of it, tokens/s;
5. **the campaign workload against HF `generate_batch`**: bases (prompts of 1,024 random tokens,
   128 new tokens, EOS ignored), then 8 arms forked from each base's 64th token, 64 new tokens;
   the engine with static decode and CUDA graphs (`nudge run --static-decode`) and eagerly, each
   one's tokens compared with HF's;
6. **one trunk for many cuts**: forks at 8 cuts of one base's generation reading one trunk of its
   KV, against a stem per fork: the pool's peak blocks and the logits' agreement (trunk.py).

Parts 1 and 2 are here, the timed parts 3 to 5 in engine_speed.py, the inputs they share in
engine_inputs.py. `section(deadline, dry_run=False)` returns rows `(check, result)` for check.py's
table; the deadline is a `time.monotonic()` value. `dry_run` runs every part on CPU on a tiny
Qwen3 of models/testing with small sizes. `__main__` prints the rows.
"""

from __future__ import annotations

import random
import time

import torch

from nudgeability.models.testing.tiny import QUANT_PACKABLE_QWEN3

from . import quant as gpu_quant
from .engine_inputs import Row, free_memory, greedy_params, make_engine, random_ids
from .engine_speed import campaign, decode_floor, prefill
from .trunk import trunk_forks

# the shape of Qwen3-8B (quant.py holds it), with what a whole model needs besides
QWEN3_8B = dict(
    gpu_quant.QWEN3_8B,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    tie_word_embeddings=False,
)


def build_model(shape: dict, device, dtype=torch.bfloat16, seed: int = 0):
    """A random-init Qwen3 of `shape`, made directly on `device` in `dtype`."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(**shape)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def _fork_inputs(model, sizes) -> tuple[list[int], list[list[int]]]:
    """The arm checks' prefix and suffixes: random ids, the same for the same sizes."""
    vocab = model.config.vocab_size
    prefix = random_ids(sizes["prefix"], 1, vocab)
    return prefix, [random_ids(5 + 2 * i, 10 + i, vocab) for i in range(sizes["arms"])]


def _arm_check(model, sizes) -> str:
    prefix, suffixes = _fork_inputs(model, sizes)
    engine = make_engine(
        model,
        "arm ≡ solo: the prefix in two prefill chunks, the second's queries after keys they see "
        "(on CUDA one flash call whose causal diagonal sits at the bottom right)",
        prefill_tokens=sizes["prefix"] // 2,
    )
    arms = engine.fork(prefix, suffixes, greedy_params(sizes["new"]), return_logits=True)
    graphed = engine.static_dispatch.graphs is not None
    path = (
        "fixed-shape decode" + (", graphed" if graphed else "") if engine.static_decode else "eager"
    )
    steps, decoded = engine.stats.steps, engine.stats.decode_tokens
    engine.runner.disengage()
    del engine
    free_memory(model.device)  # HF's reference forwards need the memory the pool took
    worst, agree, total = 0.0, 0, 0
    floor, floor_agree = 0.0, 0
    for suffix, arm in zip(suffixes, arms):
        ids = torch.tensor([prefix + suffix + arm.token_ids[:-1]], device=model.device)
        start = len(prefix) + len(suffix) - 1
        with torch.inference_mode():
            ref = model(input_ids=ids).logits[0, start:].float()
            split = _two_calls(model, ids, len(prefix))[0, start:]
        got = arm.logits.to(ref.device)
        scale = ref.abs().amax(dim=-1, keepdim=True)
        worst = max(worst, ((got - ref).abs() / scale).max().item())
        agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
        floor = max(floor, ((split - ref).abs() / scale).max().item())
        floor_agree += (split.argmax(-1) == ref.argmax(-1)).sum().item()
        total += len(arm.token_ids)
    return (
        f"largest logit difference {worst:.2e} of the largest logit; argmax agrees at "
        f"{agree}/{total}; decode path {path}; {steps} steps, {decoded} decode tokens; "
        f"HF against itself in two calls (the rounding floor): {floor:.2e}, {floor_agree}/{total}"
    )


def _two_calls(model, ids, cut: int) -> torch.Tensor:
    """HF's logits for `ids` computed as two forwards, the first `cut` tokens then the rest on
    their cache: the same arithmetic in other GEMM shapes, so its distance from the one-call
    forward is what rounding alone moves the logits (a deep random-init model amplifies it, W8A8
    layers more: a one-ulp change in an activation can move its e4m3 code a whole step)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    first = model(input_ids=ids[:, :cut], past_key_values=cache, use_cache=True).logits
    rest = model(input_ids=ids[:, cut:], past_key_values=cache, use_cache=True).logits
    return torch.cat([first, rest], dim=1).float()


def arm_equals_solo(model, sizes) -> list[Row]:
    """bf16, then W4A16 and FP8 swapped in (dense, fused): the engine's arms against HF's forward
    (reference: HF's forward over each arm's whole sequence, teacher-forced on its tokens)."""
    where = f"{sizes['arms']} arms, prefix {sizes['prefix']}, {sizes['new']} new tokens"
    rows = [(f"arm ≡ solo, bf16 ({where})", _arm_check(model, sizes))]
    for fmt in ("w4a16", "fp8"):
        for compute in ("dense", "fused"):
            name = f"arm ≡ solo, {fmt} {compute}"
            try:
                originals = gpu_quant.swap(model, fmt, compute)
            except Exception as exc:
                rows.append((name, f"failed to build: {type(exc).__name__}: {exc}"))
                continue
            try:
                from nudgeability.models.quant import compute_paths

                paths = compute_paths(model).get(gpu_quant.FORMAT_NAMES[fmt], {})
                rows.append((name, f"{_arm_check(model, sizes)}; paths {paths}"))
            except Exception as exc:
                rows.append((name, f"failed: {type(exc).__name__}: {exc}"))
            finally:
                gpu_quant.restore(model, originals)
    return rows


def sliding_window(model, sizes) -> list[Row]:
    """arm ≡ solo (bf16) on the same shape with a sliding window on its later half of layers (as
    Qwen3's and Gemma's configs allow), a model of its own: on CUDA the prefix's chunks on those
    layers are flash calls with flash's own window (`lse_kernels.causal_cuda`)."""
    from nudgeability.engine.attention.lse_kernels import flash_takes_window

    window = sizes["window"]
    layers = model.config.num_hidden_layers
    kinds = ["full_attention"] * (layers // 2) + ["sliding_attention"] * (layers - layers // 2)
    slide = dict(use_sliding_window=True, sliding_window=window, layer_types=kinds)
    if model.device.type == "cuda":
        windowed = build_model(dict(QWEN3_8B, **slide), model.device)
    else:
        windowed = _dry_model(**slide)
    try:
        result = _arm_check(windowed, sizes)
    finally:
        _disengage(windowed)
        del windowed
        if model.device.type == "cuda":
            torch.cuda.empty_cache()
    how = (
        "flash with its window" if flash_takes_window() else "64-query blocks (no window in flash)"
    )
    return [
        (
            f"arm ≡ solo, bf16, sliding window {window} on layers {layers // 2}-{layers - 1} "
            f"(prefix chunks: {how})",
            result,
        )
    ]


def needle(model, sizes) -> list[Row]:
    vocab = model.config.vocab_size
    rng = random.Random(0)
    engine = make_engine(model)
    prompt = random_ids(sizes["needle"], 5, vocab)
    params = greedy_params(sizes["needle_new"])
    alone = engine.generate([prompt], params, return_logits=True)[0]
    rows = []
    for n in sizes["batches"]:
        others = [
            random_ids(rng.randint(20, sizes["needle"]), 100 + n * 7 + i, vocab)
            for i in range(n - 1)
        ]
        at = rng.randrange(n)
        out = engine.generate(others[:at] + [prompt] + others[at:], params, return_logits=True)[at]
        gap = (out.logits - alone.logits).abs().max().item()
        rows.append(
            (
                f"needle ({len(prompt)} tokens, {sizes['needle_new']} new) in a batch of {n} at {at}",
                f"logits bitwise equal: {torch.equal(out.logits, alone.logits)}; largest gap "
                f"{gap:.3e}; same tokens: {out.token_ids == alone.token_ids}",
            )
        )
    return rows


def graph_replay(model, sizes) -> list[Row]:
    """Every captured decode step of a fork (static decode + CUDA graphs) against the same
    fixed-shape forward called directly on the same buffers right after the replay: a graph
    replays the kernels its capture recorded, so the hidden states must be bitwise equal (the
    direct call rewrites the step's K/V slots with what the replay wrote, if they agree)."""
    name = "CUDA graph replay against the uncaptured forward"
    if model.device.type != "cuda":
        return [(name, "skipped: CUDA graphs need a CUDA device")]
    from nudgeability.engine.attention import graphed_decode

    steps: list[tuple[int, bool, float]] = []
    original = graphed_decode.GraphedDecode.run

    def replay_then_direct(self, cache, static):
        hidden, logits, ids = original(self, cache, static)
        replayed = hidden.clone()
        direct = self.step(cache, static.input_ids, static.positions)[0]
        gap = (replayed.float() - direct.float()).abs().max().item()
        steps.append((static.rows, torch.equal(replayed, direct), gap))
        return hidden, logits, ids

    prefix, suffixes = _fork_inputs(model, sizes)
    engine = make_engine(model)  # the run's: static decode, graphs on CUDA
    graphed_decode.GraphedDecode.run = replay_then_direct
    try:
        engine.fork(prefix, suffixes, greedy_params(sizes["new"]))
    finally:
        graphed_decode.GraphedDecode.run = original
        engine.runner.disengage()
    equal = sum(same for _, same, _ in steps)
    buckets = sorted({rows for rows, _, _ in steps})
    worst = max((gap for _, _, gap in steps), default=float("nan"))
    return [
        (
            f"{name} ({sizes['arms']} arms, prefix {sizes['prefix']}, {sizes['new']} new tokens)",
            f"bitwise equal at {equal}/{len(steps)} graphed steps (buckets {buckets}); "
            f"largest gap {worst:.3e}",
        )
    ]


GPU_SIZES = dict(
    prefix=1024,
    arms=8,
    new=32,
    window=256,
    kv=200_000,
    needle=200,
    needle_new=16,
    batches=(2, 16, 64),
    rows=(1, 12, 64, 256),
    arms_per_group=16,
    steps=10,
    copy_gib=2.0,
    prefill=4096,
    prompt=1024,
    bases=64,
    base_new=128,
    cut=64,
    arm_new=64,
    max_rows=128,
    hf_page=256,
    trunk_new=256,
)
# the same parts on CPU, small enough for the suite (tests/benchmarks/test_gpu_check_dry_run.py)
DRY_SIZES = dict(
    GPU_SIZES,
    prefix=40,
    arms=3,
    new=4,
    window=8,
    kv=8_192,
    needle=24,
    needle_new=3,
    batches=(2, 5),
    arms_per_group=16,
    steps=2,
    copy_gib=1 / 64,
    prefill=96,
    prompt=24,
    bases=3,
    base_new=4,
    cut=2,
    arm_new=3,
    max_rows=16,
    hf_page=16,
    trunk_new=16,
    # a 256-row step on FlexAttention's CPU reference scores every tile slot against the whole
    # pool (seconds a step): the dry run checks the part runs, 64 rows show it
    rows=(1, 12, 64),
)
DRY_SHAPE = QUANT_PACKABLE_QWEN3
PARTS = (
    ("arm ≡ solo", arm_equals_solo),
    ("arm ≡ solo, sliding window", sliding_window),
    ("batch invariance", needle),
    ("CUDA graph replay", graph_replay),
    ("decode steps against the bandwidth floor", decode_floor),
    ("prefill", prefill),
    ("the campaign workload against HF generate_batch", campaign),
    ("one trunk for many cuts", trunk_forks),
)


def _dry_model(**config):
    from nudgeability.models.testing.tiny import tiny_model

    return tiny_model("qwen3", dtype=torch.bfloat16, **DRY_SHAPE, **config)


def section(
    deadline: float, *, dry_run: bool = False, sizes: dict | None = None, progress=None
) -> list[Row]:
    """The section's rows; parts that would start after `deadline` (time.monotonic()) say they
    were skipped. `progress(rows)`, if given, gets the rows so far after each part, so that a run
    cut short inside a part still returns the parts before it."""
    if not dry_run and not torch.cuda.is_available():
        return [("engine on CUDA", "skipped: no CUDA device (use --dry-run on CPU)")]
    sizes = sizes or (DRY_SIZES if dry_run else GPU_SIZES)
    t0 = time.monotonic()
    try:
        model = _dry_model() if dry_run else build_model(QWEN3_8B, torch.device("cuda"))
    except Exception as exc:  # a section reports, it never takes the whole check down
        return [("model", f"failed: {type(exc).__name__}: {exc}")]
    config = model.config
    rows = [
        (
            "model",
            f"random-init Qwen3, {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
            f"bf16 on {model.device}, built in {time.monotonic() - t0:.0f} s",
        )
    ]
    parts = [(name, lambda part=part: part(model, sizes)) for name, part in PARTS]
    return run_parts(rows, parts, deadline, progress, model)


def run_parts(rows: list[Row], parts, deadline: float, progress, model) -> list[Row]:
    """`rows` and each part's rows after them (`parts`: (name, a call returning rows)), a part
    that would start after `deadline` (time.monotonic()) skipped, one that fails reported;
    `progress(rows)`, if given, after each part."""
    for name, part in parts:
        if time.monotonic() > deadline:
            rows.append((name, "skipped: the section's time ran out"))
            continue
        try:
            rows += part()
        except Exception as exc:
            rows.append((name, f"failed: {type(exc).__name__}: {exc}"))
            _disengage(model)
        if progress is not None:
            progress(rows)
    return rows


def _disengage(model) -> None:
    """Give the model HF's SDPA back if a failed part left it on the engine's attention."""
    from nudgeability.engine.attention import shared_prefix_attention

    if model.config._attn_implementation == shared_prefix_attention.NAME:
        model.set_attn_implementation("sdpa")
