"""Teacher-forced log-probabilities of a fork's suffixes, taken from the forward that prefills them.

An arm that asks (`SamplingParams.score_suffix`) gets, for each token of its suffix,
log p(token | everything before it): how likely the model found what was inserted. The hidden
state at context token k predicts token k + 1, so the steps that feed an arm's suffix hold every
conditional but the first. The first suffix token is predicted at the prefix's last position:
either a token the group borrowed into every arm (a group with an empty suffix,
`GroupShape.of`), which the arm's own prefill computes, or the last token of the group's last
prefix segment, whose forward keeps that one hidden state on the run (`Run.keep_last`, set by
`requests.fork_groups`) for the arms' first chunks to score. No position is computed twice for
this, and nothing of `[tokens, vocab]` is kept: the log-probabilities are gathered on the device
and read once per step that scores.
"""

from __future__ import annotations

import torch

from nudgeability.engine.sampling.row_stats import row_stats
from nudgeability.engine.scheduling.step_plan import StepPlan
from nudgeability.engine.sequence import Row
from nudgeability.models.quant.triton_kernels import available

# Rows whose logits are computed at once (a multiple of the model runner's 16-row tile, so that
# the blocks change no bit: engine/model_runner.py).
SCORE_ROWS = 256


def needs_hidden(plan: StepPlan) -> bool:
    """Whether `score_suffixes` reads this step's hidden states: a run or stem whose last state a
    fork keeps ends in it, or a row feeds tokens whose conditionals it scores. Such a step runs
    as one eager forward (engine/engine.py), so its states are in plan order."""
    for group, _, c1 in plan.prefix_chunks:
        if group.own.keep_last and c1 == group.own.length:
            return True
    for row, s0, s1 in plan.row_chunks:
        if row.stem is not None and row.stem.keep_last and s1 == len(row.context):
            return True
        if row.suffix_scores:
            start = row.scored_from
            end = start + len(row.suffix_scores)
            if max(s0, start - 1) < min(s1, end - 1) or (start == 0 and s0 == 0):
                return True
    return False


@torch.inference_mode()
def score_suffixes(plan: StepPlan, hidden: torch.Tensor, logits_of) -> None:
    """Keep the last hidden states that forks asked for, and write the suffix log-probabilities
    this step computes into their rows (`Row.suffix_scores`).

    `hidden` is the step's `[1, T, hidden]` output, its tokens in plan order (prefix chunks, then
    row chunks: `scheduling/step_layout.py`, `attention/static_decode.py` `load`); `logits_of` is
    `ModelRunner.logits` (fp32 logits of `[n, hidden]` states). Where no row asks and no run
    keeps its last state, it computes nothing."""
    t = 0
    for group, c0, c1 in plan.prefix_chunks:
        t += c1 - c0
        run = group.own
        if run.keep_last and c1 == run.length:
            run.last_hidden = hidden[0, t - 1].clone()
    index: list[int] = []  # token positions in this step whose next token is a suffix token
    targets: list[int] = []
    into: list[tuple[Row, int]] = []
    first_states, first_targets, first_into = [], [], []
    for row, s0, s1 in plan.row_chunks:
        at = t
        t += s1 - s0
        if row.stem is not None and row.stem.keep_last and s1 == len(row.context):
            row.stem.last_hidden = hidden[0, t - 1].clone()
        if not row.suffix_scores:
            continue
        start = row.scored_from  # context index of the caller's first suffix token
        end = start + len(row.suffix_scores)
        for k in range(max(s0, start - 1), min(s1, end - 1)):
            index.append(at + k - s0)
            targets.append(row.context[k + 1])
            into.append((row, k + 1 - start))
        if start == 0 and s0 == 0:
            state = row.group.segments[-1].last_hidden
            if state is None:  # fork_groups marks the run before any of its forwards
                raise RuntimeError("score_suffix: the prefix's last hidden state was not kept")
            first_states.append(state)
            first_targets.append(row.context[0])
            first_into.append((row, 0))
    if not into and not first_into:
        return
    states = hidden[0].index_select(0, torch.tensor(index, device=hidden.device, dtype=torch.long))
    if first_states:
        states = torch.cat([states, torch.stack(first_states)])
    wanted = torch.tensor(targets + first_targets, device=states.device, dtype=torch.long)
    picked = []
    # In blocks of rows: a step that prefills many arms' splices would otherwise build a
    # `[rows, vocab]` logits tensor beyond the activations the KV pool was sized around.
    for b0 in range(0, states.shape[0], SCORE_ROWS):
        logits, targets = logits_of(states[b0 : b0 + SCORE_ROWS]), wanted[b0 : b0 + SCORE_ROWS]
        picked.append(_log_probs(logits, targets))
    # a second host read, only in steps where some arm scores its suffix
    values = torch.cat(picked).tolist()
    for (row, j), value in zip(into + first_into, values):
        row.suffix_scores[j] = value


def _log_probs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) of each row of fp32 `logits`: on CUDA reduced row by row whatever the rows
    beside it (sampling/row_stats.py), on CPU by torch's log-softmax as the records were made."""
    if logits.device.type == "cuda" and available():
        return row_stats(logits, targets)[0]
    return torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)
