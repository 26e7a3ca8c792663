"""What one forward call computes: its tokens in order, where each one's KV goes, and which keys
each query sees.

A step's tokens, packed as one `[1, T]` sequence:

1. **prefix chunks**: positions [c0, c1) of a group's own run; they attend causally to the run;
2. **row tokens**, ordered by group, each group's tokens contiguous: every row's chunk of context
   (one token for a decode, several for a prefill). A row token attends to its group's prefix
   segments (read in place, once per group for all its row tokens: the arms are folded into the
   query rows) and to its own row's slots up to its own (gathered from the row's blocks);
3. **pad tokens** up to `padded(tokens)` (`ModelRunner.padded`, batch invariance), whose KV goes
   to the pool's scratch block and whose attention output is zero.

Everything a layer needs is built here once per step and shared by every layer: the host
decides it all, and the one transfer to the device happens before the forward, so that no layer
waits on the host. Masks are built on first use from device tensors and cached in `per_call`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nudgeability.engine.invariant.cuda import paged_tables
from nudgeability.engine.invariant.cuda.paged_tables import PagedTables
from nudgeability.engine.scheduling.step_plan import StepPlan

# A row's gathered keys are padded to a multiple of this: on CPU a token's own keys run in one
# call over the multiple that holds its slot (`_by_key_width`), so that the kernel's shape never
# depends on the longest row of the step (engine/README.md, batch invariance).
KEY_ALIGN = 128


@dataclass(frozen=True)
class PrefixChunk:
    """Tokens [t0, t1) of the step: positions [c0, c1) of the run that starts at pool slot `start`."""

    t0: int
    t1: int
    start: int
    c0: int
    c1: int


@dataclass(frozen=True)
class GroupSpan:
    """Row tokens [a0, a1) (counted from the first row token) of one group, and its prefix
    segments `(pool start, length, position of the first token)`, in position order, and the
    group's prefix length (row slot 0 sits at that position)."""

    a0: int
    a1: int
    segments: tuple[tuple[int, int, int], ...]
    prefix_len: int


@dataclass
class SuffixPart:
    """Row chunks whose tokens attend to their own rows' slots in one attention call.

    `tokens[n, L]`: the row-token index of each query (padding repeats a real one);
    `first_slot[n]`: slot (in the row) of each row's first query; `gather[n * hw]`: the pool
    slots of each row's keys [0, hw) (padding points at the row's slot 0); `real`: where the
    valid queries sit in the `[n * L]` padded order (None when L = 1)."""

    tokens: torch.Tensor
    first_slot: torch.Tensor
    gather: torch.Tensor
    real: torch.Tensor | None
    hw: int
    width: int  # L, queries per row
    rows: int


@dataclass
class StepLayout:
    """See the module docstring. Built by `StepLayout.of`."""

    input_ids: torch.Tensor  # [1, T]
    positions: torch.Tensor  # [1, T]
    slots: torch.Tensor  # [T] pool slot of each token's KV
    prefix_chunks: list[PrefixChunk]
    row_start: int  # first row token
    row_end: int  # one past the last row token (then the pads)
    groups: list[GroupSpan]
    row_positions: torch.Tensor  # [row tokens] absolute position of each row token
    parts: list[SuffixPart]  # decode rows (L = 1) and prefill rows (L > 1)
    part_index: torch.Tensor | None  # where each part's outputs go in row-token order
    sample_index: torch.Tensor  # [rows sampling] token index of each one's last token
    per_call: dict = field(default_factory=dict)
    paged: PagedTables | None = None  # the paged kernel's tables, when it runs (`of`'s `paged`)

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[1]

    @classmethod
    def of(cls, plan: StepPlan, block_size: int, device, pad_id: int, padded, paged=None):
        """The step's layout; `paged`: tokens per tile of the paged kernel where it runs
        (engine/invariant/cuda/mode.py), whose tables then travel in the same copy."""
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        chunks = []
        for group, c0, c1 in plan.prefix_chunks:
            run = group.own
            t0 = len(ids)
            ids += run.token_ids[c0:c1]
            pos += range(run.offset + c0, run.offset + c1)
            slots += range(run.start + c0, run.start + c1)
            chunks.append(PrefixChunk(t0, len(ids), run.start, c0, c1))
        row_start = len(ids)
        spans = []
        decode, prefill = [], []  # (first row token, row, s0, s1)
        sample_index = []
        current, a0 = None, 0
        for row, s0, s1 in plan.row_chunks:
            group = row.group
            if group is not current:
                if current is not None:
                    spans.append(_span(current, a0, len(ids) - row_start))
                current, a0 = group, len(ids) - row_start
            first = len(ids) - row_start
            ids += row.context[s0:s1]
            base = group.prefix_len
            pos += range(base + s0, base + s1)
            slots += [row.slot(s, block_size) for s in range(s0, s1)]
            (decode if s1 - s0 == 1 else prefill).append((first, row, s0, s1))
            if row.samples and s1 == len(row.context):
                sample_index.append(row_start + first + s1 - s0 - 1)
        if current is not None:
            spans.append(_span(current, a0, len(ids) - row_start))
        row_end = len(ids)
        pads = padded(row_end) - row_end
        ids += [pad_id] * pads
        pos += [0] * pads
        slots += [i % block_size for i in range(pads)]  # the scratch block (kv_pool.SCRATCH_BLOCK)

        if torch.device(device).type == "cpu":  # one part per own-key width (`_by_key_width`)
            parts = _by_key_width(decode) + _by_key_width(prefill)
        else:
            parts = [p for p in (decode, prefill) if p]
        pack = _Pack()
        built = [_suffix_part(p, block_size, pack) for p in parts]
        part_index = None
        if len(parts) > 1 or (parts and not _in_order(parts[0], row_end - row_start)):
            part_index = pack.add(
                [first + i for p in parts for first, _, s0, s1 in p for i in range(s1 - s0)]
            )
        fields = [pack.add(x) for x in (ids, pos, slots, pos[row_start:row_end], sample_index)]
        tables = None
        if paged:
            builder = paged_tables.of_plan(plan, spans, decode + prefill, chunks, paged, block_size)
            tables = {name: pack.add(values) for name, values in builder.flat().items()}
        tensors = pack.build(device)  # the step's one host-to-device copy
        for part in built:
            for name in ("tokens", "first_slot", "gather", "real"):
                index = getattr(part, name)
                setattr(part, name, None if index is None else tensors[index])
            part.tokens = part.tokens.view(part.rows, part.width)
        ids_t, pos_t, slots_t, row_pos_t, sample_t = (tensors[i] for i in fields)
        return cls(
            input_ids=ids_t[None],
            positions=pos_t[None],
            slots=slots_t,
            prefix_chunks=chunks,
            row_start=row_start,
            row_end=row_end,
            groups=spans,
            row_positions=row_pos_t,
            parts=built,
            part_index=None if part_index is None else tensors[part_index],
            sample_index=sample_t,
            paged=None
            if tables is None
            else builder.built({n: tensors[i] for n, i in tables.items()}),
        )

    def write_index(self, kv: int, pool_slots: int) -> torch.Tensor:
        """Rows of the pool seen as `[kv * slots, D]` that receive the step's keys laid out as
        `[T * kv, D]` (token-major): one `index_copy_` per tensor and layer."""
        key = ("write", kv, pool_slots)
        index = self.per_call.get(key)
        if index is None:
            heads = torch.arange(kv, device=self.slots.device)
            index = (heads[None, :] * pool_slots + self.slots[:, None]).reshape(-1)
            self.per_call[key] = index
        return index


def _span(group, a0: int, a1: int) -> GroupSpan:
    segments = tuple((s.start, s.length, s.offset) for s in group.segments if s.length)
    return GroupSpan(a0, a1, segments, group.prefix_len)


def _by_key_width(pieces: list) -> list[list]:
    """Row pieces `(first row token, row, s0, s1)` cut at multiples of KEY_ALIGN slots and grouped
    into parts of one own-key width each (narrowest first; step order within a part).

    On CPU a token at row slot s attends to its row's keys [0, w) in one kernel call, with
    w = ceil((s + 1) / KEY_ALIGN) * KEY_ALIGN fixed by s alone (attention.own_keys_attention):
    so the kernel's shape for a token never depends on the longest row of the step, nor on
    whether the token is fed alone (decode) or inside a prefill chunk of any width."""
    parts: dict[int, list] = {}
    for first, row, s0, s1 in pieces:
        a = s0
        while a < s1:
            b = min(s1, (a // KEY_ALIGN + 1) * KEY_ALIGN)
            parts.setdefault(-(-b // KEY_ALIGN), []).append((first + a - s0, row, a, b))
            a = b
    return [parts[width] for width in sorted(parts)]


def _in_order(part, count: int) -> bool:
    """True when the part's queries are exactly the row tokens in order (a pure decode step)."""
    firsts = [first for first, *_ in part]
    return len(firsts) == count and firsts == list(range(count))


class _Pack:
    """Integer lists gathered on the host and sent to the device as one tensor, then split."""

    def __init__(self):
        self.lists: list[list[int]] = []

    def add(self, values) -> int:
        self.lists.append(list(values))
        return len(self.lists) - 1

    def build(self, device) -> list[torch.Tensor]:
        flat = [v for values in self.lists for v in values]
        whole = torch.tensor(flat, dtype=torch.long)
        if torch.device(device).type == "cuda":
            whole = whole.pin_memory().to(device, non_blocking=True)
        else:
            whole = whole.to(device)
        return list(torch.split(whole, [len(values) for values in self.lists]))


def _suffix_part(part, block_size: int, pack: _Pack) -> SuffixPart:
    width = max(s1 - s0 for _, _, s0, s1 in part)
    hw = -(-max(s1 for *_, s1 in part) // KEY_ALIGN) * KEY_ALIGN
    tokens, gather, firsts, real = [], [], [], []
    for k, (first, row, s0, s1) in enumerate(part):
        n = s1 - s0
        tokens += [first + min(i, n - 1) for i in range(width)]
        real += [k * width + i for i in range(n)]
        row_slots = [row.slot(s, block_size) for s in range(s1)]
        gather += row_slots + [row_slots[0]] * (hw - s1)
        firsts.append(s0)
    return SuffixPart(
        tokens=pack.add(tokens),
        first_slot=pack.add(firsts),
        gather=pack.add(gather),
        real=None if width == 1 else pack.add(real),
        hw=hw,
        width=width,
        rows=len(part),
    )
