"""Turning what a caller submits into groups and rows, and refusing what cannot run.

A `generate` prompt is a group whose own run is the prompt but its last token, with one row whose
suffix is that last token (`GroupShape.of`: an empty suffix borrows the prefix's last token). A
`ForkRequest` is a group whose run is the prefix, with one row per suffix. A request with a
`stem` is two groups: one computing the stem as a single row continuing the run (exactly as the
base computed it), and the fork group, which reads run and stem as two segments.
"""

from __future__ import annotations

from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.sampler import uniform_stream
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.scheduler import GroupShape
from nudgeability.engine.sequence import ForkRequest, Group, Run, Sequence


class Builder:
    """Numbers groups and rows in submission order (the scheduler's tie-breaker everywhere)."""

    def __init__(self):
        self._groups = 0
        self._rows = 0

    def group(self, segments: list[Run], own: Run | None) -> Group:
        group = Group(self._groups, segments, own)
        self._groups += 1
        for run in segments:
            run.holders += 1
        return group

    def row(self, group: Group, suffix: list[int], params: SamplingParams, **kwargs) -> Sequence:
        row = Sequence(self._rows, group, list(suffix), params, **kwargs)
        self._rows += 1
        group.rows.append(row)
        group.waiting.append(row)
        group.live += 1
        return row

    def arms(self, group: Group, suffixes, params: list[SamplingParams], return_logits: bool):
        rows = []
        for suffix, p in zip(suffixes, params):
            row = self.row(group, suffix, p)
            if return_logits:
                row.logits = []
            if p.token_stats:
                row.logprobs, row.entropies = [], []
            if not p.greedy:
                row.uniforms = uniform_stream(p, p.max_new_tokens).tolist()
            rows.append(row)
        return rows


def fork_groups(
    builder: Builder,
    request: ForkRequest,
    params: list[SamplingParams],
    base: Sequence | None,
    return_logits: bool,
) -> tuple[list[Group], list[Sequence]]:
    """The groups of one fork request (one, or a stem group and the fork group) and its arm rows."""
    shape = GroupShape.of(
        len(request.prefix_ids),
        [len(s) for s in request.suffixes],
        [p.max_new_tokens for p in params],
    )
    prefix, suffixes = shape.split(list(request.prefix_ids), [list(s) for s in request.suffixes])
    stem = max(0, request.stem - shape.borrowed)
    if stem == 0 and base is None:
        run = Run(prefix, 0)
        group = builder.group([run], run)
        return [group], builder.arms(group, suffixes, params, return_logits)
    cut = len(prefix) - stem
    run = _base_run(base, prefix[:cut], prefix[cut:]) if base is not None else None
    if run is None:
        base = None
        run = own = Run(prefix[:cut], 0)
    else:
        own = None
    if stem == 0:
        group = builder.group([run], own)
        return [group], builder.arms(group, suffixes, params, return_logits)
    stem_run = Run(prefix[cut:], cut)
    stem_group = builder.group([run], own)
    stem_row = builder.row(stem_group, prefix[cut:], params[0], samples=False, stem=stem_run)
    if base is not None:
        stem_row.copy_from = (base, stem)
        base.pins += 1
    group = builder.group([run, stem_run], None)
    return [stem_group, group], builder.arms(group, suffixes, params, return_logits)


def _base_run(base: Sequence, run_ids: list[int], stem_ids: list[int]) -> Run | None:
    """The run a fork shares with the base it reuses (None when the base's KV is gone: the fork
    then computes it again, with the same result); refuses a base whose tokens differ."""
    segments = base.group.segments
    if len(segments) != 1 or segments[0].token_ids != run_ids:
        raise EngineInputError(
            "reuse: the prefix before the stem is not the reused sequence's prompt (all but its "
            "last token)"
        )
    if base.context[: len(stem_ids)] != stem_ids:
        raise EngineInputError(
            f"reuse: the stem ({len(stem_ids)} tokens) is not the reused sequence's last prompt "
            "token and the tokens it has generated so far"
        )
    return segments[0] if segments[0].start is not None else None


def per_item(params, count: int, what: str) -> list[SamplingParams]:
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count or not all(isinstance(p, SamplingParams) for p in params):
        raise EngineInputError(
            f"give one SamplingParams, or a list of {count} (one per {what}); got {len(params)}"
        )
    return params


def check_ids(ids, what: str, allow_empty: bool, vocab_size: int) -> None:
    if not isinstance(ids, (list, tuple)):
        raise EngineInputError(f"{what} must be a list of token ids, got {type(ids).__name__}")
    if not ids and not allow_empty:
        raise EngineInputError(f"{what} is empty: it needs at least one token id")
    bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab_size]
    if bad:
        raise EngineInputError(f"{what} holds {bad[0]!r}, not a token id in [0, {vocab_size})")


def check_stop_strings(params: list[SamplingParams], tokenizer, where: str = "") -> None:
    # Stop strings are matched on decoded text, which needs the tokenizer.
    if tokenizer is None and any(p.stop_strings for p in params):
        raise EngineInputError(
            f"{where}stop_strings need a tokenizer: build the Engine with Engine(model, tokenizer), "
            "or use stop_token_ids"
        )
