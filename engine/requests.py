"""Turning what a caller submits into groups and rows, and refusing what cannot run.

A `generate` prompt is a group whose own run is the prompt but its last token, with one row whose
suffix is that last token (`GroupShape.of`: an empty suffix borrows the prefix's last token). A
`ForkRequest` is a group whose run is the prefix, with one row per suffix. A `shared` start of the
prefix is a run of its own, one for all live requests with the same tokens, and the rest of the
prompt is computed by one row continuing it: the lone row of a generate prompt (the rest joins
its suffix), the stem row of a fork with a `stem` (the rest joins the stem), or else a row of its
own whose run the arms read. A `stem` is computed as one row continuing the segments before it
(exactly as the base computed it); the fork group reads them all as segments. A stem inside a
`trunk` is a view of the one trunk run that all live forks of the same base share (trunks.py).
"""

from __future__ import annotations

from nudgeability.engine import trunks
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.sampling.sampler import uniform_stream
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.engine.scheduling.group_shape import GroupShape
from nudgeability.engine.sequence import ForkRequest, Group, Row, Run, View, sources


class Builder:
    """Numbers groups and rows in submission order (the scheduler's tie-breaker everywhere), and
    keeps the shared runs that live requests can reuse, by their tokens."""

    def __init__(self):
        self._groups = 0
        self._rows = 0
        self._shared: dict[tuple[int, ...], Run] = {}
        self.trunks = trunks.Trunks()
        self.made: list[Run] = []

    def run(self, tokens: list[int], offset: int) -> Run:
        run = Run(tokens, offset)
        self.made.append(run)
        return run

    def group(self, segments: list[Run]) -> Group:
        """A group reading `segments`; it prefills the first one if nothing else will."""
        own = None
        if segments and not segments[0].owned:
            own = segments[0]
            own.owned = True
        group = Group(self._groups, segments, own)
        self._groups += 1
        for run in sources(segments):
            run.holders += 1
        return group

    def discard(self, groups: list[Group]) -> None:
        """Let go of what `groups` (a refused request's, never scheduled) hold, so that no later
        request counts on a shared start or a trunk that nothing will compute."""
        for group in groups:
            for run in sources(group.segments):
                run.holders -= 1
            for row in group.rows:
                if row.copy_from is not None:
                    row.copy_from[0].pins -= 1
                    row.copy_from = None

    def prompt(self, tokens: list[int], shared: int, params, groups: list) -> list[Run]:
        """The segments of a prompt: one run, or a shared run and the rest computed as a row
        continuing it (a group appended to `groups`)."""
        if not shared:
            return [self.run(tokens, 0)]
        key = tuple(tokens[:shared])
        run = self._shared.get(key)
        if run is None or run.holders == 0:
            run = self._shared[key] = self.run(list(key), 0)
        if shared == len(tokens):
            return [run]
        rest = self.run(tokens[shared:], shared)
        rest.owned = True  # computed by its row
        group = self.group([run])
        self.row(group, tokens[shared:], params, samples=False, stem=rest)
        groups.append(group)
        return [run, rest]

    def row(self, group: Group, suffix: list[int], params: SamplingParams, **kwargs) -> Row:
        row = Row(self._rows, group, list(suffix), params, **kwargs)
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
    base: Row | None,
    return_logits: bool,
) -> tuple[list[Group], list[Row]]:
    """The groups of one fork request and its arm rows.

    The prefix becomes a chain of segments: a `shared` run (one per distinct tokens among the
    live requests), then the `stem` computed (or copied from `reuse`) as one row continuing it;
    the rest of the prompt between them joins the stem, or the suffix of a lone arm, or else is a
    run computed by a row of its own. A prefix with neither is one run that the fork group
    prefills itself, as before. With a `trunk`, that row computes (or copies) the whole trunk,
    and the fork reads a `View` of its stem; a later fork of the same trunk while it is live
    reads its own view of it and the same segments before it, and makes no row (trunks.py).
    """
    shape = GroupShape.of(
        len(request.prefix_ids),
        [len(s) for s in request.suffixes],
        [p.max_new_tokens for p in params],
    )
    prefix, suffixes = shape.split(list(request.prefix_ids), [list(s) for s in request.suffixes])
    stem = max(0, request.stem - shape.borrowed)
    cut = len(prefix) - stem
    shared = min(request.shared, cut)
    if 0 < shared < cut and (stem or len(suffixes) == 1):
        # The rest of the prompt goes to the one row that continues the shared start anyway (the
        # stem row, or a lone arm: a generate prompt), into that row's own slots. A run of its
        # own would end in a part-filled block per prompt on top of the row's (benchmarks/batching.py, peak
        # KV); and a base's stem then starts where the base's row does, so `reuse` copies it.
        if not stem:
            suffixes = [prefix[shared:] + suffixes[0]]
            prefix = prefix[:shared]
        cut = shared
        stem = len(prefix) - cut
    elif base is not None and 0 < shared < cut:
        # No stem is left (an empty arm borrowed the prompt's last token) and the base's prompt
        # after the shared start lies in its row's own blocks, not in a run: compute it again.
        base = None
    # Where each arm's own suffix starts in the row's context (after tokens borrowed from the
    # prefix); an arm scoring from 0 needs the hidden state at the prefix's last position.
    starts = [len(s) - len(own) for s, own in zip(suffixes, request.suffixes)]
    keep_last = any(
        p.score_suffix and own and k == 0 for p, own, k in zip(params, request.suffixes, starts)
    )
    if keep_last and stem:
        # A copied stem is never run through the model here, so its last hidden state does not
        # exist; computing it again gives the same KV bits (engine/README.md, *A stem*).
        base = None
    # A trunk keeps no hidden state at a view's end: an arm scoring from there needs its own stem.
    tokens = trunks.trunk_tokens(request, cut) if request.trunk and stem and not keep_last else None
    key = trunks.key_of(prefix[:cut], shared, tokens) if tokens else None
    groups: list[Group] = []
    made = builder.made = []  # the runs this request creates (what its prefill computes)
    segments = _base_segments(base, prefix[:cut], prefix[cut:]) if base is not None else None
    if base is not None and tokens:
        trunks.check_base_trunk(base.context, tokens)
    trunk = builder.trunks.find(key) if key else None
    if trunk is not None:  # a live trunk of the same base: read it, compute nothing
        segments, base = trunk.segments + [View(trunk.run, stem)], None
    elif segments is None:  # no base, or its KV is gone: compute the prompt's segments
        base = None
        segments = builder.prompt(prefix[:cut], shared, params[0], groups)
    if keep_last and not stem:  # before any group holds the run: a refusal leaves nothing held
        _keep_last_hidden(segments[-1], made)
    if stem and trunk is None:
        run_ids = tokens or prefix[cut:]  # the whole trunk, or the stem alone
        stem_run = builder.run(run_ids, cut)
        stem_run.keep_last = keep_last
        stem_group = builder.group(segments)
        stem_row = builder.row(stem_group, run_ids, params[0], samples=False, stem=stem_run)
        if base is not None:
            stem_row.copy_from = (base, len(run_ids))
            base.pins += 1
        groups.append(stem_group)
        if tokens:
            builder.trunks.add(key, stem_run, segments)
        segments = segments + [View(stem_run, stem) if tokens else stem_run]
    group = builder.group(segments)
    copied = segments[-1].source.length if base is not None and stem else 0
    group.computed = sum(r.length for r in sources(segments) if r in made) - copied
    rows = builder.arms(group, suffixes, params, return_logits)
    for row, own, k in zip(rows, request.suffixes, starts):
        if row.params.score_suffix:
            row.suffix_scores, row.scored_from = [float("nan")] * len(own), k
    return groups + [group], rows


def _keep_last_hidden(run: Run, made: list[Run]) -> None:
    """Have the forward that computes `run`'s last token keep its hidden state; refuse a shared
    start that another request computed already without keeping it."""
    if run not in made and run.complete and run.last_hidden is None:
        raise EngineInputError(
            "score_suffix: the prefix is a shared start another request already computed, so "
            "its last hidden state is gone; give a `shared` shorter than the prefix"
        )
    run.keep_last = True


def _base_segments(base: Row, prompt_ids: list[int], stem_ids: list[int]):
    """The segments a fork shares with the base it reuses (None when the base's KV is gone: the
    fork then computes them again, with the same result); refuses a base whose tokens differ."""
    segments = base.group.segments
    if [t for s in segments for t in s.token_ids] != prompt_ids:
        raise EngineInputError(
            "reuse: the prefix before the stem is not the reused sequence's prompt (all but its "
            "last token)"
        )
    if base.context[: len(stem_ids)] != stem_ids:
        raise EngineInputError(
            f"reuse: the stem ({len(stem_ids)} tokens) is not the reused sequence's last prompt "
            "token and the tokens it has generated so far"
        )
    return list(segments) if all(s.start is not None for s in segments) else None


def per_item(params, count: int, what: str) -> list[SamplingParams]:
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count or not all(isinstance(p, SamplingParams) for p in params):
        raise EngineInputError(
            f"give one SamplingParams, or a list of {count} (one per {what}); got {len(params)}"
        )
    return params


def check_positive(**options: int | None) -> None:
    """Refuse the first of the engine's `options` that is given (not None) and below 1."""
    for name, value in options.items():
        if value is not None and value < 1:
            raise EngineInputError(f"{name} must be positive, got {value}")


def check_prompts(prompts, params, vocab_size: int, tokenizer) -> list[SamplingParams]:
    """Refuse `Engine.generate`'s prompts or params where they cannot run; one params per prompt."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise EngineInputError("generate() needs a non-empty list of prompts (lists of token ids)")
    per = per_item(params, len(prompts), "prompt")
    for i, prompt in enumerate(prompts):
        check_ids(prompt, f"prompt {i}", False, vocab_size)
    check_stop_strings(per, tokenizer)
    return per


def per_prompt(shared, count: int) -> list[int]:
    """`generate`'s `shared`: one count for every prompt, or a list with one per prompt."""
    starts = [shared] * count if isinstance(shared, int) else list(shared)
    if len(starts) != count:
        raise EngineInputError(
            f"give one shared count, or a list of {count} (one per prompt); got {len(starts)}"
        )
    return starts


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


def check_fork(request: ForkRequest, engine, where: str) -> None:
    """Refuse a fork `engine` cannot run, naming the request (`where`) and the field at fault."""
    check_ids(request.prefix_ids, f"{where}prefix", False, engine.vocab_size)
    if not isinstance(request.suffixes, (list, tuple)) or not request.suffixes:
        raise EngineInputError(f"{where}the suffix list is empty: give at least one arm")
    per = per_item(request.params, len(request.suffixes), "suffix")
    check_stop_strings(per, engine.tokenizer, where)
    for j, suffix in enumerate(request.suffixes):
        check_ids(suffix, f"{where}suffix {j}", True, engine.vocab_size)
    if not 0 <= request.stem <= len(request.prefix_ids):
        raise EngineInputError(f"{where}stem {request.stem} is not within the prefix")
    if not 0 <= request.shared <= len(request.prefix_ids) - request.stem:
        raise EngineInputError(
            f"{where}shared {request.shared} is not within the prefix before its stem"
        )
    trunks.check_trunk(request, engine.runner.max_positions, where)
    if request.trunk:
        check_ids(request.trunk_ids, f"{where}trunk_ids", False, engine.vocab_size)
    for j, (suffix, params) in enumerate(zip(request.suffixes, per)):
        _check_context(
            len(request.prefix_ids) + len(suffix) + params.max_new_tokens, engine, where, j
        )


def _check_context(needed: int, engine, where: str, arm: int) -> None:
    limit = engine.runner.max_positions
    if limit is not None and needed > limit:
        raise EngineInputError(
            f"{where}arm {arm}: prefix + suffix + max_new_tokens = {needed} tokens exceeds the "
            f"model's context of {limit} (max_position_embeddings); shorten the input or "
            "max_new_tokens"
        )


def eos_ids(model, tokenizer) -> set[int]:
    """EOS ids as HF generate() uses them: the generation config's, else the model config's."""
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if eos is not None:
            return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        return {int(tokenizer.eos_token_id)}
    return set()


def pad_id(model, tokenizer, eos_ids: set[int]) -> int:
    # Pad tokens are never attended to; any valid id will do.
    for candidate in (
        getattr(model.config, "pad_token_id", None),
        getattr(tokenizer, "pad_token_id", None),
    ):
        if candidate is not None:
            return int(candidate)
    return min(eos_ids) if eos_ids else 0
