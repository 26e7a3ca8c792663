"""The arms unit: every arm of a chunk's problems forked from its bases' reasoning.

It is one `fork_many` holding, for every problem of the chunk whose base closed its thinking, one
request on B's prefix (prompt + B's ids before the first think-close, the ids being the
request's stem) with every B-arm as a suffix (the empty splice is an empty suffix), and one on
oracle_B's own prefix with the oracle arms; arms that delete or replace the last sentence before
the cut get one more request per base, on the prefix that ends where that sentence begins. With
`--cuts` the same requests follow at each extra cut, all of one base reading one trunk of its KV;
with `--samples-per-arm N` each arm is N suffixes of its fork. The builders (`arm_requests`,
`arm_records`) are shared with the streamed schedule (../stream_jobs.py).

With `--likelihoods` the arms' fork also scores each splice and, for sealed arms, the action
openers after it (likelihoods.py), and each arm's record carries them. An arm's action is read
by the family from its splice ids plus its generation; it is graded when it answers (SELF).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from nudgeability.engine import Completion, ForkRequest
from nudgeability.models.families import SELF
from nudgeability.splice.experiment.conditions import Condition
from nudgeability.splice.experiment.openers import Openers, action_openers
from nudgeability.splice.experiment.prompts import declared_tools
from nudgeability.splice.experiment.sentence_split import last_sentence_start
from nudgeability.splice.run.units.base import UnitContext, UnitCounts, _record
from nudgeability.splice.run.units.likelihoods import OpenerRows, add_scoring, arm_likelihoods
from nudgeability.splice.rundir.records import Record, RecordKey
from nudgeability.splice.tasks import Problem


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
    rows = [(arm, k) for arm in arms for k in [None, *range(1, config.samples_per_arm)]]
    arms, samples = [arm for arm, _ in rows], [k for _, k in rows]
    suffixes = [list(ctx.prepared.splices[arm.code]) for arm in arms]
    params = []
    for arm, k in rows:
        p = ctx.params(seed, problem.id, arm.code, config.max_new_tokens_arm)
        params.append(p if k is None else replace(p, seed_key=(*p.seed_key, k)))
    shared = ctx.shared(base, prompt)
    request = ForkRequest(prefix, suffixes, params, stem=len(reasoning) + 1, shared=shared)
    group = ArmGroup(index, base, arms, len(reasoning), at, samples)
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
    ctx: UnitContext, seed: int, indices: Sequence[int], base_records: dict[str, list[Record]]
) -> tuple[list[Record], UnitCounts]:
    """Fork every arm of the problems at `indices` from their bases' stored records.

    `base_records` maps 'B' / 'oracle_B' to the records of this chunk's base unit (same seed).
    A problem whose base never closed its thinking (boundary null) gets no arms of that base.
    """
    bases: dict[str, dict[str, Record]] = {}
    for base, records in base_records.items():
        bases[base] = {record.problem_id: record for record in records}
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
        tools=declared_tools(ctx.prepared.task, arm.base),
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
