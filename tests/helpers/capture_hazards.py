"""CUDA-graph hazards caught on CPU: the graphed decode step's Python run in a capture-like mode.

A CUDA graph replays its kernels on the addresses it saw at capture. So every tensor the captured
region reads must be a persistent buffer (the model's weights and buffers, the KV pool, the
`StaticDecode` buffers that `load()` rewrites in place) or be computed inside the region; and no
such buffer may be dropped or reallocated afterwards. `CaptureReads` (a `TorchDispatchMode`)
records every tensor each op of the region reads and which the region made itself;
`HazardCheckedGraphs` stands in for `graphed_decode.GraphedDecode` on CPU: it warms a bucket up
like the real one, runs the capture under `CaptureReads` (at the engine's start for every bucket,
`StaticDecodeDispatch.capture_all`, or on first use), and at every later step (after that step's
`load()`) checks that what the capture read is still the same persistent storage. The
"replay" is the eager forward: what the real graph would compute wrongly is what the checks flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field, is_dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_mask
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nudgeability.engine.attention.graphed_decode import with_greedy_head
from nudgeability.engine.invariant.cpu.cores import CORES


def _key(t: torch.Tensor) -> int | None:
    """A tensor's storage address (views share it); None for an empty tensor, and for oneDNN's
    opaque layout (on CPU a model weight's reordered copy, engine/invariant/cpu/weights.py: kept beside the
    weight, and never on the CUDA path a graph captures)."""
    if t.numel() == 0 or t.layout == torch._mkldnn:
        return None
    return t.untyped_storage().data_ptr()


class CaptureReads(TorchDispatchMode):
    """Every storage an op reads that no earlier op of the region produced, and host syncs."""

    def __init__(self):
        super().__init__()
        self.produced: set[int] = set()
        self.read: dict[int, str] = {}  # storage -> first op that read it
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            self.syncs.append(str(func))  # .item()/.tolist(): a host read inside the capture
        # lift_fresh takes a constant `torch.tensor(...)` just made by the region's own code
        inputs = (
            [] if func is torch.ops.aten.lift_fresh.default else tree_flatten((args, kwargs))[0]
        )
        for t in inputs:
            if isinstance(t, torch.Tensor):
                key = _key(t)
                if key is not None and key not in self.produced and key not in self.read:
                    self.read[key] = f"{func} {tuple(t.shape)} {t.dtype}"
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and _key(t) is not None:
                self.produced.add(_key(t))
        return out


def _tensors(obj, seen: dict[int, object], out: dict[int, str], where: str) -> None:
    """Storages reachable from `obj` through dicts, lists, tuples, dataclasses and block masks (`seen` keeps
    each object visited alive, so that no id is reused while it is consulted)."""
    if id(obj) in seen:
        return
    seen[id(obj)] = obj
    if isinstance(obj, torch.Tensor):
        key = _key(obj)
        if key is not None:
            out.setdefault(key, where)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _tensors(v, seen, out, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors(v, seen, out, f"{where}[{i}]")
    elif isinstance(obj, BlockMask):
        _tensors(list(obj.as_tuple(flatten=True)), seen, out, f"{where}.mask")
    elif is_dataclass(obj) and not isinstance(obj, type):  # the paged kernel's tables
        _tensors(vars(obj), seen, out, f"{where}.{type(obj).__name__}")


def persistent(model, pool, static) -> dict[int, str]:
    """Storage -> name of every tensor a captured decode step may read: the model's parameters
    and buffers, the pool's layers, and what the `StaticDecode` object holds."""
    out: dict[int, str] = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        out.setdefault(_key(t), f"model.{name}")
    seen: dict[int, object] = {}
    _tensors({"k": pool.k, "v": pool.v}, seen, out, "pool")
    _tensors(vars(static), seen, out, "static")
    out.pop(None, None)
    return out


@dataclass
class HazardCheckedGraphs:
    """`GraphedDecode`'s interface on CPU, with the capture run under `CaptureReads`; the step
    captured is the engine's (`graphed_decode.with_greedy_head`: forward, LM head, argmax)."""

    engine: object
    graphs: dict = field(default_factory=dict)  # bucket -> storages its capture read
    checked: set = field(default_factory=set)
    hazards: list[str] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # buckets in the order they were captured
    replays: int = 0

    @property
    def captures(self) -> int:
        return len(self.order)

    def step(self, cache, static):
        runner = self.engine.runner
        return with_greedy_head(runner.forward, runner.logits)(
            cache, static.input_ids, static.positions
        )

    def drop(self, bucket: int) -> None:
        self.graphs.pop(bucket, None)
        self.checked.discard(bucket)

    def capture(self, cache, static) -> None:
        model, pool = self.engine.model, cache.pool
        for _ in range(2):  # the warm-up GraphedDecode runs before it captures
            self.step(cache, static)
        before = persistent(model, pool, static)
        mode = CaptureReads()
        # a dispatch mode sees only its own thread's ops: the cores' shared pieces (CPU-only,
        # engine/invariant/cpu/cores.py) run on this one, as a CUDA graph's kernels run on one stream
        with CORES.one_thread(), mode:
            self.step(cache, static)
        self.order.append(static.rows)
        self.hazards += [f"host sync in capture: {s}" for s in mode.syncs]
        self.graphs[static.rows] = {k: before[k] for k in mode.read if k in before}
        self.hazards += [
            f"capture reads a tensor made outside it and not persistent: {op}"
            for k, op in mode.read.items()
            if k not in before
        ]

    def run(self, cache, static):
        if static.rows not in self.graphs:
            self.capture(cache, static)
        reads = self.graphs[static.rows]
        now = persistent(self.engine.model, cache.pool, static)
        self.hazards += [
            f"bucket {static.rows}: {name}, read by the capture, was dropped or reallocated"
            for k, name in reads.items()
            if k not in now
        ]
        self.replays += 1
        return self.step(cache, static)


def block_sparse_flex(
    q, k, v, block_mask=None, scale=None, enable_gqa=False, kernel_options=None
) -> torch.Tensor:
    """FlexAttention as the compiled kernel computes it, in plain ops (the eager HOP does not run
    under a dispatch mode): each tile of rows sees only the blocks its row of `kv_indices` lists
    (the first `kv_num_blocks`), and within them the keys `mask_mod` keeps."""
    rows, slots = q.shape[2], k.shape[2]
    q_block, kv_block = block_mask.BLOCK_SIZE
    counts = block_mask.kv_num_blocks[0, 0].long()
    indices = block_mask.kv_indices[0, 0].long()
    listed = (torch.arange(indices.shape[1], device=q.device)[None, :] < counts[:, None]).long()
    blocks = torch.zeros(indices.shape[0], -(-slots // kv_block), dtype=torch.long)
    blocks = blocks.scatter_add_(1, indices, listed) > 0
    tile = torch.arange(rows, device=q.device) // q_block
    block = torch.arange(slots, device=q.device) // kv_block
    allowed = blocks.index_select(0, tile).index_select(1, block)
    mask = create_mask(block_mask.mask_mod, 1, 1, rows, slots, device=q.device) & allowed
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
