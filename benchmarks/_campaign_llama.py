"""llama.cpp's `llama-server` as a throughput reference for `campaign.py`, on its own arithmetic:
the embedded SmolLM2 GGUF (Q4_1 weights, as stored), `-np` slots over one unified KV cache,
continuous batching and its prompt cache (`cache_prompt`). Every sequence is one `/completion`
request of token ids, sent `slots` at a time; greedy (`top_k` 1)."""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from _campaign_systems import Run
from remote_vs_local import free_port, start

from nudgeability.models.smollm2 import find_gguf

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
