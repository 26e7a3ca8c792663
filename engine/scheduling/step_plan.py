"""One engine step's work, as the scheduler (`scheduler.py`) decides it: which prefix chunks and
which rows' context tokens the step computes. `step_layout.py` lays it out for the forward,
`attention/static_decode.py` loads a decode step of it into fixed buffers, and the engine
(`engine.py`) samples the rows whose chunk ends their context."""

from __future__ import annotations

from dataclasses import dataclass, field

from nudgeability.engine.sequence import Group, Row


@dataclass
class StepPlan:
    """One step's work: prefix chunks `(group, c0, c1)` of groups' own runs, then row chunks
    `(row, s0, s1)` of context tokens, rows ordered by group so that each group's tokens are
    contiguous in the forward."""

    prefix_chunks: list[tuple[Group, int, int]] = field(default_factory=list)
    row_chunks: list[tuple[Row, int, int]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(c1 - c0 for _, c0, c1 in self.prefix_chunks) + sum(
            s1 - s0 for _, s0, s1 in self.row_chunks
        )

    @property
    def decode_rows(self) -> int:
        """Rows feeding one generated token (a decode, not a prefill of their suffix)."""
        return sum(
            1 for row, s0, s1 in self.row_chunks if s1 - s0 == 1 and s0 >= len(row.suffix_ids)
        )

    def sampling(self) -> list[Row]:
        """The rows that choose a token this step: their chunk ends their context."""
        return [r for r, _, s1 in self.row_chunks if r.samples and s1 == len(r.context)]

    def sampling_positions(self) -> list[int]:
        """Where the rows of `sampling()` sit among `row_chunks`."""
        chunks = self.row_chunks
        return [i for i, (r, _, s1) in enumerate(chunks) if r.samples and s1 == len(r.context)]
