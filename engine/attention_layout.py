"""The attention layout of one forward call: which positions it computes, where each arm's queries
sit, and which keys they may see.

`Batch` asks an `ArmLayout` for the step of each forward call; `ForkCache.update` and
`shared_prefix_attention` read it. There are two kinds of step:

- `PrefixStep`: the prefix phase, a chunk of positions [chunk_start, chunk_end) of the padded
  `[G, P_max]` prefix batch;
- `ArmStep`: the arm phase (suffix prefill and decode): the scheduled suffix rows, the suffix slot
  of each query token, the suffix high-water mark and the `Fold` that places the rows in the
  `[groups, arms]` grid used to read each prefix once for all its arms. Its masks and the cache
  writes' indices are built on first use and shared by every layer of the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class PrefixStep:
    """Prefix phase: `lengths[G]` real prefix lengths of the padded `[G, prefix_max]` batch,
    computed in chunks starting at `chunk_start`."""

    lengths: torch.Tensor
    prefix_max: int
    chunk_start: int


@dataclass(frozen=True)
class Fold:
    """Where each scheduled row sits in the `[groups, arms]` grid that folds arms into query rows.

    Rows are ordered by group, so the scheduled rows span groups [group_lo, group_hi); a group
    with fewer scheduled rows than `arms_per_group` leaves zero query rows in the grid.
    """

    rows: torch.Tensor  # [n] suffix rows scheduled
    rows_are_all: bool  # rows == arange(N): read suffix storage as a view, no gather
    row_group: torch.Tensor  # [n] group of each scheduled row
    group_lo: int
    group_hi: int
    arms_per_group: int
    index: torch.Tensor  # [n] row -> (group - group_lo) * arms_per_group + arm
    is_identity: bool  # index == arange(n): fold and unfold are plain views
    # what depends on the rows alone (the full layers' prefix bias), kept while the rows run
    cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, rows: list[int], group_of_row: list[int], num_rows: int, device) -> Fold:
        groups = [group_of_row[r] for r in rows]
        lo, hi = min(groups), max(groups) + 1
        rank, counts = [], {}
        for g in groups:
            rank.append(counts.get(g, 0))
            counts[g] = rank[-1] + 1
        arms = max(counts.values())
        index = [(g - lo) * arms + a for g, a in zip(groups, rank)]
        return cls(
            rows=torch.tensor(rows, device=device),
            rows_are_all=len(rows) == num_rows,
            row_group=torch.tensor(groups, device=device),
            group_lo=lo,
            group_hi=hi,
            arms_per_group=arms,
            index=torch.tensor(index, device=device),
            is_identity=index == list(range((hi - lo) * arms)),
        )


@dataclass
class ArmStep:
    """Arm phase: query slots `q_slots[n, L]` of the folded rows; slots [0, hw) may be read.

    A decode step has one query per scheduled row (`L = 1`). The suffix prefill is *packed*: its
    `T` query tokens (every arm's suffix, back to back, no padding) arrive as one `[1, T]` sequence,
    and the fold treats each token as a row of its own (`n = T`, `L = 1`); `token_rows[T]` says
    which arm each token belongs to, and the tokens attend to each other's keys within an arm.
    `write_rows`/`write_slots` (the shape of the call's `[B, L]` input) say where its keys go.
    """

    lengths: torch.Tensor  # [G] prefix lengths
    # the same on the host: decides, without a device sync, when no prefix mask is needed
    lengths_host: tuple[int, ...]
    fold: Fold
    q_slots: torch.Tensor
    hw: int
    write_rows: torch.Tensor
    write_slots: torch.Tensor
    token_rows: torch.Tensor | None = None  # packed suffix prefill only
    # masks and write indices, built on first use and shared by every layer of the call
    per_call: dict = field(default_factory=dict)

    @property
    def packed(self) -> bool:
        return self.token_rows is not None


class ArmLayout:
    """The arm-phase steps of one batch: positions and query slots, with the fold cached per row set.

    Rows (arms) are ordered by group; row r belongs to group `group_of_row[r]` and has a suffix of
    `suffix_lengths[r]` tokens written to slots [0, S_r); its t-th new token goes to slot S_r + t.
    """

    def __init__(
        self,
        prefix_lengths: list[int],
        suffix_lengths: list[int],
        group_of_row,
        device,
        static_shapes: bool = False,
    ):
        self.device = device
        self.static_shapes = static_shapes
        self.group_of_row = list(group_of_row)
        self.prefix_lengths = torch.tensor(prefix_lengths, device=device)
        self.prefix_lengths_host = tuple(prefix_lengths)
        self.suffix_lengths = torch.tensor(suffix_lengths, device=device)
        self.row_group = torch.tensor(self.group_of_row, device=device)
        self.s_max = max(suffix_lengths)
        self._fold_key: tuple[int, ...] | None = None
        self._fold: Fold | None = None

    def prefix_steps(self, prefix_max: int, chunk: int):
        """Positions `[G, c1 - c0]` and the step of each chunk [c0, c1) of the padded prefix batch."""
        groups = len(self.prefix_lengths)
        positions = torch.arange(prefix_max, device=self.device).expand(groups, -1)
        for c0 in range(0, prefix_max, chunk):
            c1 = min(c0 + chunk, prefix_max)
            yield (c0, c1), positions[:, c0:c1], PrefixStep(self.prefix_lengths, prefix_max, c0)

    def suffix_step(self) -> tuple[torch.Tensor, ArmStep]:
        """Every row's suffix, packed back to back as one `[1, T]` sequence (no padding), at
        positions P_g + slot."""
        lengths = self.suffix_lengths
        token_rows = torch.repeat_interleave(
            torch.arange(len(lengths), device=self.device), lengths
        )
        starts = torch.cumsum(lengths, 0) - lengths
        token_slots = torch.arange(len(token_rows), device=self.device) - starts[token_rows]
        rows_of_token = (
            token_rows.tolist()
        )  # host copy once per batch: the fold is built on the host
        fold = Fold.of(rows_of_token, self.group_of_row, -1, self.device)
        step = ArmStep(
            self.prefix_lengths,
            self.prefix_lengths_host,
            fold,
            token_slots[:, None],
            hw=self.s_max,
            write_rows=token_rows[None],
            write_slots=token_slots[None],
            token_rows=token_rows,
        )
        positions = token_slots + self.prefix_lengths[self.row_group[token_rows]]
        return positions[None], step

    def decode_step(
        self, rows: list[int], step_index: int, capacity: int
    ) -> tuple[torch.Tensor, ArmStep]:
        """One token per scheduled row: every row has generated `step_index` tokens, and the last
        one goes to slot S_r + step_index - 1. With `static_shapes`, every step reads all
        `capacity` slots (the unwritten ones are masked), so that its shapes never change."""
        fold = self.fold(rows)
        slots = (self.suffix_lengths[fold.rows] + step_index - 1)[:, None]
        hw = capacity if self.static_shapes else min(self.s_max + step_index, capacity)
        step = ArmStep(
            self.prefix_lengths,
            self.prefix_lengths_host,
            fold,
            slots,
            hw,
            fold.rows[:, None],
            slots,
        )
        return slots + self.prefix_lengths[fold.row_group][:, None], step

    def fold(self, rows: list[int]) -> Fold:
        key = tuple(rows)
        if key != self._fold_key:
            self._fold_key = key
            self._fold = Fold.of(rows, self.group_of_row, len(self.group_of_row), self.device)
        return self._fold


def _bias(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive attention bias: 0 where visible, the dtype's lowest finite value where hidden.

    Finite on purpose: a query that sees no key at all (a prefix hidden by a window) then gets a
    log-sum-exp near that lowest value, which weighs nothing in the merge, instead of NaN.
    """
    return torch.where(visible, 0.0, torch.finfo(dtype).min).to(dtype)


def suffix_bias(step: ArmStep, window: int | None, g: int, dtype) -> torch.Tensor:
    """The suffix part's bias, built once per call and window.

    Decode: `[n, 1, 1, hw]`, broadcast over the row's query heads: key slot j is visible to the
    row's query slot i when j <= i (and i - j < W). Packed prefill: `[1, 1, g*T, T]` over the
    call's own keys, visible when the key token belongs to the query's arm and its slot is <= the
    query's (and within W)."""
    key = ("suffix", window, g, dtype)
    if key in step.per_call:
        return step.per_call[key]
    i = step.q_slots  # [n, 1]
    if step.packed:
        j = step.q_slots[:, 0][None, :]  # [1, T] slots of the keys (the same tokens)
        visible = (step.token_rows[:, None] == step.token_rows[None, :]) & (j <= i)
    else:
        j = torch.arange(step.hw, device=i.device)
        visible = j <= i
    if window is not None:
        visible &= (i - j) < window
    n, keys = visible.shape
    if step.packed:  # [T, T] -> [1, 1, g*T, T]: head-major query rows, as the queries are laid out
        visible = visible[None].expand(g, n, keys).reshape(1, 1, g * n, keys)
    else:
        visible = visible[:, None, None, :]
    step.per_call[key] = _bias(visible, dtype)
    return step.per_call[key]


def prefix_bias(
    step: ArmStep, prefix_start: torch.Tensor, window: int | None, g: int, t: int, dtype
) -> torch.Tensor | None:
    """[groups, 1, arms*g, T] (or [groups, 1, 1, T] for full layers): the prefix part's bias over
    the folded query rows. `prefix_start[G]` is the position of each group's prefix slot 0 in this
    layer (sliding layers keep only the last W-1 positions). A full layer's bias depends on the
    rows alone, so it is built once while the same rows run.

    None when every query sees every prefix slot: a full layer whose groups all fill the `T`
    slots (no padding), decided from the host's lengths. The kernel then reads no mask at all."""
    fold = step.fold
    key = ("prefix", window, g, t, dtype)
    masks = fold.cache if window is None else step.per_call
    if key in masks:
        return masks[key]
    lo, hi = fold.group_lo, fold.group_hi
    if window is None and all(n == t for n in step.lengths_host[lo:hi]):
        masks[key] = None
        return None
    start = prefix_start[lo:hi]
    kpos = start[:, None] + torch.arange(t, device=start.device)  # [groups, T]
    valid = (kpos >= 0) & (kpos < step.lengths[lo:hi, None])
    if window is None:
        seen = valid[:, None, None, :]
    else:
        groups, arms = hi - lo, fold.arms_per_group
        qpos = step.q_slots[:, 0] + step.lengths[fold.row_group]  # [n] absolute positions
        folded = qpos.new_zeros(groups * arms)
        folded[fold.index] = qpos
        folded = folded.view(groups, arms, 1).expand(groups, arms, g).reshape(groups, -1)
        seen = (valid[:, None, :] & ((folded[:, :, None] - kpos[:, None, :]) < window))[:, None]
    masks[key] = _bias(seen, dtype)
    return masks[key]
