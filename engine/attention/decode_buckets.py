"""The row counts the fixed-shape decode pads a step to, and the order CUDA graphs capture them.

A bucket is one static shape: one compile of each FlexAttention call (`static_decode.py`) and one
CUDA graph (`graphed_decode.py`), minutes of compiling and graph-pool memory at the engine's
start. The buckets are powers of two from `SMALLEST` to the engine's row cap rounded up, and
none past it: the scheduler never decodes more rows than the cap, so a larger bucket would be
compiled and captured for no step. Given no `max_rows` the engine caps its rows at
`LARGEST_AT_LEAST`, the largest bucket then (`static_dispatch.StaticDecodeDispatch.row_cap`), so
no decode step is too wide for the fixed-shape path. Pure functions, tested on CPU
(tests/engine/attention/test_decode_buckets.py).
"""

from __future__ import annotations

# 16 rows: the forward's own minimum (model_runner.MIN_ROWS) and Triton's smallest dot tile.
SMALLEST = 16
# The row cap of an engine given none while the fixed-shape decode is on: nano-vllm's default
# row cap (max_num_seqs) and its largest captured batch; a CUDA run's rows
# (splice/run/device_batching.py) go up to it.
LARGEST_AT_LEAST = 512


def bucket_sizes(max_rows: int | None) -> tuple[int, ...]:
    """Powers of two from `SMALLEST` up to `max_rows` rounded up to a power of two (at least
    `SMALLEST`); `max_rows` None (no cap of the caller's own) up to `LARGEST_AT_LEAST`."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    top = LARGEST_AT_LEAST if max_rows is None else max(SMALLEST, 1 << (max_rows - 1).bit_length())
    out, size = [], SMALLEST
    while size <= top:
        out.append(size)
        size *= 2
    return tuple(out)


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest bucket that holds `rows` rows, or None when none does."""
    return next((b for b in buckets if b >= rows), None)


def capture_order(buckets: tuple[int, ...]) -> tuple[int, ...]:
    """The order the buckets' graphs are captured in: largest first, so that every smaller
    graph's memory fits in what the largest one's capture already took from the shared graph
    pool (nano-vllm's `capture_cudagraph` does the same)."""
    return tuple(sorted(set(buckets), reverse=True))


# The buckets of an engine given no row cap (its cap is their largest).
BUCKETS = bucket_sizes(None)
