"""Computing one unit of work: a base phase for a chunk of problems, or the chunk's splice arms.

A base unit (NT, B or oracle_B) is one `generate` over the chunk's prompts. The arms unit is one
`fork_many` holding, for every problem of the chunk whose base closed its
thinking, one request on B's prefix (prompt + B's ids before the first think-close, the ids being
the request's stem) with every B-arm as a suffix (the empty splice is an empty suffix), and one on
oracle_B's own prefix with the oracle arms; arms that delete or replace the last sentence before
the cut get one more request per base, on the prefix that ends where that sentence begins. The builders (`base_inputs`, `arm_requests`,
`arm_records`, `base_record`) are shared with the streamed schedule (stream.py), which submits the
same requests to one engine as their inputs become known. Each sequence decodes with `seed_key = (seed, problem_id, condition)`. Both calls go
to the run's backend (nudgeability.backends: the in-process engine or a server); each record
states the continuation level of its completion.

Every engine call on a prompt passes the prompt's shared start (`UnitContext.shared`,
splice/experiment/shared_start.py): a base's prompts, and the arms, resolutions and hidden-state
pass forked from them (the same count, as their prefix begins with the base's prompt), so that
every schedule, resume, shard and replay computes a prompt on the same path.

With `--likelihoods` the arms' fork also scores each splice and, for sealed arms, the action
openers after it (likelihoods.py), and each arm's record carries them.

Actions are read by the family after the cut: NT from its whole generation with no tool declared,
a base from its ids from the boundary on, an arm from its splice ids plus its generation. NT is
always graded; B, oracle_B and the arms when they answer (SELF), so that the resolution phase's
final accuracy (resolve.py) can read every condition's answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nudgeability.backends.base import Backend, continuation_of
from nudgeability.engine import Completion, ForkRequest, SamplingParams
from nudgeability.models.families import SELF
from nudgeability.models.families.action import Action
from nudgeability.splice.experiment.conditions import (
    CONSISTENCY,
    NO_TOOL_BASE,
    TOOL_BASE,
    Condition,
)
from nudgeability.splice.experiment.cuts import cut_positions, parse_cuts
from nudgeability.splice.experiment.openers import Openers, action_openers
from nudgeability.splice.experiment.prompts import declared_tools, prompt_sha256
from nudgeability.splice.experiment.sentence_split import last_sentence_start
from nudgeability.splice.run.likelihoods import OpenerRows, add_scoring, arm_likelihoods
from nudgeability.splice.run.prepare import Prepared
from nudgeability.splice.run.signals import with_b_signals
from nudgeability.splice.rundir.records import Record, RecordKey
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


def wants_signals(base: str, signals_file) -> bool:
    """Whether a base unit records B's uncertainty signals (only B does, and only when asked)."""
    return signals_file is not None and base == TOOL_BASE


def run_base_unit(
    ctx: UnitContext,
    base: str,
    seed: int,
    indices: Sequence[int],
    signals_file: tuple[Path, str] | None = None,
) -> tuple[list[Record], UnitCounts]:
    """Generate the base `base` ('NT', 'B', 'oracle_B') for the problems at `indices`; one record each.

    With `signals_file` = (path, unit name) and base B, the records carry B's uncertainty signals
    and the hidden states at the cut go to `path` (splice/run/signals.py).
    """
    with_signals = wants_signals(base, signals_file)
    prompts, params = base_inputs(ctx, base, seed, indices, with_signals)
    shared = [ctx.shared(base, prompt) for prompt in prompts]
    outs = ctx.backend.generate(prompts, params, shared=shared)
    counts, records = UnitCounts(), []
    for i, prompt, out in zip(indices, prompts, outs):
        counts.add(out, shared=False)
        records.append(base_record(ctx, ctx.prepared.problems[i], base, seed, prompt, out))
    if with_signals:
        records = with_b_signals(ctx.backend.engine, records, prompts, shared, outs, *signals_file)
    return records, counts


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


@dataclass
class ArmGroup:
    """One fork request's bookkeeping: which problem, base and arms its completions belong to."""

    index: int
    base: str
    arms: list[Condition]
    prefix_tokens: int
    at: int | None = None  # an extra cut (`--cuts`); None: the paper's
    # each arm's sample (`--samples-per-arm`), parallel to `arms`: None for the first, 1..N-1
    samples: list[int | None] = field(default_factory=list)
    # --likelihoods: the openers after this base's close and where their scoring rows sit
    openers: Openers | None = None
    opener_rows: list[OpenerRows] = field(default_factory=list)


def arm_requests(
    ctx: UnitContext, seed: int, index: int, base: str, boundary: int, generated: list[int]
) -> list[tuple[ForkRequest, ArmGroup]]:
    """The forks of every arm of `base` for the problem at `index`, at the paper's cut (the
    base's `boundary`) and then at each extra cut (`--cuts`) in ascending order: at each, one
    from the cut for the arms that keep the reasoning whole, and one from the start of the last
    sentence before the cut (splice/experiment/sentence_split.py) for those that delete or
    replace it."""
    arms = ctx.arms_of(base)
    whole = [arm for arm in arms if arm.edit is None]
    edited = [arm for arm in arms if arm.edit is not None]
    requests = []
    for at in [None, *(ctx.cuts_of(generated[:boundary]) or [])]:
        cut = boundary if at is None else at
        if whole:
            requests.append(arm_request(ctx, seed, index, base, cut, generated, whole, at))
        if edited:
            start = last_sentence_start(generated[:cut], ctx.prepared.family.decode)
            requests.append(arm_request(ctx, seed, index, base, start, generated, edited, at))
    if len(requests) > 1:
        # The forks' stems are all starts of the paper cut's: one trunk of the base's KV serves
        # them all, each reading its own first tokens of it, with the bits of a stem of its own
        # (engine/README.md, *A trunk*)
        prompt = ctx.prepared.prompts[index].for_base(base)
        trunk = [prompt[-1], *generated[:boundary]]
        for request, _ in requests:
            request.trunk, request.trunk_ids = len(trunk), list(trunk)
    return requests


def in_arm_order(ctx: UnitContext, base: str, records: list[Record]) -> list[Record]:
    """One problem's arm records of `base`, from its forks, in canonical order: by arm, each at
    the paper's cut and then at its extra cuts in ascending order, each cut's samples in order."""
    order = {arm.code: k for k, arm in enumerate(ctx.arms_of(base))}
    return sorted(records, key=lambda r: (order[r.condition], *RecordKey.of(r).order[3:]))


def arm_request(
    ctx: UnitContext,
    seed: int,
    index: int,
    base: str,
    boundary: int,
    generated: list[int],
    arms: list[Condition],
    at: int | None = None,
) -> tuple[ForkRequest, ArmGroup]:
    """The fork of `arms` of `base` for the problem at `index`, from the base's ids before
    `boundary` (its cut, or where an edit begins).

    The prefix is the base's prompt and those ids; the last prompt token and the ids are the
    request's stem (`ForkRequest.stem`), so the engine computes them as the base did, or copies
    them from the base's cache when the stream names it (`reuse`; a stem shorter than the base's
    run is a prefix of it): the same bits. The base's shared start is the request's too, so the
    stem continues it as the base's row did."""
    problem = ctx.prepared.problems[index]
    config = ctx.prepared.config
    reasoning = list(generated[:boundary])
    prompt = list(ctx.prepared.prompts[index].for_base(base))
    prefix = prompt + reasoning
    # each arm's samples side by side: the first keeps the arm's stream, sample k its own
    samples = [None, *range(1, config.samples_per_arm)]
    arms = [arm for arm in arms for _ in samples]
    suffixes = [list(ctx.prepared.splices[arm.code]) for arm in arms]
    params = []
    for arm, k in zip(arms, samples * (len(arms) // len(samples))):
        p = ctx.params(seed, problem.id, arm.code, config.max_new_tokens_arm)
        params.append(p if k is None else replace(p, seed_key=(*p.seed_key, k)))
    shared = ctx.shared(base, prompt)
    request = ForkRequest(prefix, suffixes, params, stem=len(reasoning) + 1, shared=shared)
    group = ArmGroup(index, base, arms, len(reasoning), at, samples * (len(arms) // len(samples)))
    if config.likelihoods:  # scored once per arm, on its first sample's row
        family = ctx.prepared.family
        group.openers = action_openers(family, ctx.prepared.task, base)
        firsts = [arm if k is None else None for arm, k in zip(arms, group.samples)]
        group.opener_rows = add_scoring(
            request, firsts, group.openers, family.think_close_ids, config.score_openers
        )
    return request, group


def arm_records(
    ctx: UnitContext, seed: int, group: ArmGroup, outs: list[Completion], counts: UnitCounts
) -> list[Record]:
    """The records of one fork group's arms, in canonical order (their counts go to `counts`)."""
    records = []
    for j, (arm, out) in enumerate(zip(group.arms, outs)):
        counts.add(out, shared=j == 0)
        record = arm_record(
            ctx,
            ctx.prepared.problems[group.index],
            arm,
            seed,
            ctx.prepared.prompts[group.index].for_base(group.base),
            group.prefix_tokens,
            out,
        )
        sample = group.samples[j] if group.samples else None
        if group.openers is not None:
            first = j - (sample or 0)  # the likelihoods of the arm's first sample
            scored = arm_likelihoods(outs, first, group.opener_rows, group.openers)
            record = replace(record, likelihoods=scored)
        if group.at is not None or sample is not None:
            record = replace(record, at=group.at, sample=sample)
        records.append(record)
    for out in outs[len(group.arms) :]:  # the opener-scoring rows: work done, no record
        counts.add(out, shared=False)
    return records


def run_arms_unit(
    ctx: UnitContext, seed: int, indices: Sequence[int], base_lines: dict[str, list[str]]
) -> tuple[list[Record], UnitCounts]:
    """Fork every arm of the problems at `indices` from their bases' stored records.

    `base_lines` maps 'B' / 'oracle_B' to the record lines of this chunk's base unit (same seed).
    A problem whose base never closed its thinking (boundary null) gets no arms of that base.
    """
    bases: dict[str, dict[str, Record]] = {}
    for base, lines in base_lines.items():
        bases[base] = {record.problem_id: record for record in map(Record.from_json, lines)}
    requests, groups, forks = [], [], []
    for i in indices:
        for base in ctx.prepared.plan.arm_bases:
            record = bases[base][ctx.prepared.problems[i].id]
            if record.boundary is not None:
                made = arm_requests(ctx, seed, i, base, record.boundary, record.generated_ids)
                requests += [request for request, _ in made]
                groups += [group for _, group in made]
                forks.append((base, len(made)))
    counts, records = UnitCounts(), []
    if requests:
        done = iter(zip(groups, ctx.backend.fork_many(requests)))
        for base, made in forks:  # one problem's forks of one base, then in canonical order
            found = []
            for group, outs in (next(done) for _ in range(made)):
                found += arm_records(ctx, seed, group, outs, counts)
            records += in_arm_order(ctx, base, found)
    return records, counts


def arm_record(
    ctx: UnitContext,
    problem: Problem,
    arm: Condition,
    seed: int,
    prompt: Sequence[int],
    prefix_tokens: int,
    out: Completion,
) -> Record:
    """The record of one arm: the action read from its splice ids plus its generation."""
    generated = list(out.token_ids)
    action = ctx.prepared.family.parse_action(
        list(ctx.prepared.splices[arm.code]) + generated,
        out.finish_reason,
        tools=declared_tools(ctx.prepared.task, arm.parent),
        is_answer=ctx.prepared.task.holds_answer,
    )
    graded = action.kind == SELF
    return _record(
        ctx,
        problem,
        arm.code,
        arm.sentence_id,
        seed,
        prompt,
        prefix_tokens,
        None,
        out,
        action,
        graded,
    )
