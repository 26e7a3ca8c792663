"""The timed parts of the GPU check's engine section (`engine.py`, which runs them): decode steps
against the bandwidth floor (costs/floor.py, the one floor), one prompt's prefill against
HF's forward, and the campaign workload against HF's `generate_batch`. Each part takes the model
and the section's sizes and returns rows `(check, result)`."""

from __future__ import annotations

import statistics
import time

import torch

from nudgeability.costs.floor import copy_bandwidth, step_floor_s

from .engine_inputs import Row, free_memory, greedy_params, make_engine, random_ids, sync


def _floor_cell(model, sizes, rows: int, graphs: bool, bandwidth: float) -> str:
    per_group = min(rows, sizes["arms_per_group"])
    groups = rows // per_group
    derived = dict(max_rows=rows)
    why = "decode floor: every timed row decodes in each step"
    if not graphs:
        derived["static_decode"] = False
        why += "; the eager twin of the run's graphed decode"
    engine = make_engine(model, why, **derived)
    try:
        return _timed_steps(engine, model, sizes, rows, groups, per_group, bandwidth)
    finally:  # a failed step must not leave the model on the engine's attention
        engine.runner.disengage()


def _timed_steps(engine, model, sizes, rows, groups, per_group, bandwidth) -> str:
    from nudgeability.engine import ForkRequest

    vocab, device = model.config.vocab_size, model.device
    refs = []
    # The groups' prefills take several steps (a step prefills at most `prefill_tokens`, less the
    # rows already decoding in it), during which the first groups decode: every row must still be
    # running when the timed steps end, so each generates enough tokens to outlast both.
    per_step = max(1, engine.prefill_tokens - rows)
    prefill_steps = -(-groups * (sizes["prefix"] + 8 * per_group) // per_step)
    new = sizes["steps"] + 2 * prefill_steps + 8
    for g in range(groups):
        suffixes = [random_ids(8, 1000 * g + a, vocab) for a in range(per_group)]
        request = ForkRequest(
            random_ids(sizes["prefix"], 50 + g, vocab), suffixes, greedy_params(new)
        )
        refs += engine.submit_fork(request)
    while any(len(engine.peek(r)) < 4 for r in refs):  # prefill, first steps, capture
        engine.step()
    oldest = max(len(engine.peek(r)) for r in refs)
    if oldest + sizes["steps"] >= new:
        raise RuntimeError(f"rows would finish during the timed steps ({oldest} of {new} made)")
    times = []
    for _ in range(sizes["steps"]):
        t0 = time.perf_counter()
        engine.step()
        sync(device)
        times.append(time.perf_counter() - t0)
    made = sum(len(engine.peek(r)) for r in refs) - rows * (sizes["steps"] // 2)  # mid-timing
    step = statistics.median(times)
    slots = groups * sizes["prefix"] + rows * 8 + made  # the prefix read once per group
    floor = step_floor_s(model, slots, rows, bandwidth)
    while engine.busy:
        engine.step()
    return f"{1000 * step:.2f} ms; floor {1000 * floor:.3f} ms; step / floor {step / floor:.1f}"


def decode_floor(model, sizes) -> list[Row]:
    """Each (rows, graphs) cell on its own: one that fails is reported and the others run."""
    bandwidth = copy_bandwidth(model.device, sizes["copy_gib"])
    rows = [
        (
            "copy bandwidth (read + write, costs/floor.py)",
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
    """One prompt's prefill, the engine's and HF's forward of the same ids, each timed on its first
    call at that length and again warm (tokens/s): a first call can pay for plans and workspaces
    made per shape (cuDNN's attention built one per key length: 7.5 s, first H200 run)."""
    ids = random_ids(sizes["prefill"], 77, model.config.vocab_size)
    engine = make_engine(model)
    engine.generate([ids[:64]], greedy_params(1))  # the engine's own start-up, at another length

    def ours() -> float:
        t0 = time.perf_counter()
        engine.generate([ids], greedy_params(1))
        sync(model.device)
        return time.perf_counter() - t0

    x = torch.tensor([ids], device=model.device)

    def hf() -> float:
        with torch.inference_mode():
            t0 = time.perf_counter()
            model(input_ids=x, logits_to_keep=1)
            sync(model.device)
        return time.perf_counter() - t0

    with torch.inference_mode():
        model(input_ids=x[:, :64], logits_to_keep=1)
        sync(model.device)
    first = (ours(), hf())
    warm = (min(ours(), ours()), min(hf(), hf()))
    n = len(ids)
    return [
        (
            f"prefill of {n} tokens, {when}",
            f"engine {n / e:.0f} tok/s, HF forward {n / h:.0f} tok/s: engine / HF {h / e:.2f}x",
        )
        for when, (e, h) in (("first call at that length", first), ("warm", warm))
    ]


def hf_batching_options(config_class, **wanted) -> dict:
    """`wanted` as `config_class`'s constructor names them: transformers before 5.25 called the
    page size `block_size` (5.25 takes both); an option the class does not know is an error."""
    import inspect

    known = inspect.signature(config_class.__init__).parameters
    if "page_size" in wanted and "page_size" not in known:
        wanted["block_size"] = wanted.pop("page_size")
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        raise TypeError(f"{config_class.__name__} takes none of {unknown}")
    return wanted


def hf_complete(outputs: dict, requests: int, new: int) -> None:
    """Raise unless HF's `generate_batch` returned every request with `new` tokens and no error:
    a failed request costs no time, so a timing that counted one would flatter HF."""
    bad = [
        o.request_id
        for o in outputs.values()
        if getattr(o, "error", None) or len(o.generated_tokens) != new
    ]
    if len(outputs) != requests or bad:
        raise RuntimeError(
            f"HF generate_batch returned {len(outputs)} of {requests} requests, "
            f"{len(bad)} failed or short (e.g. {bad[:3]})"
        )


def _engine_campaign(model, sizes, prompts, arms, **options):
    """The engine's bases, then its arms forked from each base's `cut`-th token: (seconds for the
    bases, seconds for the arms, the bases' tokens, the arms' tokens in request order)."""
    from nudgeability.engine import ForkRequest

    why = "campaign: the row cap HF generate_batch is given"
    if options:
        why += "; the eager twin of the run's graphed decode"
    engine = make_engine(model, why, max_rows=sizes["max_rows"], **options)
    try:
        t0 = time.perf_counter()
        bases = engine.generate(prompts, greedy_params(sizes["base_new"]))
        sync(model.device)
        t_bases = time.perf_counter() - t0
        cut = sizes["cut"]
        requests = [
            ForkRequest(p + b.token_ids[:cut], arms, greedy_params(sizes["arm_new"]))
            for p, b in zip(prompts, bases)
        ]
        t0 = time.perf_counter()
        done = engine.fork_many(requests)
        sync(model.device)
        t_arms = time.perf_counter() - t0
    finally:
        engine.runner.disengage()
    arm_tokens = [c.token_ids for group in done for c in group]
    return t_bases, t_arms, [b.token_ids for b in bases], arm_tokens


def _hf_generate_batch(model, sizes, inputs: list[list[int]], new: int):
    """HF's `generate_batch` over `inputs`, greedy, EOS ignored: (seconds, tokens per input)."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    config = GenerationConfig(
        max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    cb = ContinuousBatchingConfig(
        **hf_batching_options(
            ContinuousBatchingConfig,
            page_size=sizes["hf_page"],
            num_blocks=-(-sizes["kv"] // sizes["hf_page"]) + 1,
            max_requests_per_batch=sizes["max_rows"],
            allow_block_sharing=True,
        )
    )
    t = time.perf_counter()
    # no_grad, not inference_mode: transformers 5.17's generation thread updates its static
    # tensors in place outside inference mode and fails every request (first H200 run)
    with torch.no_grad():
        outputs = model.generate_batch(
            inputs, generation_config=config, continuous_batching_config=cb, progress_bar=False
        )
    sync(model.device)
    elapsed = time.perf_counter() - t
    hf_complete(outputs, len(inputs), new)
    # generate_batch returns its outputs in the order of `inputs` (it reorders them by request id)
    return elapsed, [list(o.generated_tokens) for o in outputs.values()]


def hf_margins(model, inputs, ours, theirs) -> list[float | None]:
    """For each row, None where the engine's tokens (`ours`) are HF's (`theirs`), else HF's own
    margin where they part (nudgeability.models.testing.reference `parting`): at the first step that
    differs, HF's logits after the input and the tokens both made (THE reference, `hf_greedy`),
    its top-1 against the engine's token, relative to the largest |logit|."""
    from nudgeability.models.testing.reference import hf_greedy, parting

    margins = []
    for ids, a, b in zip(inputs, ours, theirs):
        step = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if step is None:
            margins.append(None if a == b else float("inf"))  # other lengths: not a tie
            continue
        logits = hf_greedy(model, ids + b[:step], 1).logits  # [1, vocab]: that step's
        parted = parting([int(logits[0].argmax())], [a[step]], logits)
        margins.append(0.0 if parted is None else parted[1])  # None: HF's own top-1 is ours
    return margins


def _same(ours, theirs, margins, rtol: float) -> str:
    """How many rows' tokens are identical or part only at HF's own near-tie (`near_tie` of
    `margins`, hf_margins), and the tokens that agree position by position."""
    from nudgeability.models.testing.reference import near_tie

    tied = [m for m in margins if m is not None and near_tie(m, rtol)]
    rows = sum(m is None for m in margins) + len(tied)
    agree = sum(x == y for a, b in zip(ours, theirs) for x, y in zip(a, b))
    total = sum(len(a) for a in ours)
    ties = f"{len(tied)} such, largest {max(tied):.1e}" if tied else "none such"
    return (
        f"{rows}/{len(ours)} rows identical or parting at HF's own near-tie "
        f"(margin ≤ {2 * rtol:.1e}: {ties}), {agree}/{total} tokens"
    )


def campaign(model, sizes) -> list[Row]:
    """The campaign workload, timed for the engine (with static decode and CUDA graphs on CUDA,
    as `nudge run --static-decode`, and eagerly) and for HF's `generate_batch` (its first call
    on the model, so its time includes whatever it sets up per model). Each engine's tokens are
    compared with HF's: a row may part from HF's only where HF's own margin between its top-1
    and the engine's token is a tie at the dtype's logit tolerance (nudgeability.models.testing.reference
    `near_tie`: kernels that reduce in another order, on a deep or tiny random model, can tip such
    a tie either way); the row counts the others, a figure here, a failure in the dry-run test."""
    try:
        from transformers import ContinuousBatchingConfig  # noqa: F401
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
    arms = [random_ids(6 + a, 9000 + a, vocab) for a in range(sizes["arms"])]
    # the run's engine (static decode, graphs on CUDA), then its eager twin
    modes = [("static decode + graphs", {}), ("eager", dict(static_decode=False))]
    ours = {name: _engine_campaign(model, sizes, prompts, arms, **o) for name, o in modes}
    first = ours[modes[0][0]]
    free_memory(model.device)  # HF's own KV pages need the memory the engines' pools took
    h_bases, hf_base_tokens = _hf_generate_batch(model, sizes, prompts, sizes["base_new"])
    cut = sizes["cut"]
    arm_inputs = [p + b[:cut] + s for p, b in zip(prompts, first[2]) for s in arms]
    h_arms, hf_arm_tokens = _hf_generate_batch(model, sizes, arm_inputs, sizes["arm_new"])
    n_base = len(prompts) * sizes["base_new"]
    n_arm = len(prompts) * len(arms) * sizes["arm_new"]
    what = (
        f"{len(prompts)} bases of {sizes['prompt']} tokens, {sizes['base_new']} new; "
        f"{len(arms)} arms at token {cut}, {sizes['arm_new']} new; {sizes['max_rows']} rows"
    )
    rows = [
        (
            f"campaign, HF generate_batch ({what})",
            f"bases {n_base / h_bases:.0f} tok/s ({h_bases:.1f} s), "
            f"arms {n_arm / h_arms:.0f} tok/s ({h_arms:.1f} s)",
        )
    ]
    from nudgeability.models.testing.reference import RTOL

    rtol = RTOL[model.dtype]
    for name, (t_bases, t_arms, base_tokens, arm_tokens) in ours.items():
        base_same = _same(
            base_tokens,
            hf_base_tokens,
            hf_margins(model, prompts, base_tokens, hf_base_tokens),
            rtol,
        )
        arm_same = ""
        if base_tokens == first[2]:
            margins = hf_margins(model, arm_inputs, arm_tokens, hf_arm_tokens)
            arm_same = _same(arm_tokens, hf_arm_tokens, margins, rtol)
        # arms are compared where the engine forked from the same base tokens as HF was given
        rows.append(
            (
                f"campaign, engine {name}",
                f"bases {n_base / t_bases:.0f} tok/s ({t_bases:.1f} s, {h_bases / t_bases:.2f}x HF; "
                f"tokens against HF: {base_same}); "
                f"arms {n_arm / t_arms:.0f} tok/s ({t_arms:.1f} s, {h_arms / t_arms:.2f}x HF"
                + (
                    f"; tokens against HF: {arm_same})"
                    if base_tokens == first[2]
                    else "; forked from other base tokens than HF's arms)"
                ),
            )
        )
    return rows
