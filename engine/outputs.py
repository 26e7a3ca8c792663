"""After the forward: the sampling inputs of the rows that choose a token, and what each chosen
token does to its row (appended, recorded, checked against the row's stop conditions)."""

from __future__ import annotations

import torch

from nudgeability.engine.sequence import Row


def sampling_inputs(rows: list[Row], device):
    """`sampler.sample`'s inputs for `rows`, or None when every one is greedy (decided on the
    host, so that a greedy step sends nothing to the device)."""
    sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
    if not sampled:
        return None
    temperature = torch.tensor([r.params.temperature for r in rows], device=device)
    top_p = torch.tensor([r.params.top_p for r in rows], device=device)
    uniforms = torch.tensor(
        [r.uniforms[len(r.token_ids)] if r.uniforms is not None else 0.0 for r in rows],
        dtype=torch.float64,
        device=device,
    )
    return temperature, top_p, uniforms, torch.tensor(sampled, device=device)


def uncertainty_rows(rows: list[Row], device) -> torch.Tensor | None:
    """Positions among `rows` of those that asked for token_stats, or None when none did."""
    asked = [i for i, r in enumerate(rows) if r.logprobs is not None]
    return torch.tensor(asked, device=device) if asked else None


def record_uncertainty(rows: list[Row], logprobs: list[float], entropies: list[float]):
    """Append the log-probability and entropy of each asking row's new token (host values, in
    the order of uncertainty_rows)."""
    asked = [r for r in rows if r.logprobs is not None]
    for row, logprob, entropy in zip(asked, logprobs, entropies):
        row.logprobs.append(logprob)
        row.entropies.append(entropy)


def keep_hidden(rows: list[Row], hidden: torch.Tensor) -> None:
    """Store the hidden state that chose each row's first token, for the rows that asked for it
    (float16, CPU): the state at the prompt's last position."""
    for i, row in enumerate(rows):
        if row.params.return_hidden and not row.token_ids:
            row.hidden = hidden[i].to(torch.float16).cpu()


def append_tokens(
    rows: list[Row], tokens: list[int], logits: torch.Tensor, eos_ids: set[int], tokenizer
) -> list[Row]:
    """Append each row's new token (and its logits when asked); the rows it finished."""
    finished = []
    for i, (row, token) in enumerate(zip(rows, tokens)):
        row.token_ids.append(token)
        row.context.append(token)
        if row.logits is not None:
            row.logits.append(logits[i].cpu())
        _check_stop(row, token, eos_ids, tokenizer)
        if row.finished:
            finished.append(row)
    return finished


def _check_stop(row: Row, token: int, eos_ids: set[int], tokenizer) -> None:
    params = row.params
    if token in eos_ids and not params.ignore_eos:
        row.finish_reason, row.stop = "eos", token
    elif token in params.stop_token_ids:
        row.finish_reason, row.stop = "stop_token", token
    elif (stop := _completed_stop_string(row, tokenizer)) is not None:
        row.finish_reason, row.stop = "stop_string", stop
    elif len(row.token_ids) >= params.max_new_tokens:
        row.finish_reason = "length"


def _completed_stop_string(row: Row, tokenizer) -> str | None:
    """The stop string the newest token completes, if any (the engine refuses stop strings
    without a tokenizer up front)."""
    if not row.params.stop_strings:
        return None
    # Decode a short tail; a stop string counts once the newest token completes it.
    longest = max(len(s) for s in row.params.stop_strings)
    tail = row.token_ids[-(longest + 4) :]
    text = tokenizer.decode(tail)
    before = tokenizer.decode(tail[:-1])
    for stop in row.params.stop_strings:
        if stop in text and stop not in before:
            return stop
    return None
