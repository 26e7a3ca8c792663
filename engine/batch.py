"""One batch of prefix groups and their arms: token inputs, sampling inputs and stop checks.

Sizes come from `scheduler.BatchSlots` and the attention layout of each forward call from
`attention_layout.ArmLayout`. Rows (arms) are ordered by group, so the rows of one group are
contiguous; a finished row keeps its static suffix slots and is simply no longer scheduled.
"""

from __future__ import annotations

import torch

from nudgeability.engine.attention_layout import ArmLayout, ArmStep
from nudgeability.engine.sampler import token_uncertainty, uniform_stream
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

    def suffix_inputs(self, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, ArmStep]:
        """Right-padded suffixes `[N, S_max]` of every arm at positions P_g + slot, and the step."""
        ids = torch.full((self.num_rows, self.s_max), pad_id, dtype=torch.long)
        for seq in self.seqs:
            ids[seq.row, : len(seq.suffix_ids)] = torch.tensor(seq.suffix_ids, dtype=torch.long)
        positions, step = self.layout.suffix_step(self.active)
        return ids.to(self.device), positions, step

    def decode_inputs(self) -> tuple[torch.Tensor, torch.Tensor, ArmStep]:
        """The last token of each scheduled row `[n, 1]`, its position, and the step."""
        rows = self.active
        ids = torch.tensor(
            [[self.seqs[r].token_ids[-1]] for r in rows], dtype=torch.long, device=self.device
        )
        positions, step = self.layout.decode_step(rows, self.step_index, self.suffix_capacity)
        return ids, positions, step

    # --- bookkeeping --------------------------------------------------------------------------
    def last_hidden_index(self) -> torch.Tensor:
        """Index of each row's last real suffix token in the padded suffix batch."""
        return self.layout.suffix_lengths - 1

    def sampling_inputs(self, rows: list[int]):
        row_t = torch.tensor(rows, device=self.device)
        return self.temperature[row_t], self.top_p[row_t], self.uniforms[row_t, self.step_index]

    def record_uncertainty(self, rows: list[int], tokens, logits: torch.Tensor) -> None:
        """Append each scheduled row's token log-probability and entropy (rows that asked)."""
        wanted = [i for i, row in enumerate(rows) if self.seqs[row].logprobs is not None]
        if not wanted:
            return
        index = torch.tensor(wanted, device=logits.device)
        logprob, entropy = token_uncertainty(logits[index], tokens[index])
        for i, lp, h in zip(wanted, logprob.tolist(), entropy.tolist()):
            self.seqs[rows[i]].logprobs.append(lp)
            self.seqs[rows[i]].entropies.append(h)

    def keep_hidden(self, rows: list[int], hidden: torch.Tensor) -> None:
        """Store the hidden state [hidden] of each row that asked for it (float16, CPU)."""
        for i, row in enumerate(rows):
            if self.seqs[row].params.return_hidden:
                self.seqs[row].hidden = hidden[i].to(torch.float16).cpu()

    def postprocess(self, rows: list[int], tokens: list[int], logits: torch.Tensor) -> None:
        """Append each scheduled row's new token, and finish rows that hit a stop condition."""
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
