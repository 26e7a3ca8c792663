"""The resolution phase (`nudge run --resolve`): execute each TOOL record's call and let the model finish.

Measurement ends at the committed action; this optional phase asks what the action was worth.
Every record whose action is TOOL (a base B / oracle_B, or an arm) gets one resolution:

1. its call is executed by the task's offline tools (`tasks/tools.py`); a call whose arguments do
   not fit the declaration is not executed, and the resolution says why;
2. the resolution prompt is the record's whole context, cut just after the call (prompt, the base's
   reasoning prefix, the arm's splice and generation up to and including the call), then the tool
   result in the family's native tool-result turn and the header of the model's next turn
   (`Family.continuation_ids`, byte-identical to the real chat template);
3. the model generates that turn; its action is read like any other (a second tool call is
   recorded as TOOL and not executed: one call per problem, as in the paper's design) and a SELF
   answer is graded with the task's scorer.

All resolutions of one problem and base share the prompt and the base's reasoning prefix (the
base's own commitment, and each arm's splice, is part of its suffix), so they go through
the backend's `fork_many` as one request per (problem, base): the prefix is prefilled once (the
base's reasoning as the request's stem, which a streamed run copies from the base's cache). A unit is one
(seed, chunk), like the arms, and reads the chunk's base and arms parts; its sequences decode
with `seed_key = (seed, problem_id, "resolve:" + condition)` and the arms' token budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nudgeability.engine import Completion, ForkRequest
from nudgeability.engine.scheduling.group_shape import GroupShape, batch_cost
from nudgeability.models.families import SELF, TOOL, FamilyError
from nudgeability.splice.experiment.conditions import base_of
from nudgeability.splice.experiment.interventions import ARM_BASES
from nudgeability.splice.experiment.prompts import declared_tools, prompt_sha256
from nudgeability.splice.run.units.base import UnitContext, UnitCounts
from nudgeability.splice.rundir.records import Record, RecordKey, ResolutionRecord, record_sha256
from nudgeability.splice.tasks import Problem
from nudgeability.splice.tasks.tools import ToolCallError

SEED_KEY_PREFIX = "resolve:"


@dataclass
class _Source:
    """One TOOL record to resolve, and what its resolution needs."""

    record: Record
    after_cut: list[int]  # the ids after the shared prefix, up to the end of the record


def thinking_opens_after_result(ctx: UnitContext) -> bool:
    """Whether the family's next-turn header leaves the thinking block open (GLM-Z1 writes
    `<think>`, Gemma 4 `<|channel>thought`), so the generated ids start inside the thinking."""
    text = ctx.prepared.family.render_tool_result("tool", "result", thinking=True)
    return text.rfind(ctx.prepared.family.think_open_text) > text.rfind(
        ctx.prepared.family.think_close_text
    )


def tool_record_sources(
    ctx: UnitContext, record: Record, arm_records: dict[RecordKey, Record]
) -> list[_Source]:
    """The TOOL records of one problem and base: the base `record`'s own, then its arms' (from
    `arm_records`, by key)."""
    boundary = record.boundary
    sources = []
    if record.action.kind == TOOL and boundary is not None:
        sources.append(_Source(record, record.generated_ids[boundary:]))
    for arm in ctx.arms_of(record.condition):
        arm_record = arm_records.get(RecordKey(record.problem_id, arm.code, record.seed))
        if arm_record is not None and arm_record.action.kind == TOOL:
            after = list(ctx.prepared.splices[arm.code]) + arm_record.generated_ids
            sources.append(_Source(arm_record, after))
    return sources


def run_resolve_unit(
    ctx: UnitContext,
    seed: int,
    indices: Sequence[int],
    parts: dict[str, list[Record]],
) -> tuple[list[ResolutionRecord], UnitCounts]:
    """Resolve every TOOL record of the problems at `indices` (one seed).

    `parts` maps each base phase ('B', 'oracle_B') and 'arms' to the records of this chunk's
    unit. Returns the resolutions in canonical order (problems, then conditions) and the counts.
    """
    bases = {
        base: {record.problem_id: record for record in parts.get(base, [])} for base in ARM_BASES
    }
    arm_records = {RecordKey.of(record): record for record in parts.get("arms", [])}
    thinking_open = thinking_opens_after_result(ctx)
    requests, pending = [], []
    done: dict[tuple[str, str], ResolutionRecord] = {}
    for i in indices:
        for base in ARM_BASES:
            record = bases[base].get(ctx.prepared.problems[i].id)
            for request, group in resolve_requests(ctx, seed, i, record, arm_records, done):
                requests.append(request)
                pending.append(group)
    counts = UnitCounts()
    if requests:
        for group, outs in zip(pending, ctx.backend.fork_many(requests)):
            resolutions_of(ctx, group, outs, counts, thinking_open, done)
    return in_canonical_order(ctx, indices, done), counts


ResolveGroup = list  # (problem, source, tool output, prompt) per suffix of one fork request


def resolve_requests(
    ctx: UnitContext,
    seed: int,
    index: int,
    record: Record | None,
    arm_records: dict[RecordKey, Record],
    done: dict[tuple[str, str], ResolutionRecord],
) -> list[tuple[ForkRequest, ResolveGroup]]:
    """The fork requests resolving the TOOL records of one problem and base: the base's `record`
    (None when the plan has no such base) and its arms' (`arm_records`, by key).

    All share the prompt and the base's reasoning, whose ids are the requests' stem (as for the
    arms, arms.py `arm_request`). A call that is not continued goes straight into `done`."""
    problem = ctx.prepared.problems[index]
    if record is None:
        return []
    base = record.condition
    sources = tool_record_sources(ctx, record, arm_records)
    if not sources:
        return []
    reasoning = record.generated_ids[: record.boundary]
    prompt = list(ctx.prepared.prompts[index].for_base(base))
    prefix = prompt + reasoning
    stem, shared = len(reasoning) + 1, ctx.shared(base, prompt)  # as the base's arms (arms.py)
    limit = _context_limit(ctx)
    suffixes, params, group = [], [], []
    for source in sources:
        resolved = _prepare(ctx, problem, source, prefix, limit)
        if isinstance(resolved, ResolutionRecord):
            done[(problem.id, source.record.condition)] = resolved
            continue
        output, suffix = resolved
        suffixes.append(suffix)
        code = source.record.condition
        params.append(
            ctx.params(
                seed, problem.id, SEED_KEY_PREFIX + code, ctx.prepared.config.max_new_tokens_arm
            )
        )
        group.append((problem, source, output, prefix + suffix))
    if not suffixes:
        return []
    budget = ctx.prepared.config.max_new_tokens_arm
    shape = GroupShape.of(len(prefix), [len(x) for x in suffixes], [budget] * len(suffixes))
    if _fits(ctx, shape):
        return [(ForkRequest(prefix, suffixes, params, stem=stem, shared=shared), group)]
    # over the KV budget together: one request each (each fits, see _prepare)
    return [
        (ForkRequest(prefix, [suffix], [param], stem=stem, shared=shared), [one])
        for suffix, param, one in zip(suffixes, params, group)
    ]


def resolutions_of(
    ctx: UnitContext,
    group: ResolveGroup,
    outs: list[Completion],
    counts: UnitCounts,
    thinking_open: bool,
    done: dict[tuple[str, str], ResolutionRecord],
) -> None:
    """The resolutions of one fork request's completions, into `done` (counts into `counts`)."""
    for j, ((problem, source, output, prompt), out) in enumerate(zip(group, outs)):
        counts.add(out, shared=j == 0)
        done[(problem.id, source.record.condition)] = _resolved(
            ctx, problem, source, output, prompt, out, thinking_open
        )


def _fits(ctx: UnitContext, shape: GroupShape) -> bool:
    budget = ctx.prepared.config.max_batch_tokens
    return budget is None or batch_cost([shape]) <= budget


def _context_limit(ctx: UnitContext) -> int | None:
    return ctx.backend.context_limit


def _prepare(ctx, problem, source, prefix, limit):
    """(tool output, suffix ids), or the ResolutionRecord of a call that is not continued."""
    action = source.record.action
    try:
        output = ctx.prepared.toolbox.execute(problem, action.tool_name, action.arguments)
    except ToolCallError as exc:
        return _unresolved(ctx, problem, source, None, f"not executed: {exc}")
    try:
        suffix = ctx.prepared.family.continuation_ids(source.after_cut, output.name, output.text)
    except FamilyError as exc:  # the parser saw a call that the cut cannot find: keep the reason
        return _unresolved(ctx, problem, source, output, f"not continued: {exc}")
    needed = len(prefix) + len(suffix) + ctx.prepared.config.max_new_tokens_arm
    alone = GroupShape.of(len(prefix), [len(suffix)], [ctx.prepared.config.max_new_tokens_arm])
    if not _fits(ctx, alone):
        return _unresolved(
            ctx,
            problem,
            source,
            output,
            f"not continued: it needs {batch_cost([alone])} KV token slots, more than "
            f"--max-batch-tokens {ctx.prepared.config.max_batch_tokens}",
        )
    if limit is not None and needed > limit:
        return _unresolved(
            ctx,
            problem,
            source,
            output,
            f"not continued: the prompt ({len(prefix) + len(suffix)} tokens) and its budget need "
            f"{needed} positions, more than the model's context of {limit}",
        )
    return output, suffix


def _resolution(
    ctx,
    problem: Problem,
    source: _Source,
    output,
    *,
    unresolved: str | None = None,
    prompt: list[int] | None = None,
    out: Completion | None = None,
    action=None,
    grade=None,
) -> ResolutionRecord:
    """The one construction of a resolution: of a call not continued (`unresolved` says why;
    the call as the record states it, executed when there is an `output`), or of the turn `out`
    generated after the tool's `output` on `prompt`."""
    record = source.record
    continued = out is not None
    generated = list(out.token_ids) if continued else []
    return ResolutionRecord(
        problem_id=problem.id,
        task=ctx.prepared.task.name,
        condition=record.condition,
        seed=record.seed,
        source_sha256=record_sha256(record.to_json()),  # its stored line, rundir/records.py
        tool_name=output.name if continued else record.action.tool_name,
        arguments=output.arguments if continued else record.action.arguments,
        executed=output is not None,
        result_sha256=None if output is None else output.sha256,
        unresolved=unresolved,
        prompt_tokens=len(prompt) if continued else None,
        prompt_sha256=prompt_sha256(prompt) if continued else None,
        generated_ids=generated,
        text=ctx.prepared.family.decode(generated) if continued else "",
        finish_reason=out.finish_reason if continued else None,
        action=action,
        grade=grade,
    )


def _unresolved(ctx, problem: Problem, source: _Source, output, reason: str) -> ResolutionRecord:
    return _resolution(ctx, problem, source, output, unresolved=reason)


def _resolved(
    ctx, problem: Problem, source: _Source, output, prompt: list[int], out: Completion, open_: bool
) -> ResolutionRecord:
    generated = list(out.token_ids)
    # Read the turn as the family reads any commitment: after its final think-close. A turn that
    # starts outside the thinking block gets the close in front, so a direct answer counts.
    read = generated if open_ else list(ctx.prepared.family.think_close_ids) + generated
    tools = declared_tools(
        ctx.prepared.task, base_of(ctx.prepared.plan.condition(source.record.condition))
    )
    action = ctx.prepared.family.parse_action(
        read, out.finish_reason, tools=tools, is_answer=ctx.prepared.task.holds_answer
    )
    grade = ctx.prepared.task.grade(problem, action.answer) if action.kind == SELF else None
    return _resolution(
        ctx, problem, source, output, prompt=prompt, out=out, action=action, grade=grade
    )


def in_canonical_order(ctx, indices, done: dict) -> list[ResolutionRecord]:
    ordered = []
    for i in indices:
        for condition in ctx.prepared.plan.conditions:
            found = done.pop((ctx.prepared.problems[i].id, condition.code), None)
            if found is not None:
                ordered.append(found)
    return ordered
