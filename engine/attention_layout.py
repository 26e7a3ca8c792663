"""The attention layout of one forward call: which positions it computes, where each arm's queries
sit, and which keys they may see.

`Batch` asks an `ArmLayout` for the step of each forward call; `ForkCache.update` and
`shared_prefix_attention` read it. There are two kinds of step:

- `PrefixStep`: the prefix phase, a chunk of positions [chunk_start, chunk_end) of the padded
  `[G, P_max]` prefix batch;
- `ArmStep`: the arm phase (suffix prefill and decode): the scheduled suffix rows, the suffix slot
  of each query token, the suffix high-water mark and the `Fold` that places the rows in the
  `[groups, arms]` grid used to read each prefix once for all its arms. Its masks are built on
  first use and shared by every layer of the call.
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
    """Arm phase: query slots `q_slots[n, L]` of the folded rows; slots [0, hw) may be read."""

    lengths: torch.Tensor  # [G] prefix lengths
    fold: Fold
    q_slots: torch.Tensor
    hw: int
    masks: dict = field(default_factory=dict)  # built once per call, keyed by (kind, window, T)


class ArmLayout:
    """The arm-phase steps of one batch: positions and query slots, with the fold cached per row set.

    Rows (arms) are ordered by group; row r belongs to group `group_of_row[r]` and has a suffix of
    `suffix_lengths[r]` tokens written to slots [0, S_r); its t-th new token goes to slot S_r + t.
    """

    def __init__(self, prefix_lengths: list[int], suffix_lengths: list[int], group_of_row, device):
        self.device = device
        self.group_of_row = list(group_of_row)
        self.prefix_lengths = torch.tensor(prefix_lengths, device=device)
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

    def suffix_step(self, rows: list[int]) -> tuple[torch.Tensor, ArmStep]:
        """Every row's right-padded suffix `[N, S_max]` at positions P_g + slot."""
        slots = torch.arange(self.s_max, device=self.device).expand(len(self.group_of_row), -1)
        step = ArmStep(self.prefix_lengths, self.fold(rows), slots, hw=self.s_max)
        return slots + self.prefix_lengths[self.row_group][:, None], step

    def decode_step(
        self, rows: list[int], step_index: int, capacity: int
    ) -> tuple[torch.Tensor, ArmStep]:
        """One token per scheduled row: every row has generated `step_index` tokens, and the last
        one goes to slot S_r + step_index - 1."""
        fold = self.fold(rows)
        slots = (self.suffix_lengths[fold.rows] + step_index - 1)[:, None]
        hw = min(self.s_max + step_index, capacity)
        step = ArmStep(self.prefix_lengths, fold, slots, hw)
        return slots + self.prefix_lengths[fold.row_group][:, None], step

    def fold(self, rows: list[int]) -> Fold:
        key = tuple(rows)
        if key != self._fold_key:
            self._fold_key = key
            self._fold = Fold.of(rows, self.group_of_row, len(self.group_of_row), self.device)
        return self._fold


def suffix_hidden(step: ArmStep, window: int | None) -> torch.Tensor:
    """[n, 1, 1, L, hw], True where hidden: key slot j is visible to query slot i when j <= i
    (and i - j < W)."""
    key = ("suffix", window)
    if key not in step.masks:
        j = torch.arange(step.hw, device=step.q_slots.device)
        i = step.q_slots[:, :, None]
        visible = j <= i
        if window is not None:
            visible &= (i - j) < window
        step.masks[key] = ~visible[:, None, None]
    return step.masks[key]


def prefix_hidden(
    step: ArmStep, prefix_start: torch.Tensor, window: int | None, g: int, length: int, t: int
) -> torch.Tensor:
    """[groups, 1, arms*g*L, T] (or [groups, 1, 1, T] for full layers), True where a prefix slot
    is hidden. `prefix_start[G]` is the position of each group's prefix slot 0 in this layer."""
    key = ("prefix", window, t)
    if key in step.masks:
        return step.masks[key]
    fold = step.fold
    lo, hi = fold.group_lo, fold.group_hi
    start = prefix_start[lo:hi]
    kpos = start[:, None] + torch.arange(t, device=start.device)  # [groups, T]
    valid = (kpos >= 0) & (kpos < step.lengths[lo:hi, None])
    if window is None:
        mask = valid[:, None, None, :]
    else:
        groups, arms = hi - lo, fold.arms_per_group
        qpos = step.q_slots + step.lengths[fold.row_group][:, None]  # [n, L] absolute positions
        folded = qpos.new_zeros(groups * arms, length)
        folded[fold.index] = qpos
        folded = (
            folded.view(groups, arms, 1, length).expand(groups, arms, g, length).reshape(groups, -1)
        )
        mask = (valid[:, None, :] & ((folded[:, :, None] - kpos[:, None, :]) < window))[:, None]
    step.masks[key] = ~mask
    return step.masks[key]
