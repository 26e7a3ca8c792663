"""The generation loop: prefill each prefix once, fork it into arms, decode the arms as one batch.

    engine = Engine(model, tokenizer)
    arms = engine.fork(prefix_ids, [suffix_a, suffix_b, ...], SamplingParams(max_new_tokens=48))
    outs = engine.generate([prompt_1, prompt_2, ...], SamplingParams(max_new_tokens=256))

Each batch runs three phases: the prefixes of all its groups (one padded forward, in chunks), the
suffixes of all its arms (one forward, packed back to back without padding), then one `step()` per
new token over the arms still running. A step reads the device once: the chosen tokens.
`generate` is the same machinery with one arm per group: the prompt is the prefix and the suffix
is empty, so the prompt's last token becomes the arm's input (`scheduler.GroupShape.of`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from nudgeability.engine.batch import Batch
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.fork_cache import ForkCache
from nudgeability.engine.model_runner import ModelRunner
from nudgeability.engine.progress import progress_bar
from nudgeability.engine.sampler import greedy, sample, token_uncertainty
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.scheduler import GroupShape, plan_batches
from nudgeability.engine.sequence import Completion, ForkRequest


@dataclass
class EngineStats:
    """Token-forwards actually computed since the engine was made (padding included)."""

    prefix_tokens: int = 0  # prefix-phase positions, padded
    suffix_tokens: int = 0  # suffix-prefill positions (packed: no padding)
    decode_tokens: int = 0  # single-token decode forwards, summed over rows
    forward_calls: int = 0
    peak_cache_bytes: int = 0  # largest KV cache of one batch
    prefill_seconds: float = 0.0  # prefix + suffix prefill wall time
    decode_seconds: float = 0.0  # decode-step wall time (each step ends in a host sync)

    @property
    def token_forwards(self) -> int:
        return self.prefix_tokens + self.suffix_tokens + self.decode_tokens


class Engine:
    """Batched generation and forked splice arms over any loaded HF causal LM.

    `max_batch_tokens` caps the KV token slots of one batch (see `scheduler.batch_cost`); None runs
    each call as a single batch. `progress` shows a bar with prefill and decode tokens/s.
    `prefill_tokens` bounds the tokens of one prefix-prefill forward (the prefixes are prefilled in
    chunks of positions, so that activation memory does not grow with the prefix length).
    `compile_decode` runs the decode step through `torch.compile(dynamic=True)`, meant to fuse the
    many small kernels of a decode step on a GPU; it is off by default because on CPU compiling
    alone takes minutes (about 100 s for a one-layer tiny model), which no short run pays back.
    `static_shapes` makes every decode step read all of a batch's suffix slots (unwritten ones
    are masked), so that the step's shapes stay fixed while the same rows run: what a CUDA graph
    of the step needs. It changes no token; on a CPU it only costs the extra slots.
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        max_batch_tokens: int | None = None,
        progress: bool = False,
        prefill_tokens: int = 2048,
        compile_decode: bool = False,
        static_shapes: bool = False,
    ):
        if prefill_tokens < 1:
            raise EngineInputError(f"prefill_tokens must be positive, got {prefill_tokens}")
        self.prefill_tokens = prefill_tokens
        self.runner = ModelRunner(model)
        self._decode_forward = (
            torch.compile(self.runner.forward, dynamic=True)
            if compile_decode
            else self.runner.forward
        )
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_tokens = max_batch_tokens
        self.progress = progress
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = _pad_id(model, tokenizer, self.eos_ids)
        self.vocab_size = self.runner.lm_head.weight.shape[0]
        self.static_shapes = static_shapes
        self.stats = EngineStats()

    # --- public API ---------------------------------------------------------------------------
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams | list[SamplingParams],
        *,
        return_logits=False,
    ) -> list[Completion]:
        """Generate from each prompt independently; returns one `Completion` per prompt, in order."""
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise EngineInputError(
                "generate() needs a non-empty list of prompts (lists of token ids)"
            )
        per = self._per_item(params, len(prompts), "prompt")
        for i, prompt in enumerate(prompts):
            self._check_ids(prompt, f"prompt {i}", allow_empty=False)
        self._check_stop_strings(per)
        groups = [(list(p), [([], sp)]) for p, sp in zip(prompts, per)]
        outs = [arms[0] for arms in self._run(groups, return_logits)]
        for out in outs:  # a prompt is one sequence: report all of it as its own prefill
            out.prefill_tokens += out.shared_prefill_tokens
            out.shared_prefill_tokens = 0
        return outs

    def fork(
        self,
        prefix_ids: list[int],
        suffixes: list[list[int]],
        params: SamplingParams | list[SamplingParams],
        *,
        return_logits=False,
    ) -> list[Completion]:
        """Prefill `prefix_ids` once, then continue it with each suffix; one `Completion` per suffix."""
        return self.fork_many(
            [ForkRequest(prefix_ids, suffixes, params)], return_logits=return_logits
        )[0]

    def fork_many(
        self, requests: list[ForkRequest], *, return_logits=False
    ) -> list[list[Completion]]:
        """Several prefix groups (problems) batched together; results per request, in order."""
        if not requests:
            raise EngineInputError("fork_many() needs at least one ForkRequest")
        groups = []
        for i, req in enumerate(requests):
            where = f"request {i}: " if len(requests) > 1 else ""
            self._check_ids(req.prefix_ids, f"{where}prefix", allow_empty=False)
            if not isinstance(req.suffixes, (list, tuple)) or not req.suffixes:
                raise EngineInputError(f"{where}the suffix list is empty: give at least one arm")
            per = self._per_item(req.params, len(req.suffixes), "suffix")
            self._check_stop_strings(per, where)
            for j, suffix in enumerate(req.suffixes):
                self._check_ids(suffix, f"{where}suffix {j}", allow_empty=True)
            groups.append((list(req.prefix_ids), [(list(s), p) for s, p in zip(req.suffixes, per)]))
        return self._run(groups, return_logits)

    # --- the loop -----------------------------------------------------------------------------
    def _run(self, groups, return_logits: bool) -> list[list[Completion]]:
        for g, (prefix, arms) in enumerate(groups):
            for j, (suffix, params) in enumerate(arms):
                self._check_context(len(prefix) + len(suffix) + params.max_new_tokens, g, j)
        shapes = [
            GroupShape.of(
                len(prefix), [len(s) for s, _ in arms], [p.max_new_tokens for _, p in arms]
            )
            for prefix, arms in groups
        ]
        results: list[list[Completion] | None] = [None] * len(groups)
        total = sum(len(arms) for _, arms in groups)
        bar = progress_bar(total, "generate", "seq", enabled=self.progress, leave=False)
        with torch.inference_mode(), self.runner.fork_attention():
            for batch_groups in plan_batches(shapes, self.max_batch_tokens):
                batch = Batch(
                    [groups[i] for i in batch_groups],
                    [shapes[i] for i in batch_groups],
                    self.runner.device,
                    self.eos_ids,
                    self.tokenizer,
                    return_logits,
                    static_shapes=self.static_shapes,
                )
                self._run_batch(batch, bar)
                for seqs_of, i in zip(_by_group(batch), batch_groups):
                    results[i] = [s.completion() for s in seqs_of]
        bar.close()
        return results

    def _run_batch(self, batch: Batch, bar) -> None:
        cache = ForkCache(self.runner.layer_windows, batch.num_rows, batch.suffix_capacity)
        t0 = time.perf_counter()
        if batch.p_max > 0:
            chunk = max(1, self.prefill_tokens // len(batch.prefixes))
            for ids, positions, cache.ctx in batch.prefix_chunks(self.pad_id, chunk):
                self.runner.forward(cache, ids, positions)
                self.stats.prefix_tokens += ids.numel()
                self.stats.forward_calls += 1
            cache.finish_prefix(batch.prefix_lengths)
        ids, positions, cache.ctx = batch.suffix_inputs()
        hidden = self.runner.forward(cache, ids, positions)
        last = hidden[0].index_select(0, batch.last_hidden_index())
        batch.keep_hidden(batch.active, last)
        self._sample_and_record(batch, batch.active, last)
        self.stats.suffix_tokens += ids.numel()
        self.stats.forward_calls += 1
        prefill_s = time.perf_counter() - t0
        self.stats.prefill_seconds += prefill_s
        bar.set_postfix(
            prefill_tok_s=f"{(batch.shared_prefix_tokens() + ids.numel()) / max(prefill_s, 1e-9):.0f}"
        )
        bar.update(batch.num_rows - len(batch.active))
        t0, decoded = time.perf_counter(), 0
        while not batch.done:
            running = len(batch.active)
            decoded += running
            self.step(batch, cache)
            if self.progress:  # the decode loop is the hot path: no formatting when nobody looks
                bar.update(running - len(batch.active))
                bar.set_postfix(
                    decode_tok_s=f"{decoded / max(time.perf_counter() - t0, 1e-9):.0f}",
                    running=len(batch.active),
                )
        self.stats.decode_seconds += time.perf_counter() - t0
        self.stats.peak_cache_bytes = max(self.stats.peak_cache_bytes, sum(cache.nbytes().values()))

    def step(self, batch: Batch, cache: ForkCache) -> None:
        """One decode step: schedule the running arms, run the model on one token each, postprocess."""
        rows = batch.active
        ids, positions, cache.ctx = batch.decode_inputs()
        hidden = self._decode_forward(cache, ids, positions)
        self._sample_and_record(batch, rows, hidden[:, -1])
        self.stats.decode_tokens += len(rows)
        self.stats.forward_calls += 1

    def _sample_and_record(self, batch: Batch, rows: list[int], hidden: torch.Tensor) -> None:
        logits = self.runner.logits(hidden)
        inputs = batch.sampling_inputs(rows)
        chosen = greedy(logits) if inputs is None else sample(logits, *inputs)
        # The step's one host read. Anything else computed per token on the device must join
        # this transfer rather than add its own.
        asked = batch.uncertainty_rows(rows)
        if asked is None:
            tokens = chosen.tolist()
        else:  # SamplingParams.token_stats: the summaries travel with the tokens
            logprob, entropy = token_uncertainty(logits[asked], chosen[asked])
            packed = torch.cat([chosen.double(), logprob.double(), entropy.double()]).tolist()
            n, k = len(rows), len(asked)
            tokens = [int(t) for t in packed[:n]]
            batch.record_uncertainty(rows, packed[n : n + k], packed[n + k :])
        batch.postprocess(rows, chosen, tokens, logits)

    # --- validation ---------------------------------------------------------------------------
    def _per_item(self, params, count: int, what: str) -> list[SamplingParams]:
        if isinstance(params, SamplingParams):
            return [params] * count
        params = list(params)
        if len(params) != count or not all(isinstance(p, SamplingParams) for p in params):
            raise EngineInputError(
                f"give one SamplingParams, or a list of {count} (one per {what}); got {len(params)}"
            )
        return params

    def _check_stop_strings(self, params: list[SamplingParams], where: str = "") -> None:
        # Stop strings are matched on decoded text, which needs the tokenizer.
        if self.tokenizer is None and any(p.stop_strings for p in params):
            raise EngineInputError(
                f"{where}stop_strings need a tokenizer: build the Engine with Engine(model, tokenizer), "
                "or use stop_token_ids"
            )

    def _check_ids(self, ids, what: str, allow_empty: bool) -> None:
        if not isinstance(ids, (list, tuple)):
            raise EngineInputError(f"{what} must be a list of token ids, got {type(ids).__name__}")
        if not ids and not allow_empty:
            raise EngineInputError(f"{what} is empty: it needs at least one token id")
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < self.vocab_size]
        if bad:
            raise EngineInputError(
                f"{what} holds {bad[0]!r}, not a token id in [0, {self.vocab_size})"
            )

    def _check_context(self, needed: int, group: int, arm: int) -> None:
        limit = self.runner.max_positions
        if limit is not None and needed > limit:
            raise EngineInputError(
                f"group {group}, arm {arm}: prefix + suffix + max_new_tokens = {needed} tokens exceeds the "
                f"model's context of {limit} (max_position_embeddings); shorten the input or max_new_tokens"
            )


def _by_group(batch: Batch):
    out = [[] for _ in batch.prefixes]
    for seq in batch.seqs:
        out[seq.group].append(seq)
    return out


def _eos_ids(model, tokenizer) -> set[int]:
    """EOS ids as HF generate() uses them: the generation config's, else the model config's."""
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if eos is not None:
            return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        return {int(tokenizer.eos_token_id)}
    return set()


def _pad_id(model, tokenizer, eos_ids: set[int]) -> int:
    # Pad slots are never attended to; any valid id will do.
    for candidate in (
        getattr(model.config, "pad_token_id", None),
        getattr(tokenizer, "pad_token_id", None),
    ):
        if candidate is not None:
            return int(candidate)
    return min(eos_ids) if eos_ids else 0
