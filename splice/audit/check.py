"""The outcome of one audit check: a status and one line naming the first problem found.

Every check of `nudge verify` (splice/audit/README.md) returns one `Check`, so that an auditor sees
the cause at once: the first problem, and how many there are in all (`summary`).
"""

from __future__ import annotations

from dataclasses import dataclass

OK, FAIL, UNSEALED, SKIPPED = "ok", "FAIL", "unsealed", "skipped"
NOT_CHECKABLE = "not checkable"  # what a remote run's files cannot show (its weights)


@dataclass(frozen=True)
class Check:
    """The outcome of one check: `status` is ok, FAIL, unsealed, skipped or not checkable;
    `detail` one line."""

    name: str  # "inputs" | "weights" (a remote run) | "completeness" | "integrity" | "replay"
    status: str
    detail: str
    warnings: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def line(self) -> str:
        text = f"{self.name}: {self.status}: {self.detail}"
        return text + "".join(f"; warning: {warning}" for warning in self.warnings)


def summary(problems: list[str], what: str) -> str:
    """The first problem, and how many there are in all."""
    more = f" (and {len(problems) - 1} more {what})" if len(problems) > 1 else ""
    return problems[0] + more
