"""The bandwidth floor of one decode step: the bytes the step must read, over the device's measured
read bandwidth. One definition, used by every benchmark that sets a step against it
(benchmarks/gpu_check.py, its engine and quant sections: benchmarks/benchkit/gpu/engine.py, benchmarks/benchkit/gpu/quant.py).

What a decode step reads from device memory, at the least:

- **every weight that a token's forward multiplies by**: each linear layer (as stored: a quantised
  layer's packed weight and scales), the norms, and the LM head. Not the input embedding tables
  (`nn.Embedding`, Gemma 4's per-layer table too): a step gathers one row per token from them,
  which is nothing beside the rest. With tied embeddings the LM head *is* the input table, and
  the LM head reads it whole, so a table whose storage the LM head shares is counted (once);
- **the KV each layer's attention reads**: per layer, K and V of every slot the step's rows see
  (`kv_heads x head_dim x 2` values of the cache dtype per slot). A prefix shared by a group of
  rows and read once for all of them (the engine's cascade) counts once; the caller says how many
  distinct slots the step reads. A sliding-window layer reads at most `window` slots per row.
  Gemma 4's KV-shared layers read the KV of an earlier layer again: a second read, so they count.

The bandwidth is a device-to-device copy's: a copy of N bytes reads N and writes N, so its
bytes moved per second are `2 N / t`, and a step that reads B bytes takes at least
`B / (2 N / t)`: `copy_bandwidth` returns the `2 N / t` and `floor_seconds` divides by it as it is.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from nudgeability.engine.kv.layers import activation_dtype, layer_kv_widths


@dataclass(frozen=True)
class StepBytes:
    """Bytes one decode step reads: weights and KV."""

    weights: int
    kv: int

    @property
    def total(self) -> int:
        return self.weights + self.kv


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    return (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())


def weight_read_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights a decode step reads (module docstring): every parameter and buffer,
    each storage once, less the embedding tables that the LM head does not share, and what a
    module holding its weight elsewhere declares (`read_bytes`)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)  # a head kept in oneDNN's layout has none
    head_storage = _storage_key(weight) if weight is not None else None
    lookups = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            key = _storage_key(module.weight)
            if key != head_storage:
                lookups.add(key)
    seen: dict[tuple[int, int], int] = {}
    for tensor in list(model.parameters()) + list(model.buffers()):
        key = _storage_key(tensor)
        if key not in lookups:
            seen[key] = tensor.untyped_storage().nbytes()
    # a module that keeps its weight outside parameters and buffers says what it reads
    # (engine/invariant/cpu/reordered.py: oneDNN's layout)
    held = sum(getattr(module, "read_bytes", 0) for module in model.modules())
    return sum(seen.values()) + held


def kv_slot_bytes(model: torch.nn.Module, element_size: int) -> int:
    """Bytes of K and V one token slot takes in the KV pool, over the layers that store KV."""
    return sum(w for w, _, stores in layer_kv_widths(model) if stores) * element_size


def kv_read_bytes(model: torch.nn.Module, element_size: int, slots: int, rows: int) -> int:
    """Bytes of K and V a step of `rows` rows reads when they see `slots` distinct slots in all:
    full layers read every slot, a sliding-window layer at most `window` per row."""
    total = 0
    for width, window, _ in layer_kv_widths(model):
        seen = slots if window is None else min(slots, rows * window)
        total += width * seen * element_size
    return total


def step_bytes(model: torch.nn.Module, slots: int, rows: int, kv_element_size: int) -> StepBytes:
    """What one decode step of `rows` rows over `slots` distinct KV slots reads."""
    return StepBytes(weight_read_bytes(model), kv_read_bytes(model, kv_element_size, slots, rows))


def floor_seconds(read_bytes: int, copy_bytes_per_s: float) -> float:
    """The least time to read `read_bytes` at the traffic rate of a copy (`copy_bandwidth`)."""
    return read_bytes / copy_bytes_per_s


def copy_bandwidth(device, gib: float = 2.0, repeats: int = 5) -> float:
    """Bytes moved per second (read + write) by a device-to-device copy of `gib` GiB, the median
    of `repeats` copies after one warm-up (CUDA events on CUDA, the wall clock elsewhere)."""
    device = torch.device(device)
    n = max(1, int(gib * 2**30) // 4)
    src = torch.empty(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(repeats + 1):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize(device)
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        if i:  # the first copy maps pages and warms the caches
            times.append(seconds)
    return 2 * n * 4 / statistics.median(times)


def step_floor_s(model: torch.nn.Module, slots: int, rows: int, copy_bytes_per_s: float) -> float:
    """The floor of one decode step of `rows` rows over `slots` distinct KV slots, the KV in the
    model's dtype, at the traffic rate of a copy (`copy_bandwidth`): the benchmarks' one floor."""
    size = activation_dtype(model).itemsize
    return floor_seconds(step_bytes(model, slots, rows, size).total, copy_bytes_per_s)
