"""What every unit of a run shares (`UnitContext`, `UnitCounts`), the base units, and the one
construction of a record.

A base unit (NT, B or oracle_B) is one `generate` over the chunk's prompts; the arms unit is in
arms.py. The builders (`base_inputs`, `base_record`) are shared with the streamed schedule
(../stream.py), which submits the same requests to one engine as their inputs become known.
Each sequence decodes with `seed_key = (seed, problem_id, condition)`. Every call goes to the
run's backend (nudgeability.backends: the in-process engine or a server); each record states the
continuation level of its completion.

Every engine call on a prompt passes the prompt's shared start (`UnitContext.shared`,
splice/experiment/shared_start.py): a base's prompts, and the arms, resolutions and hidden-state
pass forked from them (the same count, as their prefix begins with the base's prompt), so that
every schedule, resume, shard and replay computes a prompt on the same path.

Actions are read by the family after the cut: NT from its whole generation with no tool declared,
a base from its ids from the boundary on, an arm from its splice ids plus its generation. NT is
always graded; B, oracle_B and the arms when they answer (SELF), so that the resolution phase's
final accuracy (resolve.py) can read every condition's answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from nudgeability.backends.base import Backend, continuation_of
from nudgeability.engine import Completion, SamplingParams
from nudgeability.models.families import SELF
from nudgeability.models.families.action import Action
from nudgeability.splice.experiment.conditions import (
    CONSISTENCY,
    NO_TOOL_BASE,
    TOOL_BASE,
    Condition,
)
from nudgeability.splice.experiment.cuts import cut_positions, parse_cuts
from nudgeability.splice.experiment.prompts import declared_tools, prompt_sha256
from nudgeability.splice.run.prepare import Prepared
from nudgeability.splice.run.units.signals import with_b_signals
from nudgeability.splice.rundir.records import Record
from nudgeability.splice.tasks import Problem


@dataclass
class UnitCounts:
    """Token counts of one unit, for the timings file and the progress bar."""

    sequences: int = 0
    prefill_tokens: int = 0  # per-sequence prefill (whole prompts; arms' suffixes)
    shared_prefill_tokens: int = 0  # prefixes computed once per fork group
    generated_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens a server said it served from its prefix cache
    retries: int = 0  # requests a server backend retried
    seconds: float = 0.0  # wall time of the unit

    def add(self, completion: Completion, shared: bool) -> None:
        self.sequences += 1
        self.cached_prompt_tokens += getattr(completion, "cached_tokens", None) or 0
        self.prefill_tokens += completion.prefill_tokens
        self.generated_tokens += len(completion.token_ids)
        if shared:
            self.shared_prefill_tokens += completion.shared_prefill_tokens


@dataclass
class UnitContext:
    """What every unit of one run needs; built once per run."""

    prepared: Prepared  # the config, task, family, problems, prompts, splices and plan
    backend: Backend

    def cuts_of(self, reasoning: Sequence[int]) -> list[int] | None:
        """The extra cuts of a base's reasoning (`--cuts`; splice/experiment/cuts.py), None
        in a run with the paper's cut alone."""
        spec = self.prepared.config.cuts
        if spec is None:
            return None
        return cut_positions(parse_cuts(spec), reasoning, self.prepared.family.decode)

    def arms_of(self, base: str) -> list[Condition]:
        """The arms that fork from `base`, in canonical order (the run's plan)."""
        return self.prepared.plan.arms_of(base)

    def shared(self, phase: str, prompt: Sequence[int]) -> int:
        """The `shared` start of a prompt of `phase` ('NT', 'B', 'oracle_B', or the
        self-consistency samples, on NT's prompt), or of a prefix that begins with one: the
        template's start (prepare.py `Prepared.starts`); 0 on a server."""
        starts = self.prepared.starts
        if starts is None:
            return 0
        return starts.length(NO_TOOL_BASE if phase == CONSISTENCY else phase, prompt)

    def params(
        self, seed: int, problem_id: str, code: str, budget: int, *, token_stats: bool = False
    ) -> SamplingParams:
        """Sampling settings of one sequence; its random stream is keyed by (seed, problem, condition)."""
        return SamplingParams(
            token_stats=token_stats,
            max_new_tokens=budget,
            temperature=self.prepared.config.temperature,
            top_p=self.prepared.config.top_p,
            seed_key=(seed, problem_id, code),
            stop_token_ids=tuple(self.prepared.family.stop_token_ids),
            stop_strings=tuple(self.prepared.family.stop_strings),
        )


def base_inputs(
    ctx: UnitContext, base: str, seed: int, indices: Sequence[int], with_signals: bool = False
) -> tuple[list[list[int]], list[SamplingParams]]:
    """The prompts and sampling settings of a base unit, one per problem at `indices`."""
    prompts = [list(ctx.prepared.prompts[i].for_base(base)) for i in indices]
    budget = ctx.prepared.config.max_new_tokens
    params = [
        ctx.params(seed, ctx.prepared.problems[i].id, base, budget, token_stats=with_signals)
        for i in indices
    ]
    return prompts, params


def run_base_unit(
    ctx: UnitContext, base: str, seed: int, indices: Sequence[int], signals_of: str | None = None
) -> tuple[list[Record], UnitCounts, np.ndarray | None]:
    """Generate the base `base` ('NT', 'B', 'oracle_B') for the problems at `indices`; one record
    each, the counts, and B's hidden states for the unit's side file (None: none).

    With `signals_of` (the unit's name) and base B, the records carry B's uncertainty signals
    and the hidden states at the cut are returned (splice/run/units/signals.py).
    """
    with_signals = signals_of is not None and base == TOOL_BASE
    prompts, params = base_inputs(ctx, base, seed, indices, with_signals)
    shared = [ctx.shared(base, prompt) for prompt in prompts]
    outs = ctx.backend.generate(prompts, params, shared=shared)
    counts, records = UnitCounts(), []
    for i, prompt, out in zip(indices, prompts, outs):
        counts.add(out, shared=False)
        records.append(base_record(ctx, ctx.prepared.problems[i], base, seed, prompt, out))
    hidden = None
    if with_signals:
        engine = ctx.backend.engine
        records, hidden = with_b_signals(engine, records, prompts, shared, outs, signals_of)
    return records, counts, hidden


def base_record(
    ctx: UnitContext, problem: Problem, base: str, seed: int, prompt: list[int], out: Completion
) -> Record:
    """The record of a base run: its boundary (B, oracle_B), action and grade."""
    generated = list(out.token_ids)
    tools = declared_tools(ctx.prepared.task, base)
    boundary = None if base == NO_TOOL_BASE else ctx.prepared.family.find_boundary(generated)
    action = ctx.prepared.family.parse_action(
        generated[boundary or 0 :],
        out.finish_reason,
        tools=tools,
        is_answer=ctx.prepared.task.holds_answer,
    )
    graded = base == NO_TOOL_BASE or action.kind == SELF
    record = _record(ctx, problem, base, None, seed, prompt, None, boundary, out, action, graded)
    if boundary is not None and ctx.arms_of(base):
        record = replace(record, cuts=ctx.cuts_of(generated[:boundary]))
    return record


def _record(
    ctx: UnitContext,
    problem: Problem,
    code: str,
    sentence_id: str | None,
    seed: int,
    prompt: Sequence[int],
    prefix_tokens: int | None,
    boundary: int | None,
    out: Completion,
    action: Action,
    graded: bool,
) -> Record:
    """The one construction of a record (a base's or an arm's): the prompt's hash, the decoded
    text, the cut in it (a base that closed its thinking) and the grade when `graded`."""
    generated = list(out.token_ids)
    decode = ctx.prepared.family.decode
    return Record(
        problem_id=problem.id,
        task=ctx.prepared.task.name,
        condition=code,
        sentence_id=sentence_id,
        seed=seed,
        prompt_tokens=len(prompt),
        prompt_sha256=prompt_sha256(prompt),
        prefix_tokens=prefix_tokens,
        boundary=boundary,
        generated_ids=generated,
        text=decode(generated),
        finish_reason=out.finish_reason,
        action=action,
        grade=ctx.prepared.task.grade(problem, action.answer) if graded else None,
        continuation=continuation_of(out),
        cut=None if boundary is None else len(decode(generated[:boundary])),
    )


class CutWatch:
    """Finds a running base's think-close from the tokens so far (`Family.find_boundary`, as
    `base_record` finds its boundary), for the stream to fork its arms there (../stream.py); the
    first close in a prefix of the tokens is the first close of them all, so the cut is final."""

    def __init__(self, family, on_cut: Callable[[int, list[int]], None]):
        self.family, self.on_cut = family, on_cut
        self.tail = len(family.think_close_text) + 4  # tokens a close can span, with margin
        self.seen = 0

    def __call__(self, tokens: list[int]) -> bool:
        if len(tokens) == self.seen:
            return False
        recent = tokens[max(0, self.seen - self.tail) :]
        self.seen = len(tokens)
        if self.family.find_marker(recent, self.family.think_close_text) is None:
            return False
        self.on_cut(self.family.find_boundary(tokens), tokens)
        return True
