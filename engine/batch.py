"""One batch of prefix groups and their arms: token inputs, sampling inputs and stop checks.

Sizes come from `scheduler.BatchSlots` and the attention layout of each forward call from
`attention_layout.ArmLayout`. Rows (arms) are ordered by group, so the rows of one group are
contiguous; a finished row keeps its static suffix slots and is simply no longer scheduled.
"""

from __future__ import annotations

import torch

from nudgeability.engine.attention_layout import ArmLayout, ArmStep
from nudgeability.engine.sampler import uniform_stream
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.scheduler import BatchSlots, GroupShape
from nudgeability.engine.sequence import Sequence


class Batch:
    """Prefix groups `[(prefix_ids, [(suffix_ids, params), ...]), ...]` run together; `shapes`
    are their `GroupShape.of` shapes (the engine planned the batch with them)."""

    def __init__(
        self,
        groups,
        shapes: list[GroupShape],
        device,
        eos_ids: set[int],
        tokenizer=None,
        return_logits: bool = False,
        static_shapes: bool = False,
    ):
        self.device = device
        self.eos_ids = eos_ids
        self.tokenizer = tokenizer
        self.slots = BatchSlots.of(shapes)
        self.prefixes: list[list[int]] = []
        self.seqs: list[Sequence] = []
        for g, ((prefix, arms), shape) in enumerate(zip(groups, shapes)):
            prefix, suffixes = shape.split(list(prefix), [s for s, _ in arms])
            self.prefixes.append(prefix)
            for suffix, (_, params) in zip(suffixes, arms):
                seq = Sequence(
                    row=len(self.seqs),
                    group=g,
                    suffix_ids=suffix,
                    params=params,
                    shared_prefill=len(prefix),
                )
                if return_logits:
                    seq.logits = []
                if params.token_stats:
                    seq.logprobs, seq.entropies = [], []
                self.seqs.append(seq)
        self.layout = ArmLayout(
            [len(p) for p in self.prefixes],
            [len(s.suffix_ids) for s in self.seqs],
            [s.group for s in self.seqs],
            device,
            static_shapes,
        )
        self.prefix_lengths = self.layout.prefix_lengths
        self.p_max = self.slots.prefix_max
        self.s_max = self.slots.suffix_max
        self.suffix_capacity = self.slots.suffix_capacity
        self.temperature = torch.tensor([s.params.temperature for s in self.seqs], device=device)
        self.top_p = torch.tensor([s.params.top_p for s in self.seqs], device=device)
        new_max = self.slots.new_max
        self.uniforms = torch.stack([uniform_stream(s.params, new_max) for s in self.seqs]).to(
            device
        )
        self.step_index = 0  # tokens generated so far by every scheduled row
        self.active: list[int] = list(range(len(self.seqs)))
        self._chosen: torch.Tensor | None = None  # the last step's tokens, on the device
        self._chosen_rows: list[int] = []
        self._sampled_key: tuple[int, ...] | None = None
        self._stats_key: tuple[int, ...] | None = None
        self._stats: torch.Tensor | None = None
        self._sampled: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        return len(self.seqs)

    @property
    def done(self) -> bool:
        return not self.active

    def shared_prefix_tokens(self) -> int:
        return sum(len(p) for p in self.prefixes)

    # --- inputs -------------------------------------------------------------------------------
    def prefix_chunks(self, pad_id: int, chunk: int):
        """The right-padded prefix batch `[G, P_max]` in chunks of `chunk` positions: yields each
        chunk's ids, positions and step."""
        ids = torch.full((len(self.prefixes), self.p_max), pad_id, dtype=torch.long)
        for g, prefix in enumerate(self.prefixes):
            ids[g, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        ids = ids.to(self.device)
        for (c0, c1), positions, step in self.layout.prefix_steps(self.p_max, chunk):
            yield ids[:, c0:c1], positions, step

    def suffix_inputs(self) -> tuple[torch.Tensor, torch.Tensor, ArmStep]:
        """Every arm's suffix, packed back to back as one `[1, T]` sequence (no padding), its
        positions P_g + slot, and the step."""
        ids = torch.tensor([[t for seq in self.seqs for t in seq.suffix_ids]], dtype=torch.long)
        positions, step = self.layout.suffix_step()
        return ids.to(self.device), positions, step

    def decode_inputs(self) -> tuple[torch.Tensor, torch.Tensor, ArmStep]:
        """The last token of each scheduled row `[n, 1]`, its position, and the step.

        The tokens are the previous step's choices, still on the device: a step copies nothing
        from the host unless the set of running rows changed."""
        rows = self.active
        if rows == self._chosen_rows:
            ids = self._chosen[:, None]
        else:
            keep = [i for i, r in enumerate(self._chosen_rows) if not self.seqs[r].finished]
            ids = self._chosen[torch.tensor(keep, device=self.device)][:, None]
        positions, step = self.layout.decode_step(rows, self.step_index, self.suffix_capacity)
        return ids, positions, step

    # --- bookkeeping --------------------------------------------------------------------------
    def last_hidden_index(self) -> torch.Tensor:
        """Index of each row's last suffix token in the packed suffix sequence."""
        return torch.cumsum(self.layout.suffix_lengths, 0) - 1

    def sampling_inputs(self, rows: list[int]):
        """`sample`'s inputs for the scheduled rows, or None when every one is greedy (decided on
        the host, so that a greedy step never asks the device)."""
        key = tuple(rows)
        if key != self._sampled_key:
            sampled = [i for i, r in enumerate(rows) if not self.seqs[r].params.greedy]
            index = torch.tensor(sampled, device=self.device) if sampled else None
            self._sampled_key, self._sampled = key, index
        if self._sampled is None:
            return None
        row_t = self.layout.fold(rows).rows
        uniforms = self.uniforms[row_t, self.step_index]
        return self.temperature[row_t], self.top_p[row_t], uniforms, self._sampled

    def uncertainty_rows(self, rows: list[int]) -> torch.Tensor | None:
        """Positions among `rows` of the rows that asked for token_stats, or None when none did
        (decided on the host and cached, like sampling_inputs)."""
        key = tuple(rows)
        if key != self._stats_key:
            asked = [i for i, r in enumerate(rows) if self.seqs[r].logprobs is not None]
            index = torch.tensor(asked, device=self.device) if asked else None
            self._stats_key, self._stats = key, index
        return self._stats

    def record_uncertainty(self, rows: list[int], logprobs: list[float], entropies: list[float]):
        """Append the log-probability and entropy of each asking row's new token (host values, in
        the order of uncertainty_rows)."""
        asked = [r for r in rows if self.seqs[r].logprobs is not None]
        for row, logprob, entropy in zip(asked, logprobs, entropies):
            self.seqs[row].logprobs.append(logprob)
            self.seqs[row].entropies.append(entropy)

    def keep_hidden(self, rows: list[int], hidden: torch.Tensor) -> None:
        """Store the hidden state [hidden] of each row that asked for it (float16, CPU)."""
        for i, row in enumerate(rows):
            if self.seqs[row].params.return_hidden:
                self.seqs[row].hidden = hidden[i].to(torch.float16).cpu()

    def postprocess(
        self, rows: list[int], chosen: torch.Tensor, tokens: list[int], logits: torch.Tensor
    ) -> None:
        """Append each scheduled row's new token (`chosen` on the device, `tokens` its host copy),
        and finish rows that hit a stop condition."""
        self._chosen, self._chosen_rows = chosen, list(rows)
        for i, (row, token) in enumerate(zip(rows, tokens)):
            seq = self.seqs[row]
            seq.token_ids.append(token)
            if seq.logits is not None:
                seq.logits.append(logits[i].cpu())
            self._check_stop(seq, token)
        self.step_index += 1
        self.active = [r for r in rows if not self.seqs[r].finished]

    def _check_stop(self, seq: Sequence, token: int) -> None:
        params: SamplingParams = seq.params
        if token in self.eos_ids and not params.ignore_eos:
            seq.finish_reason, seq.stop = "eos", token
        elif token in params.stop_token_ids:
            seq.finish_reason, seq.stop = "stop_token", token
        elif (stop := self._completed_stop_string(seq)) is not None:
            seq.finish_reason, seq.stop = "stop_string", stop
        elif len(seq.token_ids) >= params.max_new_tokens:
            seq.finish_reason = "length"

    def _completed_stop_string(self, seq: Sequence) -> str | None:
        """The stop string the newest token completes, if any (the engine refuses stop strings
        without a tokenizer up front)."""
        if not seq.params.stop_strings:
            return None
        # Decode a short tail; a stop string counts once the newest token completes it.
        longest = max(len(s) for s in seq.params.stop_strings)
        tail = seq.token_ids[-(longest + 4) :]
        text = self.tokenizer.decode(tail)
        before = self.tokenizer.decode(tail[:-1])
        for stop in seq.params.stop_strings:
            if stop in text and stop not in before:
                return stop
        return None
