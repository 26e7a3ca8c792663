"""The rows `nudge run`'s engine decodes together on CUDA, and its default chunk size, from the KV
pool's size.

On CPU the engine's pool grows with the work and rows are uncapped (the unit's problems decide).
On CUDA the pool is sized from free device memory at start (engine/kv/kv_pool.py), and the rows that
fit in it follow: each row holds at most its prompt and its budget of new tokens, and the
fixed-shape decode's largest default bucket (512, engine/attention/decode_buckets.py) is the
engine's own cap when it is given none, so the cap is the smaller of the two. A 32-problem unit on an H200 is then limited by its problems,
not by a CPU-sized constant.

The same number is the chunk size of a CUDA run by unit given no `--chunk-size` (`pool_rows`):
one row per problem, so a base unit's problems all decode in one step. Since each unit is one
engine call there, records depend on the chunk size (an identity key of the manifest), so it is
taken from the pool only at a fresh start and recorded; a resume takes the recorded one. A run on
the stream takes none from the pool (splice/run/shape.py `settle`).
"""

from __future__ import annotations

import torch

from nudgeability.engine import engine as engine_module
from nudgeability.engine.attention.decode_buckets import BUCKETS
from nudgeability.splice.run.config import SERVER

# prompt tokens allowed per row beside its new tokens: the tasks' prompts (with the few-shot
# demonstration) are under this
PROMPT_ALLOWANCE = 1024


def rows_for_pool(pool_slots: int, row_slots: int, largest_bucket: int) -> int:
    """Rows that decode together: as many rows of `row_slots` KV slots as `pool_slots` hold, at
    most `largest_bucket`, at least 1."""
    if pool_slots < 1 or row_slots < 1 or largest_bucket < 1:
        raise ValueError(f"positive sizes needed: {pool_slots}, {row_slots}, {largest_bucket}")
    return max(1, min(largest_bucket, pool_slots // row_slots))


def row_slots(max_new_tokens: int, max_new_tokens_arm: int) -> int:
    """The KV slots one row of a run may hold: a base's prompt and budget, or an arm's (its
    base's prompt, reasoning up to the cut, within the base's budget, and its own budget)."""
    return PROMPT_ALLOWANCE + max_new_tokens + max_new_tokens_arm


def pool_rows(pool_slots: int, max_new_tokens: int, max_new_tokens_arm: int) -> int:
    """The rows a CUDA run's engine decodes together (its `max_rows`), and the chunk size of a
    CUDA run given none (module docstring): `rows_for_pool` over rows of `row_slots`, at most
    the largest decode bucket."""
    return rows_for_pool(pool_slots, row_slots(max_new_tokens, max_new_tokens_arm), BUCKETS[-1])


def batches_from_pool(device: str) -> bool:
    """Whether a run on `device` (as validation.py resolves it) takes its rows and its default
    chunk size from the KV pool: where the engine sizes its pool from free memory (CUDA,
    engine/kv/reservation.py `sizes_pool_from_memory`); not on CPU, where the pool grows with the
    work, nor on a server, which batches on its own."""
    return device != SERVER and engine_module.sizes_pool_from_memory(torch.device(device))
