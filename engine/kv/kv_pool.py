"""The KV pool: every attention layer's keys and values in one space of token slots, handed out in
fixed-size blocks.

Per layer that stores KV, the pool holds `k` and `v` as `[kv_heads, slots, head_dim]` (kv-head
major), allocated on the layer's first write (Gemma 4's layers differ in head count and size). A
slot index means the same token position in every layer, so one allocation serves them all.

Two kinds of allocation, from the two ends of the pool so that they fragment each other little:

- a **run**: consecutive blocks, taken lowest first, that hold one prefix (or stem) segment. Its
  keys are then a strided view `[1, kv, length, D]` of the pool, which the attention reads in
  place, once per step for all the arms of its group;
- a **block**: one block at a time for a sequence's own tokens (suffix and generated), taken
  highest first as the sequence grows, and read by a gather of its slots. A free block that was
  handed out before (its pages mapped) is taken before one never handed out.

Block 0 is never handed out: its slots take the writes of the pad tokens that keep every forward
at `ModelRunner.MIN_ROWS` rows. On CPU the storage is a private anonymous memory map of its own
(`_mapped`), not the C heap: pages that no block has touched cost no memory, and a storage let
go returns to the OS at once. From the heap (`torch.empty`) neither holds: measured on the demo
(benchmarks/workers_memory.py), the pool takes chunks that the needle's engine has freed, already
resident, and a grown-out storage stays resident as free heap. So the resident
KV follows the most blocks in use at once since the last grow (the lowest-first / highest-first
policy, and blocks taken again before fresh ones, keep the touched region close to that peak);
the attention then reads only written slots. On CUDA, and for the fixed-shape decode
(`static_decode.py`, whose kernel reads whole blocks), it is zeroed once, so that a slot never
written holds no NaN for a masked score to multiply.

On CUDA, with no explicit budget, the engine sizes the pool from the device's free memory at start
(`pool_blocks_for`, like vLLM's `--gpu-memory-utilization`) and allocates every layer up front
(`allocate`): the pool never grows, so no shape changes under the compiled and captured steps.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

SCRATCH_BLOCK = 0  # the pad tokens' slots; never handed out
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # the share of free device memory the pool may take
_HELD = bytes.maketrans(b"\x00\x01", b"\x01\x00")  # `_free` -> 1 where a block is held


def pool_blocks_for(
    free_bytes: int,
    slot_bytes: int,
    block_size: int,
    fraction: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    margin_bytes: int = 0,
) -> int:
    """Blocks of `block_size` slots of `slot_bytes` each that fit in `fraction` of `free_bytes`
    (the device's free memory once the weights are loaded) less `margin_bytes` (the activations
    of the largest step): `floor((fraction * free - margin) / (slot_bytes * block_size))`.
    ValueError when that leaves fewer than 2 blocks (the scratch block and one)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {fraction}")
    if slot_bytes < 1 or block_size < 1:
        raise ValueError(f"slot_bytes and block_size must be positive: {slot_bytes}, {block_size}")
    usable = int(fraction * free_bytes) - margin_bytes
    blocks = max(usable, 0) // (slot_bytes * block_size)
    if blocks < 2:
        raise ValueError(
            f"{fraction:.2f} of the {free_bytes / 2**30:.2f} GiB free, less "
            f"{margin_bytes / 2**30:.2f} GiB for activations, holds {blocks} KV blocks of "
            f"{block_size} slots ({slot_bytes} bytes each); free memory or pass max_batch_tokens"
        )
    return blocks


def step_margin_bytes(
    hidden: int, widest: int, vocab: int, tokens: int, rows: int, element_size: int
) -> int:
    """A bound on the activations of the engine's largest step: `tokens` in one forward, `rows`
    of them through the LM head. Per token, the residual stream, its norms and the attention
    output (6 x `hidden`) and four live tensors of the widest linear's output (`widest`: the
    MLP's gate, up and product, or the queries), in the model dtype; per row, the logits in the
    model dtype and twice in fp32 (the sampler's copy). The whole doubled for the allocator's
    transient copies and fragmentation."""
    per_token = (6 * hidden + 4 * widest) * element_size
    per_row = vocab * (element_size + 8)
    return 2 * (tokens * per_token + rows * per_row)


def free_device_bytes(device) -> int:
    """Free memory of a CUDA device, in bytes (`torch.cuda.mem_get_info`)."""
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


class KVPool:
    """Blocks of `block_size` token slots; see the module docstring."""

    def __init__(self, num_blocks: int, block_size: int, num_layers: int, device, zero=False):
        if num_blocks < 2 or block_size < 1:
            raise ValueError(
                f"a KV pool needs >= 2 blocks of >= 1 slot, got {num_blocks} x {block_size}"
            )
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.device = torch.device(device)
        self.zero = zero or self.device.type != "cpu"
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers
        self._free = bytearray(b"\x01") * num_blocks  # 1 = free; bytes.find scans at C speed
        self._free[SCRATCH_BLOCK] = 0
        self.in_use = 0  # blocks handed out
        self.peak_in_use = 0
        self._touched = bytearray(num_blocks)  # 1 = handed out at least once: its pages are mapped
        self._warm = bytearray(num_blocks)  # 1 = free and touched: taken before an untouched block
        self._taken: set[int] | None = None  # blocks handed out inside `scratch`

    # --- allocation -----------------------------------------------------------------------------
    @property
    def free_blocks(self) -> int:
        return self.num_blocks - 1 - self.in_use

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def take_run(self, tokens: int) -> int | None:
        """The first slot of `tokens` consecutive free slots (whole blocks, lowest first), or None."""
        n = self.blocks_for(tokens)
        if n == 0:
            return 0
        first = self._free.find(b"\x01" * n)
        if first < 0:
            return None
        self._mark(range(first, first + n))
        return first * self.block_size

    def take_block(self) -> int | None:
        """The first slot of one free block (highest first, one handed out before first: module
        docstring), or None when the pool is full."""
        block = self._warm.rfind(b"\x01")
        if block < 0:
            block = self._free.rfind(b"\x01")
        if block < 0:
            return None
        self._mark((block,))
        return block * self.block_size

    def give_run(self, start: int, tokens: int) -> None:
        first = start // self.block_size
        self._unmark(range(first, first + self.blocks_for(tokens)))

    def give_blocks(self, starts: list[int]) -> None:
        self._unmark([s // self.block_size for s in starts])

    @contextmanager
    def scratch(self) -> Iterator[None]:
        """Blocks handed out for the duration are scratch (engine/kernel_checks.py): on exit
        every one of them holds zeros again, the scratch block what it held before, and the
        allocation state (free, touched and warm blocks, counts) is as it was, so the blocks
        handed out next and what they hold are what they would have been. The pool must not
        grow meanwhile; the blocks were never written (a pool before its first step) or hold
        what no row reads."""
        state = (bytes(self._free), bytes(self._touched), bytes(self._warm))
        counts = (self.in_use, self.peak_in_use)
        taken: set[int] = set()
        self._taken, before = taken, dict(self._slots(SCRATCH_BLOCK, clone=True))
        try:
            yield
        finally:
            self._taken = None
            with torch.inference_mode():
                for block in taken:
                    for _, t in self._slots(block):
                        t.zero_()
                for at, t in self._slots(SCRATCH_BLOCK):  # a layer made since held zeros
                    t.copy_(before[at]) if at in before else t.zero_()
            self._free, self._touched, self._warm = map(bytearray, state)
            self.in_use, self.peak_in_use = counts

    def _slots(self, block: int, clone: bool = False) -> list[tuple[tuple[int, int], torch.Tensor]]:
        """((0 for K or 1 for V, layer), the view of `block`'s slots) for every layer that
        holds KV; copies with `clone`."""
        span = slice(block * self.block_size, (block + 1) * self.block_size)
        out = [
            ((i, layer), t[:, span])
            for i, store in enumerate((self.k, self.v))
            for layer, t in enumerate(store)
            if t is not None
        ]
        return [(at, t.clone()) for at, t in out] if clone else out

    def _mark(self, blocks) -> None:
        if self._taken is not None:
            self._taken.update(blocks)
        for b in blocks:
            self._free[b] = self._warm[b] = 0
            self._touched[b] = 1
        self.in_use += len(blocks)
        self.peak_in_use = max(self.peak_in_use, self.in_use)

    def _unmark(self, blocks) -> None:
        for b in blocks:
            if self._free[b] or b == SCRATCH_BLOCK:
                raise RuntimeError(f"KV block {b} returned twice")
            self._free[b] = self._warm[b] = 1
        self.in_use -= len(blocks)

    def grow(self, num_blocks: int) -> None:
        """Enlarge the pool to `num_blocks` blocks, keeping the contents of every block not free
        (those in use, and the scratch block).

        A free block holds nothing anyone reads, so it is not copied: its pages in the new
        storage stay untouched, and on CPU cost nothing (module docstring). Copying every slot
        would make the whole old pool resident at each doubling, far more than the blocks ever
        handed out (benchmarks/workers_memory.py)."""
        if num_blocks <= self.num_blocks:
            return
        extra = num_blocks - self.num_blocks
        slots = num_blocks * self.block_size
        kept = self._held_runs()
        for store in (self.k, self.v):
            for i, old in enumerate(store):
                if old is not None:
                    new = self._new(old.shape[0], slots, old.shape[2], old.dtype)
                    for s0, s1 in kept:
                        new[:, s0:s1] = old[:, s0:s1]
                    store[i] = new
        self._touched = self._free.translate(_HELD) + bytearray(extra)
        self._warm = bytearray(num_blocks)  # no free block was copied: none is mapped
        self._free += b"\x01" * extra
        self.num_blocks = num_blocks

    def _held_runs(self) -> list[tuple[int, int]]:
        """The slot ranges `[s0, s1)` of the maximal runs of blocks that are not free."""
        runs, block = [], self._free.find(b"\x00")
        while block >= 0:
            end = self._free.find(b"\x01", block)
            end = self.num_blocks if end < 0 else end
            runs.append((block * self.block_size, end * self.block_size))
            block = self._free.find(b"\x00", end)
        return runs

    # --- storage --------------------------------------------------------------------------------
    def _new(self, kv: int, slots: int, d: int, dtype) -> torch.Tensor:
        if self.zero:
            return torch.zeros(kv, slots, d, dtype=dtype, device=self.device)
        return _mapped((kv, slots, d), dtype)

    def allocate(self, layers: Sequence[tuple[int, int, int, torch.dtype]]) -> None:
        """Make the keys and values of each `(layer, kv, D, dtype)` now, rather than on the
        layer's first write (the CUDA pool sized from free memory: its memory is taken at once)."""
        for layer, kv, d, dtype in layers:
            self.layer(layer, kv, d, dtype)

    def layer(self, layer: int, kv: int, d: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The `[kv, slots, D]` keys and values of `layer`, made on first use (or again, should
        the layer write another shape than `allocate` was told)."""
        old = self.k[layer]
        if old is not None and (old.shape[0] != kv or old.shape[2] != d or old.dtype != dtype):
            self.k[layer] = self.v[layer] = old = None
        if old is None:
            slots = self.num_blocks * self.block_size
            self.k[layer] = self._new(kv, slots, d, dtype)
            self.v[layer] = self._new(kv, slots, d, dtype)
        return self.k[layer], self.v[layer]

    def copy_slots(self, src: torch.Tensor, dst_start: int) -> None:
        """Copy the slots `src` (a device index) to `[dst_start, dst_start + len(src))` in every
        layer: a stem taken from a running sequence's blocks into a run of its own."""
        n = src.numel()
        with torch.inference_mode():  # the layers are made inside the forward's inference mode
            for store in (self.k, self.v):
                for t in store:
                    if t is not None:
                        t[:, dst_start : dst_start + n] = t.index_select(1, src)

    # --- accounting -------------------------------------------------------------------------------
    def slot_bytes(self) -> int:
        """Bytes of K and V per token slot, over every layer that stores KV (0 before any write)."""
        return sum(
            t.shape[0] * t.shape[2] * t.element_size() for t in self.k + self.v if t is not None
        )

    @property
    def touched_blocks(self) -> int:
        """Blocks handed out since the last `grow` (or held at it): on CPU, the pool's resident
        pages are these blocks' slots."""
        return self._touched.count(1)

    def nbytes(self) -> int:
        """Bytes the pool's tensors span (on CPU an upper bound on what is resident)."""
        return sum(t.untyped_storage().nbytes() for t in self.k + self.v if t is not None)


def _mapped(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in an anonymous memory map of its own (module docstring): its
    pages are the kernel's zero pages until written, and are unmapped when the tensor is freed
    (the tensor holds the map)."""
    count = 1
    for size in shape:
        count *= size
    memory = mmap.mmap(-1, count * dtype.itemsize, flags=mmap.MAP_PRIVATE)  # not shared on fork
    return torch.frombuffer(memory, dtype=dtype).view(shape)
