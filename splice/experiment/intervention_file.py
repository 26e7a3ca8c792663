"""Loading a user's interventions file (`nudge run --interventions FILE`) and checking it.

The file is Python that defines `INTERVENTIONS`, a list of `Intervention`
(splice/experiment/interventions.py); splice/README.md *Your own interventions* has a worked
example. Everything wrong with it is one `InterventionFileError` line naming the file, the line
and the field: a syntax error, an exception while it runs, a missing or malformed
`INTERVENTIONS`, an intervention that cannot run (`check_intervention`: an unknown base, a missing
text, ...), a code used twice or colliding with a shipped condition, and a pair with one side only.
The conditions it adds are made by splice/experiment/conditions.py `arm_condition`.
"""

from __future__ import annotations

import hashlib
import traceback
from dataclasses import dataclass
from pathlib import Path

from nudgeability.splice.experiment.conditions import (
    CONDITION_CODES,
    CONSISTENCY,
    PRESETS,
    SHIPPED_PAIRS,
    Condition,
    arm_condition,
)
from nudgeability.splice.experiment.interventions import (
    Intervention,
    InterventionError,
    check_intervention,
)

LIST_NAME = "INTERVENTIONS"  # the name the file binds its interventions to


class InterventionFileError(ValueError):
    """A user's interventions file that cannot be used: `FILE:LINE: FIELD: what is wrong`."""

    def __init__(self, path: str | Path, line: int, field: str, message: str):
        self.path, self.line, self.field = str(path), line, field
        super().__init__(f"{path}:{line}: {field}: {message}")


@dataclass(frozen=True)
class InterventionFile:
    """A loaded, checked interventions file."""

    path: str  # absolute
    sha256: str  # of its bytes, for the run manifest
    interventions: tuple[Intervention, ...]

    def conditions(self) -> list[Condition]:
        """Its arms as the run's conditions, in the file's order."""
        return [arm_condition(i, user=True) for i in self.interventions]


def load_intervention_file(path: str | Path) -> InterventionFile:
    """Run the file, read its `INTERVENTIONS` and check them; `InterventionFileError` if not."""
    path = Path(path).expanduser().resolve()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InterventionFileError(path, 0, "file", exc.strerror or str(exc)) from None
    try:
        code = compile(data, str(path), "exec")
    except SyntaxError as exc:
        raise InterventionFileError(path, exc.lineno or 0, "syntax", exc.msg) from None
    namespace = {"__name__": "nudge_interventions", "__file__": str(path)}
    try:
        exec(code, namespace)
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else 0
        raise InterventionFileError(path, line, type(exc).__name__, str(exc)) from None
    found = namespace.get(LIST_NAME)
    if not isinstance(found, (list, tuple)) or not found:
        raise InterventionFileError(
            path, 1, LIST_NAME, f"define {LIST_NAME} = [Intervention(...), ...] (a non-empty list)"
        )
    for k, item in enumerate(found):
        if not isinstance(item, Intervention):
            raise InterventionFileError(
                path, 1, f"{LIST_NAME}[{k}]", f"not an Intervention: {type(item).__name__}"
            )
    interventions = tuple(found)
    _check(path, interventions)
    return InterventionFile(str(path), hashlib.sha256(data).hexdigest(), interventions)


def _line(path: Path, intervention: Intervention) -> int:
    where = intervention.where
    return where[1] if where is not None and where[0] == str(path) else 1


def _check(path: Path, interventions: tuple[Intervention, ...]) -> None:
    taken = {c.lower() for c in (*CONDITION_CODES, *PRESETS, CONSISTENCY)}
    seen: set[str] = set()
    sides: dict[str, dict[str, Intervention]] = {}
    for item in interventions:
        try:
            check_intervention(item)
        except InterventionError as exc:
            raise InterventionFileError(path, _line(path, item), exc.field, str(exc)) from None
        where = _line(path, item)
        for name in ("sentence", "voice", "polarity"):  # what only the shipped arms read
            if getattr(item, name) is not None:
                raise InterventionFileError(
                    path, where, name, f"{name} is the shipped arms'; give your own text"
                )
        if item.code.lower() in taken:
            raise InterventionFileError(
                path, where, "code", f"{item.code!r} is a shipped condition's; choose another"
            )
        if item.code.lower() in seen:
            raise InterventionFileError(path, where, "code", f"{item.code!r} is defined twice")
        seen.add(item.code.lower())
        if item.pair is not None:
            if item.pair in SHIPPED_PAIRS:
                raise InterventionFileError(
                    path, where, "pair", f"{item.pair!r} is a shipped pair's; choose another"
                )
            pair = sides.setdefault(item.pair, {})
            if item.side in pair:
                raise InterventionFileError(
                    path, where, "side", f"pair {item.pair!r} already has a {item.side!r} side"
                )
            pair[item.side] = item
    for name, pair in sides.items():
        if len(pair) == 1:
            (lone,) = pair.values()
            raise InterventionFileError(
                path, _line(path, lone), "pair", f"pair {name!r} has one side only: add its other"
            )
        if pair["+"].base != pair["-"].base:
            raise InterventionFileError(
                path, _line(path, pair["-"]), "base", f"pair {name!r}: both sides need one base"
            )
