"""The row counts the fixed-shape decode pads a step to, and the order CUDA graphs capture them.

A bucket is one static shape: one compile of each FlexAttention call (`static_decode.py`) and one
CUDA graph (`graphed_decode.py`). The buckets are powers of two from `SMALLEST` to the engine's
row cap rounded up, and at least `LARGEST_AT_LEAST`, so that no decode step is too wide for the
fixed-shape path: the engine caps its rows at the largest bucket when it is given no `max_rows`
(`static_dispatch.StaticDecodeDispatch.row_cap`). Pure functions, tested on CPU
(tests/engine/attention/test_decode_buckets.py).
"""

from __future__ import annotations

# 16 rows: the forward's own minimum (model_runner.MIN_ROWS) and Triton's smallest dot tile.
SMALLEST = 16
# nano-vllm's default row cap (max_num_seqs) and its largest captured batch; a CUDA run's default
# rows (splice/run/device_batching.py) go up to it.
LARGEST_AT_LEAST = 512


def bucket_sizes(max_rows: int | None) -> tuple[int, ...]:
    """Powers of two from `SMALLEST` up to max(`LARGEST_AT_LEAST`, `max_rows` rounded up to a
    power of two); `max_rows` None is no cap of the caller's own."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    top = max(LARGEST_AT_LEAST, 1 << max(0, (max_rows or 1) - 1).bit_length())
    out, size = [], SMALLEST
    while size <= top:
        out.append(size)
        size *= 2
    return tuple(out)


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest bucket that holds `rows` rows, or None when none does."""
    return next((b for b in buckets if b >= rows), None)


def capture_order(buckets: tuple[int, ...]) -> tuple[int, ...]:
    """The order the buckets' graphs are captured at start: largest first, so that every smaller
    graph's memory fits in what the largest one's capture already took from the shared graph
    pool (nano-vllm's `capture_cudagraph` does the same)."""
    return tuple(sorted(set(buckets), reverse=True))


# The buckets of an engine given no row cap.
BUCKETS = bucket_sizes(None)
