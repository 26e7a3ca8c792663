"""The progress bar of one remote backend call: sequences done, requests in flight, rate, retries
(a tqdm bar on a terminal, plain lines in a log: util/progress.py)."""

from __future__ import annotations

import time

from nudgeability.backends.http_client import ClientStats
from nudgeability.util.progress import progress_bar


class RequestBar:
    """A bar over the sequences of one call; `refresh()` after any change of the stats."""

    def __init__(self, total: int, stats: ClientStats, enabled: bool, label: str):
        self.stats = stats
        self.retries_before = stats.retries
        self.start = time.perf_counter()
        self.done = 0
        self.bar = progress_bar(total, f"{label:>8}", "seq", enabled=enabled, leave=False)

    def refresh(self) -> None:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix(
            {
                "in flight": self.stats.in_flight,
                "arms/s": f"{self.done / seconds:.2f}",
                "retries": self.stats.retries - self.retries_before,
            },
        )

    def advance(self) -> None:
        self.done += 1
        self.bar.update(1)
        self.refresh()

    def close(self) -> None:
        self.bar.close()
