"""One batch of prefix groups and their arms: inputs, positions and step contexts, and bookkeeping.

Rows (arms) are ordered by group, so the rows of one group are contiguous; a finished row keeps
its static suffix slots and is simply no longer scheduled.
"""

from __future__ import annotations

import torch

from nudgeability.engine.fork_cache import StepContext
from nudgeability.engine.sampler import token_uncertainty, uniform_stream
from nudgeability.engine.sampling_params import SamplingParams
from nudgeability.engine.sequence import Sequence


class Batch:
    """Prefix groups `[(prefix_ids, [(suffix_ids, params), ...]), ...]` run together."""

    def __init__(
        self, groups, device, eos_ids: set[int], tokenizer=None, return_logits: bool = False
    ):
        self.device = device
        self.eos_ids = eos_ids
        self.tokenizer = tokenizer
        self.prefixes: list[list[int]] = []
        self.seqs: list[Sequence] = []
        for g, (prefix, arms) in enumerate(groups):
            prefix = list(prefix)
            suffixes = [list(s) for s, _ in arms]
            if any(not s for s in suffixes):
                # An arm needs one input token to produce its first logits: move the prefix's last
                # token into every arm of this group (costs one token per arm, changes nothing else).
                suffixes = [prefix[-1:] + s for s in suffixes]
                prefix = prefix[:-1]
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
        self.prefix_lengths = torch.tensor([len(p) for p in self.prefixes], device=device)
        self.p_max = max(len(p) for p in self.prefixes)
        self.suffix_lengths = torch.tensor([len(s.suffix_ids) for s in self.seqs], device=device)
        self.s_max = max(len(s.suffix_ids) for s in self.seqs)
        self.new_max = max(s.params.max_new_tokens for s in self.seqs)
        self.suffix_capacity = self.s_max + self.new_max - 1
        self.temperature = torch.tensor([s.params.temperature for s in self.seqs], device=device)
        self.top_p = torch.tensor([s.params.top_p for s in self.seqs], device=device)
        self.uniforms = torch.stack([uniform_stream(s.params, self.new_max) for s in self.seqs]).to(
            device
        )
        self.row_group = torch.tensor([s.group for s in self.seqs], device=device)
        self.step_index = 0  # tokens generated so far by every scheduled row
        self.active: list[int] = list(range(len(self.seqs)))
        self._layout_key = None
        self._layout = None

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
        chunk's ids, positions and prefix-phase context."""
        ids = torch.full((len(self.prefixes), self.p_max), pad_id, dtype=torch.long)
        for g, prefix in enumerate(self.prefixes):
            ids[g, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        ids = ids.to(self.device)
        positions = torch.arange(self.p_max, device=self.device).expand(len(self.prefixes), -1)
        for c0 in range(0, self.p_max, chunk):
            c1 = min(c0 + chunk, self.p_max)
            ctx = StepContext(
                phase="prefix", lengths=self.prefix_lengths, prefix_max=self.p_max, chunk_start=c0
            )
            yield ids[:, c0:c1], positions[:, c0:c1], ctx

    def suffix_inputs(self, pad_id: int):
        """Right-padded suffixes `[N, S_max]` of every arm at positions P_g + slot, and the context."""
        ids = torch.full((self.num_rows, self.s_max), pad_id, dtype=torch.long)
        for seq in self.seqs:
            ids[seq.row, : len(seq.suffix_ids)] = torch.tensor(seq.suffix_ids, dtype=torch.long)
        slots = torch.arange(self.s_max, device=self.device).expand(self.num_rows, -1)
        ctx = self._arm_context(self.active, slots, hw=self.s_max)
        positions = slots + self.prefix_lengths[self.row_group][:, None]
        return ids.to(self.device), positions, ctx

    def decode_inputs(self):
        """The last token of each scheduled row `[n, 1]`, its position, and the context."""
        rows = self.active
        ids = torch.tensor(
            [[self.seqs[r].token_ids[-1]] for r in rows], dtype=torch.long, device=self.device
        )
        row_t = torch.tensor(rows, device=self.device)
        # Every scheduled row has generated step_index tokens; the last one goes to slot S_r + step - 1.
        slots = (self.suffix_lengths[row_t] + self.step_index - 1)[:, None]
        hw = min(self.s_max + self.step_index, self.suffix_capacity)
        ctx = self._arm_context(rows, slots, hw)
        positions = slots + self.prefix_lengths[self.row_group[row_t]][:, None]
        return ids, positions, ctx

    def _arm_context(self, rows: list[int], slots: torch.Tensor, hw: int) -> StepContext:
        key = tuple(rows)
        if key != self._layout_key:
            self._layout_key, self._layout = key, self._fold_layout(rows)
        lo, hi, arms, fold_index, row_t, identity = self._layout
        return StepContext(
            phase="arms",
            lengths=self.prefix_lengths,
            rows=row_t,
            rows_are_all=len(rows) == self.num_rows,
            q_slots=slots,
            hw=hw,
            group_lo=lo,
            group_hi=hi,
            arms_per_group=arms,
            fold_index=fold_index,
            fold_is_identity=identity,
            row_group=self.row_group[row_t],
        )

    def _fold_layout(self, rows: list[int]):
        """Where each scheduled row sits in the `[groups, arms]` grid used to fold arms into queries."""
        groups = [self.seqs[r].group for r in rows]
        lo, hi = min(groups), max(groups) + 1
        rank, counts = [], {}
        for g in groups:
            rank.append(counts.get(g, 0))
            counts[g] = rank[-1] + 1
        arms = max(counts.values())
        fold = [(g - lo) * arms + a for g, a in zip(groups, rank)]
        identity = fold == list(range((hi - lo) * arms))
        device = self.device
        return (
            lo,
            hi,
            arms,
            torch.tensor(fold, device=device),
            torch.tensor(rows, device=device),
            identity,
        )

    # --- bookkeeping --------------------------------------------------------------------------
    def last_hidden_index(self) -> torch.Tensor:
        """Index of each row's last real suffix token in the padded suffix batch."""
        return self.suffix_lengths - 1

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
        elif params.stop_strings and self._stop_string(seq):
            pass
        elif len(seq.token_ids) >= params.max_new_tokens:
            seq.finish_reason = "length"

    def _stop_string(self, seq: Sequence) -> bool:
        # Decode a short tail; a stop string counts once the newest token completes it.
        longest = max(len(s) for s in seq.params.stop_strings)
        tail = seq.token_ids[-(longest + 4) :]
        text = self.tokenizer.decode(tail)
        before = self.tokenizer.decode(tail[:-1])
        for stop in seq.params.stop_strings:
            if stop in text and stop not in before:
                seq.finish_reason, seq.stop = "stop_string", stop
                return True
        return False
