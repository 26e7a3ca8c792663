"""One part of the engine section (`engine.py`): forks of one base at many cuts, one trunk.

A base (a prompt of `prefix` random tokens, then `trunk_new` generated tokens) is cut at 8 places
of what it generated; at each cut a fork of `arms` arms decodes `new` tokens. The forks run once
as `nudge run --cuts` submits them (one trunk of the base's KV, each fork reading its first
tokens of it: engine/README.md, *A trunk*) and once with a stem of its own per fork. The row
reports the pool's peak blocks of each (the engine's own count), the bound 1.3 x (one base
trace + the arms), and whether the arms' tokens and logits agree: on CPU in fp32 they are
bitwise equal (tests/engine/scheduling/test_trunk_forks.py); on CUDA in bf16 a trunk computed
in one row may part from a stem in the last bits, which this part measures (the largest logit
difference relative to the largest logit, and the argmax agreement).
"""

from __future__ import annotations

import copy

import torch

from .engine_inputs import Row, greedy_params, make_engine, random_ids

CUTS = 8


def _forks(prompt: list[int], generated: list[int], arms: int, new: int, vocab: int):
    from nudgeability.engine import ForkRequest

    suffixes = [random_ids(4, 100 + k, vocab) for k in range(arms)]
    trunk = [prompt[-1], *generated]
    requests = []
    for k in range(1, CUTS + 1):
        cut = k * len(generated) // CUTS
        stem = cut + 1
        request = ForkRequest(prompt + generated[:cut], suffixes, greedy_params(new), stem=stem)
        request.trunk, request.trunk_ids = len(trunk), list(trunk)
        requests.append(request)
    return requests


def trunk_forks(model, sizes) -> list[Row]:
    vocab = model.config.vocab_size
    prompt = random_ids(sizes["prefix"], 7, vocab)
    base = make_engine(model).generate([prompt], greedy_params(sizes["trunk_new"]))[0]
    generated = list(base.token_ids)
    requests = _forks(prompt, generated, sizes["arms"], sizes["new"], vocab)
    alone = copy.deepcopy(requests)
    for request in alone:
        request.trunk, request.trunk_ids = 0, None
    found = {}
    for name, batch in (("trunk", requests), ("stems", alone)):
        engine = make_engine(model)
        outs = engine.fork_many(batch, return_logits=True)
        found[name] = (engine.pool.peak_in_use, outs, engine.block_size)
        del engine  # the next engine's pool is sized from the memory this one frees
    (trunk_peak, trunk_outs, block), (alone_peak, alone_outs, _) = found["trunk"], found["stems"]
    worst, agree, total = 0.0, 0, 0
    for group_a, group_b in zip(trunk_outs, alone_outs):
        for a, b in zip(group_a, group_b):
            n = min(len(a.token_ids), len(b.token_ids))
            got, ref = a.logits[:n].float(), b.logits[:n].float()
            scale = ref.abs().amax(dim=-1, keepdim=True)
            worst = max(worst, ((got - ref).abs() / scale).max().item())
            agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
            total += n
    identical = all(
        torch.equal(a.logits, b.logits)
        for group_a, group_b in zip(trunk_outs, alone_outs)
        for a, b in zip(group_a, group_b)
    )
    trace = -(-(len(prompt) + len(generated)) // block)
    arms = sum(-(-(4 + len(a.token_ids)) // block) for group in trunk_outs for a in group)
    return [
        (
            f"one trunk for {CUTS} cuts ({sizes['arms']} arms each, prefix {sizes['prefix']}, "
            f"{len(generated)} generated)",
            f"peak blocks: trunk {trunk_peak}, a stem per cut {alone_peak}, bound 1.3 x (trace "
            f"{trace} + arms {arms}) = {1.3 * (trace + arms):.1f}; logits "
            f"{'bitwise equal' if identical else f'largest difference {worst:.2e}'}, argmax "
            f"agrees at {agree}/{total}",
        )
    ]
