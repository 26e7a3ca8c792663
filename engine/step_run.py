"""What one engine step's forwards computed, as the engine's postprocess and its accounting read it.

A step runs one forward (the eager cascade, or the fixed-shape decode), or two when its decode
rows run with fixed shapes beside an eager prefill of the others (`attention/static_dispatch.py`).
Either way the postprocess (`Engine._postprocess`, engine/engine.py) needs the final hidden
states of the rows that choose a token, in `StepPlan.sampling()` order, and, where the
fixed-shape decode computed them with the forward, those rows' greedy token ids
(`graphed_decode.with_greedy_head`), and their logits from the step's one LM-head product.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # for the hints only
    from nudgeability.engine.sampling.choose import HostTokens


@dataclass
class StepRun:
    """The step's forwards (`layouts`: each a `StepLayout` or a `StaticDecode`, which both carry
    `tokens`, `row_end` and `sample_index`), `last` [n, hidden]: the final hidden states of the
    plan's sampling rows in order, and `greedy_ids`: their argmax token ids on their way to the
    host, where the forward computed them (None: the postprocess computes logits). `logits`, where
    the step computed an LM-head product with its forward (the fixed-shape decode's, at the
    bucket's shape), gives the fp32 logits of `last` from it, so that every consumer of the step
    reads that one product (engine/sampling/choose.py); None: the postprocess computes them once.
    `static` is whether a fixed-shape decode ran, `split` whether beside an eager prefill in the
    same step."""

    layouts: list
    last: torch.Tensor
    greedy_ids: HostTokens | None = None
    static: bool = False
    split: bool = False
    fused: bool = False  # set where the greedy ids were the tokens (sampling/choose.py)
    # the whole step's [1, T, hidden] states in plan order, kept only for the suffix scores
    # (suffix_scores.py `needs_hidden`)
    hidden: torch.Tensor | None = None
    logits: Callable[[], torch.Tensor] | None = None

    @classmethod
    def of(cls, layout, states: torch.Tensor, **kwargs) -> StepRun:
        """A step of one forward: `states` [1, T, hidden] laid out as `layout`."""
        return cls([layout], states[0].index_select(0, layout.sample_index), **kwargs)

    @property
    def pad_tokens(self) -> int:
        return sum(layout.tokens - layout.row_end for layout in self.layouts)

    @property
    def real_tokens(self) -> int:
        return sum(layout.row_end for layout in self.layouts)


def merged(chosen_by_first: list[bool], first: StepRun, second: StepRun, head=None) -> StepRun:
    """The step whose sampling rows come from `first` and `second`'s forwards: `chosen_by_first`
    says, for each sampling row in plan order, which part computed it (each part keeps that
    order). The greedy ids survive only where `first` has them and `second` chose no token;
    where `first` has its logits, `second`'s rows take theirs from one product of its own
    (`head`: `ModelRunner.logits`), so that no row's logits are computed twice."""
    if not len(second.last):
        last, ids, logits = first.last, first.greedy_ids, first.logits
    elif not len(first.last):
        last, ids, logits = second.last, None, second.logits
    else:
        at, i, j = [], 0, len(first.last)
        for mine in chosen_by_first:
            at.append(i if mine else j)
            i, j = (i + 1, j) if mine else (i, j + 1)
        where = torch.tensor(at, dtype=torch.long).to(first.last.device)
        last, ids, logits = torch.cat([first.last, second.last]).index_select(0, where), None, None
        if first.logits is not None and head is not None:
            own, rest = first.logits, second.last

            def logits() -> torch.Tensor:
                return torch.cat([own(), head(rest)]).index_select(0, where)

    return StepRun(
        first.layouts + second.layouts, last, ids, first.static, split=True, logits=logits
    )
