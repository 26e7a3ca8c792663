"""A user's interventions (`nudge run --interventions FILE`): loaded from their file, or read back
as data from a run's manifest, checked, and made into the run's `ConditionSet`.

The file is data — TOML (`[[interventions]]` tables) or JSON (a list of objects, or an object
with the list under `interventions`), each entry holding the fields of
splice/experiment/interventions.py `Intervention` — or Python that defines `INTERVENTIONS`, a
list of `Intervention`; splice/README.md *Your own interventions* has a worked example. Only
`nudge run` starting a run loads the file (and so executes a Python one): the manifest records the
definitions as data (`Intervention.to_dict`) with the file's sha256, and a resume, `nudge verify`,
`nudge stats` and `nudge report` read them from there (`from_definitions`), hashing the file's
bytes at most. Everything wrong is one `InterventionFileError` line naming the file, the line
(the entry, for data) and the field: a syntax error, an exception while it runs, a missing or
malformed list, an intervention that cannot run (`check_intervention`: an unknown base, a missing
text, ...), a code used twice or colliding with a shipped condition, and a pair with one side only.
"""

from __future__ import annotations

import ast
import hashlib
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from nudgeability.splice.experiment.conditions import (
    ConditionSet,
    UserConditionError,
)
from nudgeability.splice.experiment.interventions import (
    DEFINITION_FIELDS,
    Condition,
    InterventionError,
    check_intervention,
)
from nudgeability.splice.experiment.sentences import tomllib

LIST_NAME = "INTERVENTIONS"  # the name a Python file binds its interventions to
DATA_KEY = "interventions"  # the key a TOML or JSON file holds its list under
SHIPPED_ONLY = ("sentence", "voice")  # what only the shipped arms read


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
    conditions: ConditionSet  # the shipped conditions and the file's arms, in the file's order

    @property
    def interventions(self) -> tuple[Condition, ...]:
        return self.conditions.user

    def definitions(self) -> list[dict]:
        """What the manifest records of the file's arms (`Intervention.to_dict`)."""
        return [arm.to_dict() for arm in self.interventions]


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (what the manifest's `inputs.interventions.sha256` holds)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_intervention_file(path: str | Path) -> InterventionFile:
    """Read the file (a `.toml` or `.json` as data; anything else is run as Python), check its
    interventions and make them the run's conditions; `InterventionFileError` if not."""
    path = Path(path).expanduser().resolve()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InterventionFileError(path, 0, "file", exc.strerror or str(exc)) from None
    if path.suffix.lower() in (".toml", ".json"):
        found, lines = _read_data(path, data)
    else:
        found, lines = _run_python(path, data)
    return InterventionFile(
        str(path), hashlib.sha256(data).hexdigest(), _checked(path, found, lines)
    )


def from_definitions(definitions: object, where: str | Path) -> ConditionSet:
    """The conditions of a run whose manifest records `definitions` (a list of
    `Intervention.to_dict`; None: the shipped ones only); `InterventionFileError` naming `where`
    and the entry when one is malformed. Runs nothing."""
    if definitions is None:
        return ConditionSet()
    if not isinstance(definitions, list):
        raise InterventionFileError(where, 0, DATA_KEY, "expected a list of interventions")
    return _checked(Path(where), [_arm(where, k, d) for k, d in enumerate(definitions)], None)


# ---------------------------------------------------------------- the two kinds of file
def _read_data(path: Path, data: bytes) -> tuple[list[Condition], None]:
    try:
        if path.suffix.lower() == ".toml":
            parsed = tomllib.loads(data.decode("utf-8"))
        else:
            parsed = json.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InterventionFileError(
            path, getattr(exc, "lineno", 0) or 0, "syntax", str(exc)
        ) from None
    except json.JSONDecodeError as exc:
        raise InterventionFileError(path, exc.lineno, "syntax", exc.msg) from None
    entries = parsed.get(DATA_KEY) if isinstance(parsed, dict) else parsed
    if not isinstance(entries, list) or not entries:
        raise InterventionFileError(
            path, 0, DATA_KEY, f"give a non-empty list of interventions under '{DATA_KEY}'"
        )
    return [_arm(path, k, entry) for k, entry in enumerate(entries)], None


def _arm(path: str | Path, k: int, entry: object) -> Condition:
    """One data entry as an arm; a missing or unknown key is named."""
    where = f"{DATA_KEY}[{k}]"
    if not isinstance(entry, dict):
        raise InterventionFileError(
            path, 0, where, f"not a table of fields: {type(entry).__name__}"
        )
    unknown = sorted(set(entry) - set(DEFINITION_FIELDS))
    if unknown:
        raise InterventionFileError(
            path,
            0,
            f"{where}.{unknown[0]}",
            f"unknown field; known: {', '.join(DEFINITION_FIELDS)}",
        )
    for name in ("code", "description"):
        if name not in entry:
            raise InterventionFileError(path, 0, f"{where}.{name}", "missing")
    return Condition(**entry)


def _run_python(path: Path, data: bytes) -> tuple[list[Condition], list[int]]:
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
        if not isinstance(item, Condition):
            raise InterventionFileError(
                path, 1, f"{LIST_NAME}[{k}]", f"not an Intervention: {type(item).__name__}"
            )
    return list(found), _entry_lines(data, len(found))


def _entry_lines(source: bytes, count: int) -> list[int]:
    """The line of each entry of the file's `INTERVENTIONS = [...]` literal; the assignment's
    line for each when the list is built otherwise (a comprehension, a concatenation)."""
    line, entries = 1, []
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == LIST_NAME for t in targets):
            line = node.lineno
            value = node.value
            entries = value.elts if isinstance(value, (ast.List, ast.Tuple)) else []
    lines = [e.lineno for e in entries if not isinstance(e, ast.Starred)]
    return lines if len(lines) == count else [line] * count


# ---------------------------------------------------------------- the checks
def _checked(path: Path, found: Sequence[Condition], lines: list[int] | None) -> ConditionSet:
    """The arms checked one by one, then as a set; each error names the entry's line (a Python
    file) or `interventions[k]` (data)."""

    def fail(k: int, field: str, message: str):
        if lines is None:
            return InterventionFileError(path, 0, f"{DATA_KEY}[{k}].{field}", message)
        return InterventionFileError(path, lines[k], field, message)

    arms = []
    for k, item in enumerate(found):
        try:
            check_intervention(item)
        except InterventionError as exc:
            raise fail(k, exc.field, str(exc)) from None
        for name in SHIPPED_ONLY:
            if getattr(item, name) is not None:
                raise fail(k, name, f"{name} is the shipped arms'; give your own text")
        arms.append(replace(item, user=True))
    try:
        return ConditionSet(tuple(arms))
    except UserConditionError as exc:
        raise fail(exc.index, exc.field, str(exc)) from None
