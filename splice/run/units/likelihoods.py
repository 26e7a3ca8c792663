"""What `nudge run --likelihoods` adds to an arms fork, and the likelihoods read back from it.

Every arm asks the engine for its splice's teacher-forced log-probabilities
(`SamplingParams.score_suffix`): they come from the arm's own prefill, the first token's from the
prefix's last position (engine/suffix_scores.py), with no second forward. A sealed arm, and any
arm `--score-openers` names, also gets two scoring rows in the same fork: its splice (then the
think-close, for an open arm) followed by the tool-call opener, and by the answer opener
(splice/experiment/openers.py), each generating one token that nothing reads. Their prefills
score the openers' tokens on the forked cache, teacher-forced: log P(opener) is the sum of its
tokens' conditionals, beside the action the arm itself commits to.

The scoring rows change no arm's tokens where the engine is batch-invariant (fp32 on CPU:
engine/README.md); elsewhere they are part of the batch a unit computes, and a replay computes
them again with the same flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nudgeability.engine import Completion, ForkRequest, SamplingParams
from nudgeability.splice.experiment.conditions import Condition
from nudgeability.splice.experiment.openers import Openers
from nudgeability.splice.rundir.records import Likelihoods

# A scoring row's own generation is never read; one token is the least a row can ask for.
SCORE_ONLY = SamplingParams(max_new_tokens=1, score_suffix=True)
# P(TOOL) + P(answer) may exceed 1 by no more than the rounding of two sums of float32 terms.
EXCLUSIVE_SLACK = 1e-5


@dataclass(frozen=True)
class OpenerRows:
    """Where an arm's two opener-scoring rows sit among its fork's suffixes, and how many ids
    before each opener they score (the splice, and an appended think-close)."""

    arm: int
    tool: int
    answer: int
    before: int


def add_scoring(
    request: ForkRequest,
    arms: list[Condition | None],
    openers: Openers,
    close_ids: list[int],
    opener_codes: tuple[str, ...],
) -> list[OpenerRows]:
    """Make every arm of `request` (one suffix per arm of `arms`, in order) score its splice, and
    append the opener-scoring rows of the sealed arms and of those in `opener_codes` (None in
    `arms`: a row whose openers another row scores)."""
    request.params = [replace(p, score_suffix=True) for p in request.params]
    rows = []
    for j, arm in enumerate(arms):
        if arm is None or not (arm.seal or arm.code in opener_codes):
            continue
        context = list(request.suffixes[j]) + ([] if arm.seal else list(close_ids))
        k = len(request.suffixes)
        request.suffixes += [context + list(openers.tool), context + list(openers.answer)]
        request.params += [SCORE_ONLY, SCORE_ONLY]
        rows.append(OpenerRows(j, k, k + 1, len(context)))
    return rows


def arm_likelihoods(
    outs: list[Completion], j: int, rows: list[OpenerRows], openers: Openers
) -> Likelihoods:
    """The `Likelihoods` of arm `j` from its fork's completions (the arms', then the scoring
    rows' that `add_scoring` appended)."""
    splice = list(outs[j].suffix_logprobs)
    found = next((r for r in rows if r.arm == j), None)
    if found is None:
        return Likelihoods(splice, math.fsum(splice))
    tool = math.fsum(outs[found.tool].suffix_logprobs[found.before :])
    answer = math.fsum(outs[found.answer].suffix_logprobs[found.before :])
    if openers.exclusive and math.exp(tool) + math.exp(answer) > 1 + EXCLUSIVE_SLACK:
        raise RuntimeError(
            f"P(TOOL) + P(answer) = {math.exp(tool) + math.exp(answer):.6f} > 1 for disjoint "
            "openers: the scores do not come from one distribution"
        )
    return Likelihoods(splice, math.fsum(splice), tool, answer)
