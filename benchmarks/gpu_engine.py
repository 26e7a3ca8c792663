"""The engine's section of the GPU check (`benchmarks/gpu_check.py`): issue 23 on one CUDA device.

    python benchmarks/gpu_engine.py [--minutes 8]

A random-init Qwen3-8B-shaped model in bf16 (36 layers, hidden 4096, 32 query / 8 KV heads of
128, vocabulary 151,936; nothing is downloaded), in four parts, each stopped at the deadline:

1. **arm ≡ solo**: 8 arms forked from a 1,024-token prefix, 32 new tokens, with the engine's CUDA
   path (eager mixed steps: flash / memory-efficient SDPA with log-sum-exp; decode steps: fixed
   shapes, FlexAttention, CUDA graphs), against HF's own forward (SDPA) over each arm's full
   sequence: largest logit difference relative to the largest logit, and argmax agreement;
2. **batch invariance**: one prompt alone against the same prompt at a random position among
   2, 16 and 64 others (vLLM's needle test): bitwise-equal logits or not, and the largest gap;
3. **decode steps against the bandwidth floor**: the median step of 16-arm groups on a 1,024-token
   prefix at 16, 64 and 128 rows, with and without CUDA graphs, against (weights + the KV the step
   reads) / the device's measured copy bandwidth;
4. **the campaign workload against HF `generate_batch`**: bases (prompts of 1,024 random tokens,
   128 new tokens, EOS ignored), then 8 arms forked from each base's 64th token, 64 new tokens.

`section(deadline)` returns the Markdown (what was skipped, and why, included); `__main__` prints it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_quant  # noqa: E402  (benchmarks/ is put on the path above)

# the shape of Qwen3-8B (gpu_quant.py holds it), with what a whole model needs besides
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


def _ids(n: int, seed: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab - 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _params(n: int):
    from nudgeability.engine import SamplingParams

    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def _engine(model, **kwargs):
    from nudgeability.engine import Engine

    return Engine(model, **kwargs)


def arm_equals_solo(model, sizes) -> list[str]:
    vocab = model.config.vocab_size
    prefix = _ids(sizes["prefix"], 1, vocab)
    suffixes = [_ids(5 + 2 * i, 10 + i, vocab) for i in range(sizes["arms"])]
    engine = _engine(model, max_batch_tokens=sizes["kv"], block_size=sizes["block"])
    arms = engine.fork(prefix, suffixes, _params(sizes["new"]), return_logits=True)
    worst, agree, total = 0.0, 0, 0
    for suffix, arm in zip(suffixes, arms):
        ids = torch.tensor([prefix + suffix + arm.token_ids[:-1]], device=model.device)
        with torch.inference_mode():
            ref = model(input_ids=ids).logits[0, len(prefix) + len(suffix) - 1 :].float()
        got = arm.logits.to(ref.device)
        scale = ref.abs().amax(dim=-1, keepdim=True)
        worst = max(worst, ((got - ref).abs() / scale).max().item())
        agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
        total += len(arm.token_ids)
    return [
        f"- arm ≡ solo ({len(arms)} arms, prefix {len(prefix)}, {sizes['new']} new tokens each; "
        f"reference: HF's forward over each arm's whole sequence, teacher-forced on the engine's "
        f"tokens): largest logit difference {worst:.2e} of the largest logit; argmax agrees at "
        f"{agree}/{total} positions; {engine.stats.steps} engine steps, "
        f"{engine.stats.decode_tokens} decode tokens."
    ]


def needle(model, sizes) -> list[str]:
    vocab = model.config.vocab_size
    rng = random.Random(0)
    engine = _engine(model, max_batch_tokens=sizes["kv"], block_size=sizes["block"])
    prompt = _ids(sizes["needle"], 5, vocab)
    params = _params(sizes["needle_new"])
    alone = engine.generate([prompt], params, return_logits=True)[0]
    lines = []
    for n in sizes["batches"]:
        others = [
            _ids(rng.randint(20, sizes["needle"]), 100 + n * 7 + i, vocab) for i in range(n - 1)
        ]
        at = rng.randrange(n)
        out = engine.generate(others[:at] + [prompt] + others[at:], params, return_logits=True)[at]
        gap = (out.logits - alone.logits).abs().max().item()
        lines.append(
            f"  - batch of {n} (needle at {at}): logits bitwise equal: "
            f"{torch.equal(out.logits, alone.logits)}; largest gap {gap:.3e}; same tokens: "
            f"{out.token_ids == alone.token_ids}"
        )
    return [
        f"- batch invariance (bf16, needle of {len(prompt)} tokens, {sizes['needle_new']} new "
        "tokens; measured here, not a guarantee of the kernels):",
        *lines,
    ]


def copy_bandwidth(device, gib: float = 2.0) -> float:
    """Bytes per second of a device-to-device copy (read + write counted), best of 5."""
    n = int(gib * 2**30) // 4
    src = torch.empty(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize() if device.type == "cuda" else None
        t0 = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize() if device.type == "cuda" else None
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best


def decode_floor(model, sizes) -> list[str]:
    from nudgeability.engine import ForkRequest

    vocab, device = model.config.vocab_size, model.device
    config = model.config
    slot_bytes = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 2
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = copy_bandwidth(device, sizes["copy_gib"])
    lines = [
        f"- decode step against the floor (weights {weights / 2**30:.1f} GiB; measured copy "
        f"bandwidth {bandwidth / 1e12:.2f} TB/s; groups of {sizes['arms_per_group']} arms on "
        f"{sizes['prefix']}-token prefixes):",
        "",
        "  | rows | graphs | step ms | floor ms | step / floor |",
        "  |---|---|---|---|---|",
    ]
    for rows in sizes["rows"]:
        groups = max(1, rows // sizes["arms_per_group"])
        for graphs in (True, False):
            engine = _engine(
                model,
                max_batch_tokens=sizes["kv_floor"],
                block_size=sizes["block"],
                static_decode=graphs,
                cuda_graphs=graphs and device.type == "cuda",
            )
            refs = []
            for g in range(groups):
                suffixes = [_ids(8, 1000 * g + a, vocab) for a in range(sizes["arms_per_group"])]
                request = ForkRequest(_ids(sizes["prefix"], 50 + g, vocab), suffixes, _params(64))
                refs += engine.submit_fork(request)
            while any(len(engine.peek(r)) < 4 for r in refs):  # prefill, first steps, capture
                engine.step()
            times = []
            for _ in range(sizes["steps"]):
                t0 = time.perf_counter()
                engine.step()
                times.append(time.perf_counter() - t0)
            step = statistics.median(times)
            generated = len(engine.peek(refs[0]))
            kv = groups * sizes["prefix"] + rows * (8 + generated)
            floor = (weights + kv * slot_bytes) / (bandwidth / 2)  # reads only: half the copy
            lines.append(
                f"  | {rows} | {'yes' if graphs else 'no'} | {1000 * step:.2f} | "
                f"{1000 * floor:.2f} | {step / floor:.2f} |"
            )
            while engine.busy:
                engine.step()
    return lines


def campaign(model, sizes) -> list[str]:
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from nudgeability.engine import ForkRequest

    vocab = model.config.vocab_size
    prompts = [_ids(sizes["prompt"], 7000 + i, vocab) for i in range(sizes["bases"])]
    engine = _engine(
        model, max_batch_tokens=sizes["kv"], max_rows=sizes["max_rows"], block_size=sizes["block"]
    )
    t0 = time.perf_counter()
    bases = engine.generate(prompts, _params(sizes["base_new"]))
    t_bases = time.perf_counter() - t0
    cut = sizes["cut"]
    arms = [_ids(6 + a, 9000 + a, vocab) for a in range(sizes["arms"])]
    requests = [
        ForkRequest(p + b.token_ids[:cut], arms, _params(sizes["arm_new"]))
        for p, b in zip(prompts, bases)
    ]
    t0 = time.perf_counter()
    engine.fork_many(requests)
    t_arms = time.perf_counter() - t0

    def hf(inputs, new):
        config = GenerationConfig(
            max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        cb = ContinuousBatchingConfig(
            page_size=sizes["hf_page"],
            num_blocks=-(-sizes["kv"] // sizes["hf_page"]) + 1,
            max_requests_per_batch=sizes["max_rows"],
            allow_block_sharing=True,
        )
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate_batch(
                inputs, generation_config=config, continuous_batching_config=cb, progress_bar=False
            )
        return time.perf_counter() - t

    h_bases = hf(prompts, sizes["base_new"])
    h_arms = hf([r.prefix_ids + s for r in requests for s in r.suffixes], sizes["arm_new"])
    n_base, n_arm = len(prompts) * sizes["base_new"], len(requests) * len(arms) * sizes["arm_new"]
    return [
        f"- campaign workload ({len(prompts)} bases of {sizes['prompt']} tokens, "
        f"{sizes['base_new']} new tokens, EOS ignored; then {len(arms)} arms forked at each "
        f"base's {cut}th token, {sizes['arm_new']} new tokens; KV {sizes['kv']} slots, "
        f"{sizes['max_rows']} rows for both):",
        f"  - bases: engine {t_bases:.1f} s ({n_base / t_bases:.0f} tok/s), HF generate_batch "
        f"{h_bases:.1f} s ({n_base / h_bases:.0f} tok/s): **{h_bases / t_bases:.2f}×**",
        f"  - arms: engine {t_arms:.1f} s ({n_arm / t_arms:.0f} tok/s), HF generate_batch "
        f"{h_arms:.1f} s ({n_arm / h_arms:.0f} tok/s): **{h_arms / t_arms:.2f}×**",
    ]


GPU_SIZES = dict(
    prefix=1024,
    arms=8,
    new=32,
    kv=200_000,
    block=64,
    needle=200,
    needle_new=16,
    batches=(2, 16, 64),
    rows=(16, 64, 128),
    arms_per_group=16,
    kv_floor=200_000,
    steps=10,
    copy_gib=2.0,
    prompt=1024,
    bases=64,
    base_new=128,
    cut=64,
    arm_new=64,
    max_rows=128,
    hf_page=256,
)
PARTS = (
    ("arm ≡ solo", arm_equals_solo),
    ("batch invariance", needle),
    ("decode steps against the bandwidth floor", decode_floor),
    ("the campaign workload against HF generate_batch", campaign),
)


def section(
    deadline: float, *, shape: dict | None = None, device=None, sizes: dict | None = None
) -> str:
    """The section's Markdown; parts that would start after `deadline` (time.time()) are skipped."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape, sizes = shape or QWEN3_8B, sizes or GPU_SIZES
    lines = ["### Engine on CUDA (benchmarks/gpu_engine.py, issue 23)", ""]
    if device.type == "cuda":
        lines.append(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}.")
    else:
        lines.append(f"No CUDA device: the section ran on {device} (a check of its logic).")
    t0 = time.time()
    try:
        model = build_model(shape, device)
    except Exception as exc:  # a section reports, it never takes the whole check down
        return "\n".join(lines + [f"- model: failed: {type(exc).__name__}: {exc}"])
    lines.append(
        f"Random-init Qwen3 ({shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}) "
        f"in bf16, built in {time.time() - t0:.0f} s."
    )
    lines.append("")
    for name, part in PARTS:
        if time.time() > deadline:
            lines.append(f"- {name}: skipped (the section's time ran out)")
            continue
        try:
            started = time.time()
            lines += part(model, sizes)
            lines.append(f"  ({name}: {time.time() - started:.0f} s)")
        except Exception as exc:
            lines.append(f"- {name}: failed: {type(exc).__name__}: {exc}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=8.0)
    args = ap.parse_args()
    print(section(time.time() + 60 * args.minutes))


if __name__ == "__main__":
    main()
