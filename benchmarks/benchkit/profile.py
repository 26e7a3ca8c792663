"""Count what one decode step issues: aten operations and host syncs, beside HF's own step.

Counts are deterministic (the same model, batch and step give the same operations), so the tests
can assert on them and the benchmarks report them. An operation counts once, at the top level:
an aten op that another aten op called (e.g. the `mm` inside a `linear`) is part of its caller.
"Views" (view, transpose, slice, ...) only relabel memory; on a GPU they launch no kernel, so they
are counted apart from the operations that do work.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

VIEW_OPS = frozenset(
    "aten::" + name
    for name in (
        "view",
        "_unsafe_view",
        "reshape",
        "transpose",
        "permute",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "as_strided",
        "alias",
        "detach",
        "detach_",
        "t",
        "lift_fresh",
        "resolve_conj",
        "resolve_neg",
        "view_as",
    )
)
# reading a device value on the host (`.item()`, `bool(t)`): a device-to-host sync on a GPU.
# `.tolist()` is not an aten op; the tests count it by patching it.
HOST_READS = frozenset(("aten::_local_scalar_dense", "aten::item", "aten::is_nonzero"))
COPIES = frozenset(("aten::copy_", "aten::clone", "aten::_to_copy"))


@dataclass(frozen=True)
class OpCount:
    """Top-level aten operations of one profiled call, by name; `copying_views` counts the view
    ops (a `reshape` of a non-contiguous tensor) that had to copy."""

    ops: dict[str, int]
    copying_views: int = 0

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def work(self) -> int:
        """Operations that do work (not views): kernel launches on a GPU, copies included."""
        return sum(n for name, n in self.ops.items() if name not in VIEW_OPS) + self.copying_views

    @property
    def host_reads(self) -> int:
        return sum(self.ops.get(name, 0) for name in HOST_READS)


def count_ops(fn, *args, **kwargs) -> tuple[OpCount, object]:
    """Run `fn(*args, **kwargs)` under the profiler; its top-level aten ops and its result."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn(*args, **kwargs)
    counts, copying = collections.Counter(), 0
    for event in prof.events():
        if not event.name.startswith("aten::") or _aten_parent(event) is not None:
            continue
        counts[event.name] += 1
        if event.name in VIEW_OPS and _copies(event):
            copying += 1
    return OpCount(dict(counts), copying), result


def _aten_parent(event):
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith("aten::"):
        parent = parent.cpu_parent
    return parent


def _copies(event) -> bool:
    return any(child.name in COPIES or _copies(child) for child in event.cpu_children)


def engine_step_ops(engine, prefix, suffixes, params, at_step: int = 3) -> OpCount:
    """The ops of the decode step that feeds each arm's `at_step`-th token, in a fork of
    `suffixes` from `prefix` (every arm must still run then: give `max_new_tokens` > `at_step`)."""
    from nudgeability.engine.sequence import ForkRequest

    refs = engine.submit_fork(ForkRequest(prefix, suffixes, params))
    while engine.busy and len(engine.peek(refs[0])) < at_step:
        engine.step()
    if not engine.busy:
        raise ValueError(f"the fork ended before decode step {at_step}; raise max_new_tokens")
    counted, _ = count_ops(engine.step)
    while engine.busy:
        engine.step()
    return counted


def hf_expanded_decode(model, prefix: list[int], suffixes: list[list[int]]):
    """HF's own greedy decode for the same arms, prefilled: a `DynamicCache` already expanded to
    the arms (every row holds the whole prefix, so HF pays no prefix sharing), all rows padded to
    the longest suffix with an attention mask. Returns (step, state): `step(*state)` runs one
    decode step (`logits_to_keep=1`, argmax, one `.tolist()`) and returns the next state. Call
    under `torch.inference_mode()`."""
    from transformers import DynamicCache

    width = max(len(s) for s in suffixes)
    rows = [prefix + s + [0] * (width - len(s)) for s in suffixes]
    ids = torch.tensor(rows, device=model.device)
    mask = torch.tensor(
        [[1] * (len(prefix) + len(s)) + [0] * (width - len(s)) for s in suffixes],
        device=model.device,
    )
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
    last = mask.sum(1) - 1
    tokens = out.logits[torch.arange(len(rows)), last].argmax(-1, keepdim=True)
    positions = last[:, None] + 1

    def step(tokens, positions, mask):
        mask = torch.cat([mask, torch.ones_like(tokens)], dim=1)
        out = model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.tolist()
        return tokens, positions + 1, mask

    return step, (tokens, positions, mask)


def hf_step_ops(model, prefix: list[int], suffixes: list[list[int]], at_step: int = 3) -> OpCount:
    """The ops of HF's decode step (`hf_expanded_decode`) at step `at_step`."""
    with torch.inference_mode():
        step, state = hf_expanded_decode(model, prefix, suffixes)
        for _ in range(at_step):
            state = step(*state)
        counted, _ = count_ops(step, *state)
    return counted
