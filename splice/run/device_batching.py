"""The rows `nudge run`'s engine decodes together on CUDA, from the KV pool's size.

On CPU the engine's pool grows with the work and rows are uncapped (the unit's problems decide).
On CUDA the pool is sized from free device memory at start (engine/kv/kv_pool.py), and the rows that
fit in it follow: each row holds at most its prompt and its budget of new tokens, and a step of
more rows than the largest fixed-shape decode bucket runs eagerly (engine/attention/static_decode.py), so
the cap is the smaller of the two. A 32-problem unit on an H200 is then limited by its problems,
not by a CPU-sized constant.
"""

from __future__ import annotations

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
