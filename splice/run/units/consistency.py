"""The self-consistency unit: K unaided samples per problem in one batched Engine.generate.

Its records are read and graded as NT's (never the competence label) and carry their answer key;
see splice/run/units/signals.py for the signals and stats/grounding/join.py for how they are read back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nudgeability.engine import Completion, SamplingParams
from nudgeability.splice.experiment.conditions import NO_TOOL_BASE
from nudgeability.splice.run.units.base import UnitContext, UnitCounts, base_record
from nudgeability.splice.run.units.signals import CONSISTENCY_TEMPERATURE, CONSISTENCY_TOP_P
from nudgeability.splice.rundir.records import Record


def consistency_inputs(
    ctx: UnitContext, code: str, seed: int, indices: Sequence[int]
) -> tuple[list[list[int]], list[SamplingParams], list[tuple[int, int]]]:
    """The prompts, sampling settings and (problem index, sample) of the K samples per problem.

    Sample k of a problem decodes at temperature 1.0, top-p 0.95 from its own stream, keyed by
    (seed, problem, code, k)."""
    samples = ctx.prepared.config.consistency_samples
    prompts, params, owners = [], [], []
    for i in indices:
        prompt = list(ctx.prepared.prompts[i].for_base(NO_TOOL_BASE))
        for k in range(samples):
            prompts.append(prompt)
            params.append(
                dataclasses.replace(
                    ctx.params(
                        seed, ctx.prepared.problems[i].id, code, ctx.prepared.config.max_new_tokens
                    ),
                    temperature=CONSISTENCY_TEMPERATURE,
                    top_p=CONSISTENCY_TOP_P,
                    seed_key=(seed, ctx.prepared.problems[i].id, code, k),
                )
            )
            owners.append((i, k))
    return prompts, params, owners


def consistency_record(
    ctx: UnitContext, code: str, seed: int, owner: tuple[int, int], prompt, out: Completion
) -> Record:
    """Sample `owner` = (problem index, k), read and graded as NT's, with its answer key."""
    i, k = owner
    record = base_record(ctx, ctx.prepared.problems[i], NO_TOOL_BASE, seed, prompt, out)
    return dataclasses.replace(
        record,
        condition=code,
        sample=k,
        signals={"answer_key": ctx.prepared.task.answer_key(record.action.answer)},
    )


def run_consistency_unit(
    ctx: UnitContext, code: str, seed: int, indices: Sequence[int]
) -> tuple[list[Record], UnitCounts]:
    """The K unaided self-consistency samples of each problem at `indices`, one batched generate."""
    prompts, params, owners = consistency_inputs(ctx, code, seed, indices)
    counts, records = UnitCounts(), []
    if not prompts:
        return records, counts
    shared = [ctx.shared(code, prompt) for prompt in prompts]
    outs = ctx.backend.generate(prompts, params, shared=shared)
    for owner, prompt, out in zip(owners, prompts, outs):
        counts.add(out, shared=False)
        records.append(consistency_record(ctx, code, seed, owner, prompt, out))
    return records, counts
