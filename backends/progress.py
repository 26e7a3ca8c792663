"""The progress bar of one remote backend call: sequences done, requests in flight, rate, retries."""

from __future__ import annotations

import time

from tqdm.auto import tqdm

from nudgeability.backends.http_client import ClientStats


class RequestBar:
    """A tqdm bar over the sequences of one call; `refresh()` after any change of the stats."""

    def __init__(self, total: int, stats: ClientStats, enabled: bool, label: str):
        self.stats = stats
        self.retries_before = stats.retries
        self.start = time.perf_counter()
        self.done = 0
        self.bar = tqdm(
            total=total,
            desc=f"{label:>8}",
            unit="seq",
            disable=not enabled,
            leave=False,
            dynamic_ncols=True,
        )

    def refresh(self) -> None:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix(
            {
                "in flight": self.stats.in_flight,
                "arms/s": f"{self.done / seconds:.2f}",
                "retries": self.stats.retries - self.retries_before,
            },
            refresh=False,
        )
        self.bar.refresh()

    def advance(self) -> None:
        self.done += 1
        self.bar.update(1)
        self.refresh()

    def close(self) -> None:
        self.bar.close()
