"""Progress bars that suit where stderr goes: tqdm on a terminal, plain periodic lines in a log.

On a terminal, nested bars (a run's phase bar and the engine's per-call bar) redraw in place with
carriage returns and cursor-up codes. Written to a file or a pipe (a batch job's log), those codes
turn into garbage, so there `progress_bar` returns a `LineProgress` instead: one plain line per
`interval` seconds and one when the bar closes, e.g.

    NT: 12/40 problem (30%), prefill tok/s=5400, decode tok/s=92.1

A bar made with `leave=False` (an inner bar) prints only its periodic lines, not a closing one.
Every stage that shows progress gets its bar here (`engine`, `splice`), so the choice is made once.
`NUDGE_PROGRESS_INTERVAL` (seconds, default 30) sets how often a log line is written.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

DEFAULT_INTERVAL = 30.0


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("NUDGE_PROGRESS_INTERVAL", DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


class LineProgress:
    """The part of tqdm's interface the project uses, writing plain lines (see the module doc)."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        disable: bool = False,
        leave: bool = True,
        interval: float | None = None,
        stream: TextIO | None = None,
    ):
        self.total, self.desc, self.unit = total, desc.strip(), unit
        self.disable, self.leave = disable, leave
        self.interval = _interval() if interval is None else interval
        self.stream = stream
        self.n = 0
        self.postfix: dict[str, object] = {}
        self._last = time.monotonic()
        self._closed = False

    def set_postfix(self, postfix: dict | None = None, refresh: bool = True, **kwargs) -> None:
        self.postfix = {**(postfix or {}), **kwargs}

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._write()

    def line(self) -> str:
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        extra = "".join(f", {key}={value}" for key, value in self.postfix.items())
        return f"{self.desc}: {self.n}/{self.total} {self.unit}{share}{extra}"

    def _write(self) -> None:
        if not self.disable:
            print(self.line(), file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        if not self._closed and self.leave:
            self._write()
        self._closed = True

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bar(
    total: int, desc: str, unit: str, enabled: bool = True, leave: bool = True, **tqdm_options
):
    """A tqdm bar when stderr is a terminal (or in a notebook, where tqdm draws a widget), else a
    `LineProgress`; disabled when not `enabled`."""
    if is_terminal() or "ipykernel" in sys.modules:
        from tqdm.auto import tqdm

        return tqdm(
            total=total, desc=desc, unit=unit, disable=not enabled, leave=leave, **tqdm_options
        )
    return LineProgress(total, desc, unit, disable=not enabled, leave=leave)
