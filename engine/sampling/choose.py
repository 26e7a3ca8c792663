"""Each sampling row's next token from a step's forwards (`step_run.StepRun`), read on the host once.

Where the fixed-shape decode computed the greedy ids with the forward
(`graphed_decode.with_greedy_head`) and no row of the step needs its logits (every row greedy, no
`return_logits`, no `token_stats`), those ids are the tokens and nothing more is computed.
Otherwise the rows choose as `sampler.py` says from the step's one LM-head product: the one its
fixed-shape decode computed at the bucket's shape (`StepRun.logits`; the greedy ids are its
argmax), else one computed here (`ModelRunner.logits`); sampling, `return_logits` and the token
statistics all read it. Every reduction over a row's logits is the row's own, whatever the rows
beside it: the argmax has no rounding (and takes the first maximum); on CUDA torch's softmax over
the last dimension reduces each row in one block (or one warp) sized by the vocabulary alone, and
its cumulative sum over the last dimension scans each row on its own, in both cases whatever the
number of rows (torch's CUDA softmax and inner-dimension scan kernels); the token statistics run
one Triton program per row (row_stats.py).
"""

from __future__ import annotations

import torch

from nudgeability.engine.outputs import record_uncertainty, sampling_inputs, uncertainty_rows
from nudgeability.engine.sampling.sampler import greedy, sample, token_uncertainty
from nudgeability.engine.sequence import Row
from nudgeability.engine.step_run import StepRun


class HostTokens:
    """Token ids on their way to the host: on CUDA one non-blocking copy into pinned memory and
    an event, issued as soon as the ids exist, so that the host's own bookkeeping between then and
    `tolist()` overlaps the copy; elsewhere the tensor itself (a CPU tensor needs no copy)."""

    def __init__(self, ids: torch.Tensor):
        self.device_ids = ids
        self._event = None
        if ids.device.type == "cuda":
            self._host = torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True)
            self._host.copy_(ids, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
        else:
            self._host = ids

    def tolist(self) -> list[int]:
        """The ids as Python ints: the step's one host read."""
        if self._event is not None:
            self._event.synchronize()
        return self._host.tolist()


def needs_logits(rows: list[Row]) -> bool:
    """Whether any of `rows` samples, keeps its logits or asked for token_stats."""
    return any(not r.params.greedy or r.logits is not None or r.logprobs is not None for r in rows)


def choose_tokens(rows: list[Row], run: StepRun, runner) -> tuple[list[int], torch.Tensor | None]:
    """(each row's token, the rows' fp32 logits or None where the forward's greedy ids served,
    which also sets `run.fused`): `rows` are the step's sampling rows, `run` what its forwards
    computed, `runner` the `ModelRunner`."""
    if run.greedy_ids is not None and not needs_logits(rows):
        run.fused = True
        return run.greedy_ids.tolist(), None
    logits = run.logits() if run.logits is not None else runner.logits(run.last)
    inputs = sampling_inputs(rows, logits.device)
    chosen = greedy(logits) if inputs is None else sample(logits, *inputs)
    # The step's one host read. Anything else computed per token on the device must join this
    # transfer rather than add its own.
    asked = uncertainty_rows(rows, logits.device)
    if asked is None:
        return chosen.tolist(), logits
    # SamplingParams.token_stats: the summaries travel with the tokens
    logprob, entropy = token_uncertainty(logits[asked], chosen[asked])
    packed = torch.cat([chosen.double(), logprob.double(), entropy.double()]).tolist()
    n, k = len(rows), len(asked)
    record_uncertainty(rows, packed[n : n + k], packed[n + k :])
    return [int(t) for t in packed[:n]], logits
