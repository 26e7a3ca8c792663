"""Peak KV of `--cuts`: every cut of one base read from one trunk, against a stem per cut.

    python benchmarks/cuts_memory.py              # the two cases below
    python benchmarks/cuts_memory.py --no-write

Two cases, SmolLM2 on StrategyQA: the demo's bases (`--n 8`, the primary arms, `--cuts all`),
whose reasoning is one to three sentences (14 to 30 tokens); and longer traces: B's whole
generation (up to 384 tokens; SmolLM2 ends after about 60) taken as its reasoning, as if it
closed there, cut at 9 fractions, the conf and doubt arms 16 tokens
each. For each problem whose B closed, the runner's own arm forks (splice/run/units/arms.py
`arm_requests`: every arm at the paper's cut and at each extra cut, with the base's shared
start) run on a fresh engine twice: as `nudge run` submits them (one
trunk of the base's KV, each fork reading its first tokens of it), and with the trunk taken off
(a stem of its own per fork, as before trunks). Each is measured by the engine's own accounting,
the pool's peak blocks in use (`KVPool.peak_in_use`), beside the bound the trunk is held to: 1.3 x (one
base trace, the base's prompt and reasoning, plus the live arms, each arm's splice and
generation), in blocks. The arms' tokens are checked equal in the two. Memory figures, so the
machine need not be idle; writes its section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy

from benchkit.results import publish

from nudgeability.engine import Engine
from nudgeability.splice.run.config import RunConfig
from nudgeability.splice.run.prepare import prepare
from nudgeability.splice.run.runner import unit_context
from nudgeability.splice.run.units import arm_requests, base_inputs

SECTION = "Cuts: one trunk against a stem per cut (benchmarks/cuts_memory.py)"


def peak_blocks(ctx, requests) -> tuple[int, list]:
    """The pool's peak blocks in use while `requests` run alone on a fresh engine, and the outs."""
    loaded = ctx.prepared.loaded
    engine = Engine(loaded.model, loaded.tokenizer)
    outs = engine.fork_many(requests)
    assert engine.pool.in_use == 0, "a fork left KV behind"
    return engine.pool.peak_in_use, outs


def measure(
    n: int, cuts: str, conditions: tuple[str, ...], budgets: tuple[int, int], whole: bool
) -> list[dict]:
    """One row per problem; `whole`: B's whole generation is its reasoning."""
    config = RunConfig(
        task="strategyqa",
        n=n,
        conditions=conditions,
        cuts=cuts,
        device="cpu",
        max_new_tokens=budgets[0],
        max_new_tokens_arm=budgets[1],
    )
    ctx = unit_context(prepare(config), progress=False)
    block = Engine(ctx.prepared.loaded.model, ctx.prepared.loaded.tokenizer).block_size
    indices = list(range(len(ctx.prepared.problems)))
    prompts, params = base_inputs(ctx, "B", 0, indices)
    shared = [ctx.shared("B", p) for p in prompts]
    outs = ctx.backend.engine.generate(prompts, params, shared=shared)
    rows = []
    for i, prompt, out in zip(indices, prompts, outs):
        generated = list(out.token_ids)
        boundary = len(generated) if whole else ctx.prepared.family.find_boundary(generated)
        if boundary is None:
            continue
        made = [request for request, _ in arm_requests(ctx, 0, i, "B", boundary, generated)]
        alone = copy.deepcopy(made)
        for request in alone:
            request.trunk, request.trunk_ids = 0, None
        trunk_peak, trunk_outs = peak_blocks(ctx, made)
        alone_peak, alone_outs = peak_blocks(ctx, alone)
        same = all(
            [a.token_ids for a in x] == [b.token_ids for b in y]
            for x, y in zip(trunk_outs, alone_outs)
        )
        trace = -(-(len(prompt) + boundary) // block)
        arms = sum(
            -(-(len(s) + len(o.token_ids)) // block)
            for request, group in zip(made, trunk_outs)
            for s, o in zip(request.suffixes, group)
        )
        rows.append(
            dict(
                problem=ctx.prepared.problems[i].id[:8],
                reasoning=boundary,
                forks=len(made),
                trace=trace,
                arms=arms,
                trunk=trunk_peak,
                alone=alone_peak,
                same=same,
            )
        )
    return rows


CASES = (
    ("the demo's bases, primary arms", 8, "all", ("primary",), (256, 128), False),
    (
        "whole generations as reasoning, conf and doubt",
        3,
        "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9",
        ("conf", "doubt"),
        (384, 16),
        True,
    ),
)


def table(title: str, cuts: str, rows: list[dict]) -> str:
    lines = [
        f"**{title}**, `--cuts {cuts}`: peak KV blocks (16 slots) per problem, the engine's "
        "pool count",
        "",
        "| problem | reasoning tokens | forks | one trace | live arms | bound 1.3 x (trace + arms) "
        "| trunk peak | trunk / (trace + arms) | stem per cut peak | stems / trunk | same tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        whole = r["trace"] + r["arms"]
        lines.append(
            f"| {r['problem']} | {r['reasoning']} | {r['forks']} | {r['trace']} | {r['arms']} "
            f"| {1.3 * whole:.1f} | {r['trunk']} | {r['trunk'] / whole:.2f} | {r['alone']} "
            f"| {r['alone'] / r['trunk']:.2f} | {'yes' if r['same'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    body = "\n\n".join(
        table(title, cuts, measure(n, cuts, conditions, budgets, whole))
        for title, n, cuts, conditions, budgets, whole in CASES
    )
    publish(SECTION, body, write=not args.no_write)


if __name__ == "__main__":
    main()
