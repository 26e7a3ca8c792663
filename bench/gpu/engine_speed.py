"""The timed parts of the GPU check's engine section (`engine.py`, which runs them): decode steps
against the bandwidth floor (engine/decode_floor.py, the one floor), one prompt's prefill against
HF's forward, and the campaign workload against HF's `generate_batch`. Each part takes the model
and the section's sizes and returns rows `(check, result)`."""

from __future__ import annotations

import statistics
import time

import torch

from nudgeability.engine.decode_floor import copy_bandwidth, step_floor_s

from .engine_inputs import Row, greedy_params, make_engine, random_ids, sync


def _floor_cell(model, sizes, rows: int, graphs: bool, bandwidth: float) -> str:
    device = model.device
    per_group = min(rows, sizes["arms_per_group"])
    groups = rows // per_group
    engine = make_engine(
        model,
        max_batch_tokens=sizes["kv_floor"],
        block_size=sizes["block"],
        static_decode=graphs,
        cuda_graphs=graphs and device.type == "cuda",
    )
    try:
        return _timed_steps(engine, model, sizes, rows, groups, per_group, bandwidth)
    finally:  # a failed step must not leave the model on the engine's attention
        engine.runner.disengage()


def _timed_steps(engine, model, sizes, rows, groups, per_group, bandwidth) -> str:
    from nudgeability.engine import ForkRequest

    vocab, device = model.config.vocab_size, model.device
    refs = []
    for g in range(groups):
        suffixes = [random_ids(8, 1000 * g + a, vocab) for a in range(per_group)]
        new = sizes["steps"] + 8
        request = ForkRequest(
            random_ids(sizes["prefix"], 50 + g, vocab), suffixes, greedy_params(new)
        )
        refs += engine.submit_fork(request)
    while any(len(engine.peek(r)) < 4 for r in refs):  # prefill, first steps, capture
        engine.step()
    times = []
    for _ in range(sizes["steps"]):
        t0 = time.perf_counter()
        engine.step()
        sync(device)
        times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    generated = len(engine.peek(refs[0]))
    slots = groups * sizes["prefix"] + rows * (8 + generated)  # the prefix read once per group
    floor = step_floor_s(model, slots, rows, bandwidth)
    while engine.busy:
        engine.step()
    return f"{1000 * step:.2f} ms; floor {1000 * floor:.3f} ms; step / floor {step / floor:.1f}"


def decode_floor(model, sizes) -> list[Row]:
    """Each (rows, graphs) cell on its own: one that fails is reported and the others run."""
    bandwidth = copy_bandwidth(model.device, sizes["copy_gib"])
    rows = [
        (
            "copy bandwidth (read + write, engine/decode_floor.py)",
            f"{bandwidth / 1e12:.3f} TB/s",
        )
    ]
    for n in sizes["rows"]:
        for graphs in (True, False):
            mode = "static decode + graphs" if graphs else "eager"
            name = f"decode step, {n} rows, {mode}"
            try:
                rows.append((name, _floor_cell(model, sizes, n, graphs, bandwidth)))
            except Exception as exc:
                rows.append((name, f"failed: {type(exc).__name__}: {exc}"))
    return rows


def prefill(model, sizes) -> list[Row]:
    """One prompt's prefill (the engine, then HF's forward of the same ids), tokens/s."""
    ids = random_ids(sizes["prefill"], 77, model.config.vocab_size)
    engine = make_engine(model, max_batch_tokens=sizes["kv"], block_size=sizes["block"])
    engine.generate([ids[:64]], greedy_params(1))  # warm-up
    engine.stats = type(engine.stats)()
    t0 = time.perf_counter()
    engine.generate([ids], greedy_params(1))
    sync(model.device)
    ours = time.perf_counter() - t0
    x = torch.tensor([ids], device=model.device)
    with torch.inference_mode():
        model(input_ids=x[:, :64], logits_to_keep=1)
        sync(model.device)
        t0 = time.perf_counter()
        model(input_ids=x, logits_to_keep=1)
        sync(model.device)
    hf = time.perf_counter() - t0
    n = len(ids)
    return [
        (
            f"prefill of {n} tokens",
            f"engine {n / ours:.0f} tok/s, HF forward {n / hf:.0f} tok/s: engine / HF "
            f"{hf / ours:.2f}x",
        )
    ]


def campaign(model, sizes) -> list[Row]:
    from nudgeability.engine import ForkRequest

    try:
        from transformers import ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        import transformers

        return [
            (
                "campaign against generate_batch",
                f"skipped: transformers {transformers.__version__}: {exc}",
            )
        ]

    vocab = model.config.vocab_size
    prompts = [random_ids(sizes["prompt"], 7000 + i, vocab) for i in range(sizes["bases"])]
    engine = make_engine(
        model, max_batch_tokens=sizes["kv"], max_rows=sizes["max_rows"], block_size=sizes["block"]
    )
    t0 = time.perf_counter()
    bases = engine.generate(prompts, greedy_params(sizes["base_new"]))
    t_bases = time.perf_counter() - t0
    cut = sizes["cut"]
    arms = [random_ids(6 + a, 9000 + a, vocab) for a in range(sizes["arms"])]
    requests = [
        ForkRequest(p + b.token_ids[:cut], arms, greedy_params(sizes["arm_new"]))
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
    what = (
        f"{len(prompts)} bases of {sizes['prompt']} tokens, {sizes['base_new']} new; "
        f"{len(arms)} arms at token {cut}, {sizes['arm_new']} new; {sizes['max_rows']} rows"
    )
    return [
        (
            f"campaign bases against generate_batch ({what})",
            f"engine {n_base / t_bases:.0f} tok/s, HF {n_base / h_bases:.0f} tok/s: "
            f"{h_bases / t_bases:.2f}x",
        ),
        (
            "campaign arms against generate_batch",
            f"engine {n_arm / t_arms:.0f} tok/s, HF {n_arm / h_arms:.0f} tok/s: "
            f"{h_arms / t_arms:.2f}x",
        ),
    ]
