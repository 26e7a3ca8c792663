"""The engine: submit sequences and fork groups at any time, and step until they finish.

    engine = Engine(model, tokenizer)
    arms = engine.fork(prefix_ids, [suffix_a, suffix_b, ...], SamplingParams(max_new_tokens=48))
    outs = engine.generate([prompt_1, prompt_2, ...], SamplingParams(max_new_tokens=256))

    base = engine.submit_generate(prompt, params)          # streaming: submit while others run,
    while engine.busy:                                     # step, collect what finished
        for ref, completion in engine.step(): ...

Each `step()` is: the scheduler decides which tokens run (`scheduling/scheduler.py`), one forward computes
them (`scheduling/step_layout.py`, `attention/shared_prefix_attention.py`), the rows that finished their context
choose a token and stop where they should (`outputs.py`). A step reads the device once: the
chosen tokens. `generate`, `fork` and `fork_many` submit their work and step until it is done.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from nudgeability.engine import requests as req
from nudgeability.engine.attention.static_dispatch import StaticDecodeDispatch
from nudgeability.engine.engine_stats import EngineStats, account
from nudgeability.engine.errors import EngineInputError
from nudgeability.engine.invariant.cuda.mode import paged_tokens
from nudgeability.engine.kernel_checks import check_before_run
from nudgeability.engine.kv.kv_cache import PoolCache
from nudgeability.engine.kv.kv_pool import KVPool
from nudgeability.engine.kv.reservation import memory_pool, request_blocks, sizes_pool_from_memory
from nudgeability.engine.model_runner import ModelRunner
from nudgeability.engine.outputs import append_tokens, keep_hidden
from nudgeability.engine.sampling.choose import choose_tokens
from nudgeability.engine.sampling.sampling_params import SamplingParams
from nudgeability.engine.scheduling.scheduler import PREFILL_CHUNK, Scheduler
from nudgeability.engine.scheduling.step_layout import StepLayout
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import Completion, ForkRequest, Row, SequenceRef
from nudgeability.engine.step_run import StepRun
from nudgeability.engine.suffix_scores import needs_hidden, score_suffixes
from nudgeability.util.progress import progress_bar


@dataclass
class _Call:
    refs: list[SequenceRef] = field(default_factory=list)


class Engine:
    """Generation, forked splice arms and streamed work over any loaded HF causal LM.

    `max_batch_tokens` is the KV pool, in token slots (rounded up to whole blocks of
    `block_size`, plus three blocks for rounding); None sizes the pool for everything submitted
    and not finished, so that nothing waits for memory, and on CUDA takes
    `gpu_memory_utilization` (default 0.9) of the device memory free at start, less the largest
    step's activations, the graphs' memory pool and the self-checks' temporaries, allocated up
    front and never grown (`kv/reservation.py`). `max_rows` caps the rows that decode together
    (None: no cap). `prefill_tokens` bounds one step's prefill tokens; prefixes and contexts are
    prefilled in chunks of `scheduler.PREFILL_CHUNK` positions (fewer when `prefill_tokens` is
    smaller: on CPU the same bits, `attention/cpu_attention.prefix_chunk`; on CUDA the prefixes'
    last bits change). `progress` shows a bar with prefill and decode tokens/s per call. `trace`
    keeps a `StepRecord` per step in `stats.trace`. `batch_invariant` pads every forward and
    LM-head call to the rows that keep a sequence's logits independent of the batch
    (`model_runner`, engine/README.md); False runs them at their natural row counts.
    `invariance="triton"` computes every matrix product with the batch-invariant Triton GEMMs
    (engine/invariant/cuda/; on CPU tensors under Triton's interpreter, for tests); by default
    a CPU run has the CPU construction and a CUDA run the library's (`model_runner.invariance_of`).
    `static_decode` (opt-in; on a GPU faster than the eager cascade, benchmarks/gpu_check.py)
    runs every step's single-token rows with fixed shapes, rows padded to a bucket (up to the row
    cap; with no `max_rows` the rows are capped at 512), one FlexAttention call per layer
    (`attention/static_decode.py`), the rest of a step that also prefills eagerly beside them;
    `cuda_graphs` (default: with it on CUDA) captures the buckets at the first step (`capture`),
    LM head and greedy argmax included, and replays them, each bucket's captured step checked
    once against the eager cascade before the run (`kernel_checks.py`). By default every
    step runs the eager cascade (`attention/shared_prefix_attention.py`; on CPU through
    engine/invariant/cpu/attention.py). `fused_layers` (CUDA, where Triton imports) runs a
    layer's norms, rotary and activation as Triton kernels (`fused/`), checked against the
    library's before the run (`fused/first_step.py`, `kernel_checks.py`).
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        *,
        max_batch_tokens: int | None = None,
        max_rows: int | None = None,
        gpu_memory_utilization: float | None = None,
        block_size: int = 16,
        progress: bool = False,
        prefill_tokens: int = 2048,
        trace: bool = False,
        batch_invariant: bool = True,
        static_decode: bool | None = None,
        cuda_graphs: bool | None = None,
        fused_layers: bool = True,
        invariance: str | None = None,
    ):
        req.check_positive(prefill_tokens=prefill_tokens, max_rows=max_rows, block_size=block_size)
        self.prefill_tokens = prefill_tokens
        self.runner = ModelRunner(model, batch_invariant, fused=fused_layers, invariance=invariance)
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_tokens = max_batch_tokens
        self.block_size = block_size
        self.progress = progress
        self.eos_ids = req.eos_ids(model, tokenizer)
        self.pad_id = req.pad_id(model, tokenizer, self.eos_ids)
        self.vocab_size = self.runner.vocab_size
        self.stats = EngineStats(trace=[] if trace else None)
        self.static_dispatch = StaticDecodeDispatch(
            self.runner, block_size, static_decode, cuda_graphs
        )
        self.max_rows = self.static_dispatch.row_cap(max_rows)
        self._builder = req.Builder()
        self._rows: dict[int, Row] = {}
        self._need_blocks = 0  # blocks all unfinished work could take (max_batch_tokens None)
        self.gpu_memory_utilization = gpu_memory_utilization
        layers = []
        if max_batch_tokens is not None:
            req.check_positive(max_batch_tokens=max_batch_tokens)
            self._pool_blocks = -(-max_batch_tokens // block_size) + 3
        elif sizes_pool_from_memory(self.runner.device):
            self._pool_blocks, layers = memory_pool(
                self.runner,
                vocab_size=self.vocab_size,
                prefill_tokens=prefill_tokens,
                rows=self.static_dispatch.head_rows(max_rows),
                block_size=block_size,
                fraction=gpu_memory_utilization,
                decode=self.static_dispatch,
            )
            # a budget from then on: the pool never grows (a growth would be an OOM on the device)
            self.max_batch_tokens = max(1, (self._pool_blocks - 3) * block_size)
        else:
            self._pool_blocks = 4
        self._new_pool(self._pool_blocks)
        self.pool.allocate(layers)
        self._captured = False  # the kernel checks and the graphs: at the first step, or `capture`

    def limit_rows(self, max_rows: int | None) -> None:
        """Cap the rows that decode together from now on (`max_rows` of the constructor)."""
        req.check_positive(max_rows=max_rows)
        cap = self.static_dispatch.row_cap(max_rows)  # buckets met later are captured on use
        self.max_rows = self.scheduler.max_rows = self.scheduler.lookahead = cap

    def capture(self) -> None:
        """Check the kernels and capture the buckets' graphs up to the row cap now, each graph
        checked (kernel_checks.py: on probe work, before the run); call it after `limit_rows`,
        else the first step does: no bucket above the cap is compiled."""
        self._captured = True
        with self.runner.on_device():
            check_before_run(self)

    @property
    def static_decode(self) -> bool:
        """Whether decode steps run with fixed shapes (`Engine(static_decode=True)`); False for
        good once the fixed-shape decode was refused or gave up (`attention/static_dispatch.py`)."""
        return self.static_dispatch.enabled

    def _new_pool(self, blocks: int) -> None:
        self.pool = KVPool(
            blocks,
            self.block_size,
            len(self.runner.layer_windows),
            self.runner.device,
            zero=self.static_decode,
        )
        self.scheduler = Scheduler(
            self.pool,
            max_rows=self.max_rows,
            max_step_tokens=self.prefill_tokens,
            chunk=min(PREFILL_CHUNK, self.prefill_tokens),
            reserve=self.max_batch_tokens is not None,
        )
        self.cache = PoolCache(self.pool, self.runner.layer_windows)

    # --- the one-call API ---------------------------------------------------------------------
    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams | list[SamplingParams],
        *,
        shared: int | list[int] = 0,
        return_logits=False,
    ) -> list[Completion]:
        """Generate from each prompt independently; returns one `Completion` per prompt, in order.
        `shared`: the prompts' first tokens that are a common start (`ForkRequest.shared`), one
        count for all or one per prompt; each prompt uses at most all but its last token."""
        per = req.check_prompts(prompts, params, self.vocab_size, self.tokenizer)
        starts = req.per_prompt(shared, len(prompts))
        refs = [
            self.submit_generate(p, sp, shared=min(k, len(p) - 1), return_logits=return_logits)
            for p, sp, k in zip(prompts, per, starts)
        ]
        return self._drain(refs)

    def fork(self, prefix_ids, suffixes, params, *, return_logits=False) -> list[Completion]:
        """Prefill `prefix_ids` once, then continue it with each suffix; one `Completion` per suffix."""
        return self.fork_many(
            [ForkRequest(prefix_ids, suffixes, params)], return_logits=return_logits
        )[0]

    def fork_many(
        self, requests: list[ForkRequest], *, return_logits=False
    ) -> list[list[Completion]]:
        """Several prefix groups (problems) run together; results per request, in order."""
        if not requests:
            raise EngineInputError("fork_many() needs at least one ForkRequest")
        for i, request in enumerate(requests):
            req.check_fork(request, self, f"request {i}: " if len(requests) > 1 else "")
        refs = [self.submit_fork(r, return_logits=return_logits, checked=True) for r in requests]
        flat = self._drain([ref for group in refs for ref in group])
        out, k = [], 0
        for group in refs:
            out.append(flat[k : k + len(group)])
            k += len(group)
        return out

    # --- the streaming API --------------------------------------------------------------------
    def submit_generate(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        shared: int = 0,
        retain=False,
        return_logits=False,
    ) -> SequenceRef:
        """Queue one prompt; it starts when rows and KV allow. `shared`: see `ForkRequest`.
        `retain` keeps its KV after it finishes, so that a later `ForkRequest(reuse=...)` can
        copy its stem (`release` it then)."""
        req.check_ids(prompt, "prompt", False, self.vocab_size)
        req.check_stop_strings([params], self.tokenizer)
        request = ForkRequest(list(prompt), [[]], [params], shared=shared)
        (ref,) = self.submit_fork(request, return_logits=return_logits, checked=True)
        row = self._rows[ref.id]
        row.retain, row.solo = retain, True
        return ref

    def submit_fork(
        self, request: ForkRequest, *, return_logits=False, checked=False
    ) -> list[SequenceRef]:
        """Queue one fork group (one ref per arm, in order); see `ForkRequest` for `stem`, `reuse`
        and `trunk`."""
        if not checked:
            req.check_fork(request, self, "")
        params = req.per_item(request.params, len(request.suffixes), "suffix")
        base = None
        if request.reuse is not None:
            base = self._rows.get(request.reuse.id)
            if base is None:
                raise EngineInputError(f"reuse: {request.reuse} is not a sequence of this engine")
        groups, rows = req.fork_groups(self._builder, request, params, base, return_logits)
        try:
            self._reserve(groups)
        except EngineInputError:
            self._builder.discard(groups)  # nothing may count on runs these groups were to compute
            raise
        for group in groups:
            self.scheduler.add(group)
        for row in rows:
            self._rows[row.id] = row
        return [SequenceRef(row.id) for row in rows]

    @property
    def busy(self) -> bool:
        """True while submitted sequences have not all finished."""
        return self.scheduler.busy

    def peek(self, ref: SequenceRef) -> list[int]:
        """The tokens a sequence has generated so far (it may still be running). A sequence that
        finished without `retain` is gone: its tokens are in the completion `step` returned."""
        row = self._rows.get(ref.id)
        if row is None:
            raise EngineInputError(
                f"peek: {ref} is not running or retained here (a finished sequence's tokens are "
                "in the completion step() returned; submit with retain=True to keep it)"
            )
        return list(row.token_ids)

    def release(self, ref: SequenceRef) -> None:
        """Let go of a finished sequence's retained KV."""
        row = self._rows.pop(ref.id)
        self.scheduler.release(row)

    def step(self) -> list[tuple[SequenceRef, Completion]]:
        """One step: schedule, run the model, postprocess; the sequences it finished.

        While the engine has work, the model runs the engine's attention: call the model's own
        forward between steps inside `engine.runner.own_attention()`."""
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        if not plan.row_chunks and not plan.prefix_chunks:
            raise RuntimeError(
                "the engine has work but could schedule none of it (KV pool too small?)"
            )
        with self.runner.on_device():  # a model on cuda:1 steps with cuda:1 current
            try:
                run = self._run(plan)
            except BaseException:
                self.runner.disengage()
                raise
            finished = self._postprocess(plan, run)
        account(self, plan, run, time.perf_counter() - t0)
        if not self.busy:
            self.runner.disengage()
        return finished

    # --- one step -------------------------------------------------------------------------------
    def _run(self, plan: StepPlan) -> StepRun:
        if not self._captured:
            self.capture()
        self.runner.engage()
        if needs_hidden(plan):  # the suffix scores read every token's state: one eager forward
            layout, hidden = self._run_eager(plan)
            return StepRun.of(layout, hidden, hidden=hidden)
        ran = self.static_dispatch.run(
            plan, self.pool, self.cache, self.runner.forward, self._run_eager, self.pad_id
        )
        return ran if ran is not None else StepRun.of(*self._run_eager(plan))

    def _run_eager(self, plan: StepPlan):
        layout = StepLayout.of(
            plan,
            self.block_size,
            self.runner.device,
            self.pad_id,
            self.runner.padded,
            paged=paged_tokens(self.runner),
        )
        self.cache.layout = layout
        with torch.inference_mode():
            hidden = self.runner.forward(self.cache, layout.input_ids, layout.positions)
        return layout, hidden

    def _postprocess(self, plan: StepPlan, run: StepRun) -> list[tuple[SequenceRef, Completion]]:
        self.scheduler.after_step(plan)
        if run.hidden is not None:  # SamplingParams.score_suffix
            score_suffixes(plan, run.hidden, self.runner.logits)
        rows = plan.sampling()
        if not rows:
            return []
        with torch.inference_mode():
            keep_hidden(rows, run.last)
            tokens, logits = choose_tokens(rows, run, self.runner)
        done = append_tokens(rows, tokens, logits, self.eos_ids, self.tokenizer)
        out = []
        for row in done:
            self.scheduler.finish(row)
            out.append((SequenceRef(row.id), row.completion(row.group.computed)))
            if not row.retain:
                del self._rows[row.id]
        return out

    # --- memory -----------------------------------------------------------------------------------
    def _reserve(self, groups) -> None:
        """Refuse a group that could never run; with no budget, grow the pool to hold all work."""
        total = request_blocks(groups, self.pool, self.max_batch_tokens, self._pool_blocks)
        # The last group (the fork, after its stem group) outlives the others and reads their
        # runs: it carries the request's reservation, which ends when it closes, so a stream that
        # never drains sizes the pool for its open work, not for all it was ever given.
        groups[-1].reserved = total
        scheduled = self.scheduler.waiting + self.scheduler.admitted
        self._need_blocks = sum(g.reserved for g in scheduled) + total
        if self.max_batch_tokens is None and self._need_blocks + 1 > self.pool.num_blocks:
            if not self.busy and self.pool.in_use == 0:
                self._new_pool(max(self._need_blocks + 1, 4))
            else:
                self.pool.grow(max(self._need_blocks + 1, 2 * self.pool.num_blocks))

    def _drain(self, refs: list[SequenceRef]) -> list[Completion]:
        """Step until every sequence in `refs` has finished; their completions, in order."""
        wanted = {ref.id for ref in refs}
        done: dict[int, Completion] = {}
        bar = progress_bar(len(refs), "generate", "seq", enabled=self.progress, leave=False)
        t0, tokens = time.perf_counter(), 0
        while len(done) < len(wanted):
            before = self.stats.token_forwards
            for ref, completion in self.step():
                if ref.id in wanted:
                    done[ref.id] = completion
                    bar.update(1)
            tokens += self.stats.token_forwards - before
            if self.progress:  # the loop is the hot path: no formatting when nobody looks
                bar.set_postfix(tok_s=f"{tokens / max(time.perf_counter() - t0, 1e-9):.0f}")
        bar.close()
        if not self.busy:
            self._need_blocks = 0
        return [done[ref.id] for ref in refs]
