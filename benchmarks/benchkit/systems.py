"""The systems benchmarks/batching.py runs side by side, each on the same sequences, each returning a
`Run`: wall time, the generated tokens, and what it can say about its rows and its KV.

- `engine`: this engine (continuous batching over the block pool), with a row budget and a KV
  pool, the prompts' common start shared or not;
- `hf_batch`: HF `generate_batch` (paged cache, block sharing on), with the same KV memory and
  row budget;
- `hf_padded`: HF `generate()` in left-padded batches of 16;
- `llama_server`: llama.cpp's `llama-server` where it is built (servers.py).
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch
from transformers import ContinuousBatchingConfig, GenerationConfig

from nudgeability.engine import Engine, ForkRequest, SamplingParams
from nudgeability.models.smollm2 import find_gguf

from .servers import free_port, start


@dataclass
class Run:
    wall: float
    tokens: list[list[int]]  # one list per sequence, in the order given
    rows_per_step: list[int] = field(default_factory=list)  # rows that chose a token, per step
    queued_rows: list[int] = field(default_factory=list)  # rows per step while work waited
    peak_kv_bytes: int | None = None  # KV held at once
    live_at_peak_bytes: int | None = None  # KV of the tokens still needed at that moment
    kv_within_target: bool | None = None  # every step: held <= 1.15 x live + one block per row
    preemptions: int = 0
    note: str = ""

    @property
    def generated(self) -> int:
        return sum(len(t) for t in self.tokens)


def _params(budgets: list[int], stop_ids, ignore_eos: bool, cls=SamplingParams) -> list:
    return [
        cls(max_new_tokens=b, stop_token_ids=tuple(stop_ids), ignore_eos=ignore_eos)
        for b in budgets
    ]


def run_engine(model, tok, work, *, kv: int, rows: int, shared: int = 0) -> Run:
    """`work`: ("generate", prompts, budgets, stop_ids, ignore_eos) or ("fork", requests, ...);
    `shared`: the prompts' common start, stored and computed once (`ForkRequest.shared`)."""
    kind, items, budgets, stop_ids, ignore_eos = work
    engine = Engine(model, tok, max_batch_tokens=kv, max_rows=rows, trace=True)
    t0 = time.perf_counter()
    if kind == "generate":
        outs = engine.generate(items, _params(budgets, stop_ids, ignore_eos), shared=shared)
        tokens = [o.token_ids for o in outs]
    else:
        requests = [
            ForkRequest(p, s, _params(b, stop_ids, ignore_eos), shared=shared)
            for (p, s), b in zip(items, budgets)
        ]
        tokens = [o.token_ids for arms in engine.fork_many(requests) for o in arms]
    wall = time.perf_counter() - t0
    trace = engine.stats.trace
    slot = engine.pool.slot_bytes()
    block = engine.block_size * slot
    peak = max(trace, key=lambda r: r.kv_blocks)
    within = all(
        r.kv_blocks * block <= 1.15 * r.live_tokens * slot + r.running * block for r in trace
    )
    return Run(
        wall=wall,
        tokens=tokens,
        rows_per_step=[r.rows for r in trace if r.rows],
        queued_rows=[r.rows for r in trace if r.rows and r.waiting],
        peak_kv_bytes=peak.kv_blocks * block,
        live_at_peak_bytes=peak.live_tokens * slot,
        kv_within_target=within,
        preemptions=engine.stats.preemptions,
    )


def run_hf_batch(model, tok, work, *, kv: int, rows: int, page: int = 256) -> Run:
    """HF `generate_batch` with a paged cache of about `kv` token slots, `rows` requests per
    batch, block sharing on. One budget for all (HF's API takes one generation config)."""
    kind, items, budgets, stop_ids, ignore_eos = work
    prompts = items if kind == "generate" else [p + s for p, suffixes in items for s in suffixes]
    flat = budgets if kind == "generate" else [b for group in budgets for b in group]
    if len(set(flat)) != 1:
        raise ValueError("HF generate_batch runs one budget for every request")
    config = GenerationConfig(
        max_new_tokens=flat[0],
        do_sample=False,
        eos_token_id=None if ignore_eos else list(stop_ids),
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
    )
    cb = ContinuousBatchingConfig(
        page_size=page,
        num_blocks=-(-kv // page) + 1,
        max_batch_tokens=2048,
        max_requests_per_batch=rows,
        allow_block_sharing=True,
    )
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate_batch(
            prompts, generation_config=config, continuous_batching_config=cb, progress_bar=False
        )
    wall = time.perf_counter() - t0
    tokens = [list(r.generated_tokens) for r in out.values()]
    return Run(wall=wall, tokens=tokens, note=f"{cb.num_blocks} pages of {page} slots allocated")


def run_hf_padded(model, tok, work, *, batch: int = 16) -> Run:
    """HF `generate()` on left-padded batches of `batch` prompts (bases only)."""
    kind, prompts, budgets, stop_ids, ignore_eos = work
    if kind != "generate" or len(set(budgets)) != 1:
        raise ValueError("padded generate() runs the bases, one budget for all")
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    stops = set(stop_ids)
    tokens, rows = [], []
    t0 = time.perf_counter()
    for b0 in range(0, len(prompts), batch):
        chunk = prompts[b0 : b0 + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=budgets[0],
                do_sample=False,
                eos_token_id=None if ignore_eos else list(stop_ids),
                pad_token_id=pad,
            )
        steps = out.shape[1] - width
        rows += [len(chunk)] * steps
        for row in out[:, width:].tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
            tokens.append(row[:cut] if not ignore_eos else row)
    wall = time.perf_counter() - t0
    return Run(wall=wall, tokens=tokens, rows_per_step=rows, note="rows padded, finished rows kept")


# ----- (e) llama.cpp's llama-server ------------------------------------------------------------
# llama.cpp's `llama-server` as a throughput reference for `batching.py`, on its own arithmetic:
# the embedded SmolLM2 GGUF (Q4_1 weights, as stored), `-np` slots over one unified KV cache,
# continuous batching and its prompt cache (`cache_prompt`). Every sequence is one `/completion`
# request of token ids, sent `slots` at a time; greedy (`top_k` 1).
LLAMA_SERVER = Path(os.environ.get("LLAMA_SERVER", "/work/tools/llama-server/bin/llama-server"))


def run_llama_server(work, *, slots: int, threads: int) -> Run:
    """`work` as `run_engine` takes it. Tokens are cut at the family's stop ids on the client
    (the server itself stops at its vocabulary's end-of-generation tokens)."""
    kind, items, budgets, stop_ids, ignore_eos = work
    prompts = items if kind == "generate" else [p + s for p, suffixes in items for s in suffixes]
    flat = budgets if kind == "generate" else [b for group in budgets for b in group]
    per_slot = max(map(len, prompts)) + max(flat) + 16
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [str(LLAMA_SERVER), "-m", str(find_gguf()), "--host", "127.0.0.1"]
    command += [
        "--port",
        str(port),
        "-np",
        str(slots),
        "-kvu",
        "-c",
        str(slots * per_slot),
        "-t",
        str(threads),
    ]
    stops = set(stop_ids)
    with tempfile.TemporaryDirectory() as tmp:
        process, _ = start(command, port, Path(tmp) / "llama-server.log")
        try:
            with httpx.Client(timeout=None, limits=httpx.Limits(max_connections=slots)) as client:

                def complete(i: int, warm_up: bool = False) -> list[int]:
                    body = {
                        "prompt": prompts[i][:8] if warm_up else prompts[i],
                        "n_predict": 1 if warm_up else flat[i],
                        "temperature": 0.0,
                        "top_k": 1,
                        "samplers": ["top_k"],
                        "cache_prompt": True,
                        "ignore_eos": ignore_eos,
                        "return_tokens": True,
                    }
                    answer = client.post(f"{url}/completion", json=body)
                    answer.raise_for_status()
                    tokens = list(answer.json()["tokens"])
                    if ignore_eos:
                        return tokens
                    cut = next((k + 1 for k, t in enumerate(tokens) if t in stops), len(tokens))
                    return tokens[:cut]

                complete(0, warm_up=True)  # first-request costs are not counted
                t0 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=slots) as pool:
                    tokens = list(pool.map(complete, range(len(prompts))))
                wall = time.perf_counter() - t0
        finally:
            process.terminate()
            process.wait(timeout=30)
    return Run(
        wall=wall,
        tokens=tokens,
        note=f"Q4_1 GGUF (its own arithmetic), -np {slots}, unified KV, prompt cache",
    )
