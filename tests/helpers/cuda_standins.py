"""What the CPU stand-ins of CUDA's kernels and graphs share (tests/engine/attention/test_static_decode.py,
test_cuda_kernel_choice.py, test_prefill_chunk_cuda.py, test_static_decode_tables.py,
test_graph_self_check_rows.py)."""

from __future__ import annotations

import torch

from nudgeability.engine.attention.graphed_decode import with_greedy_head


def lse_padded(lse: torch.Tensor, m: int) -> torch.Tensor:
    """The memory-efficient kernel's log-sum-exp as it returns it: padded with zeros to a
    multiple of 32 queries (`lse_kernels.attend_cuda` slices the `m` real ones back)."""
    width = -(-m // 32) * 32
    return torch.cat([lse, lse.new_zeros(*lse.shape[:-1], width - m)], dim=-1)


class CapturedDecode:
    """Stands in for `graphed_decode.GraphedDecode` on CPU, so that the engine's self-check of a
    bucket's first captured step (`StaticDecodeDispatch._self_check`) has something to compare:
    its "replay" is the fixed-shape step itself (the eager FlexAttention reference over the same
    buffers), then what a faulty graph would leave: `corrupt` added to the final hidden states
    (`where="hidden"`) or to layer 0's K at the rows' slots in the pool (`where="kv"`), of every
    real row, or with `only_silent` of the rows that choose no token this step only."""

    def __init__(self, engine, corrupt: float = 0.0, where: str = "hidden", only_silent=False):
        self.engine, self.corrupt, self.where, self.only_silent = (
            engine,
            corrupt,
            where,
            only_silent,
        )
        self.graphs, self.checked, self.runs = {}, set(), 0
        self.corrupted: list[int] = []  # the bucket rows corrupted at each run

    def drop(self, bucket):
        self.checked.discard(bucket)

    def capture(self, cache, static):
        """Nothing to capture: the "replay" runs the step itself."""

    def run(self, cache, static):
        self.runs += 1
        runner = self.engine.runner
        hidden, logits, ids = with_greedy_head(runner.forward, runner.logits)(
            cache, static.input_ids, static.positions
        )
        if not self.corrupt:
            return hidden, logits, ids
        rows = torch.ones(static.row_end, dtype=torch.bool)
        if self.only_silent:
            rows[static.sample_index] = False
        rows = rows.nonzero().flatten()
        self.corrupted.append(len(rows))
        if self.where == "kv":
            static.pool.k[0][:, static.slots[rows]] += self.corrupt
            return hidden, logits, ids
        hidden = hidden.clone()
        hidden[0, rows] += self.corrupt
        return hidden, logits, ids
