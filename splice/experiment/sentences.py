"""The inserted sentences: loading and checking a sentences file (TOML), and picking a condition's.

The file (default: the shipped `sentences.toml`) holds a top-level `neutral` string and one table
per voice (`first`, `second`, `reviewer`, `expert`), each with a `confidence` and a `doubt` string.
Every key is required and no other key is allowed, so a typo fails loudly instead of silently
dropping an arm.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from nudgeability.splice.experiment.conditions import POLARITY_NAMES, VOICES, Condition

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

DEFAULT_SENTENCES_PATH = Path(__file__).resolve().parent / "sentences.toml"
_POLARITIES = tuple(POLARITY_NAMES.values())


class SentencesFileError(ValueError):
    """A sentences file the user can fix: the message names the file and the missing or bad key."""

    def __init__(self, path: str | os.PathLike, message: str):
        self.path = str(path)
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class Sentences:
    """The sentences of one file, by id ("first.confidence", ..., "neutral")."""

    source: str  # the file they were read from
    sha256: str  # of the file's bytes, for the run manifest
    texts: MappingProxyType

    def text(self, sentence_id: str) -> str:
        """The sentence with this id; KeyError if there is none."""
        return self.texts[sentence_id]

    def sentence_for(self, condition: Condition) -> tuple[str, str] | None:
        """`(sentence_id, text)` inserted by this condition, or None (NT, B, oracle_B, empty)."""
        sentence_id = condition.sentence_id
        return None if sentence_id is None else (sentence_id, self.texts[sentence_id])


def _sentence(value: object, path: str | os.PathLike, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SentencesFileError(path, f"'{key}' must be a non-empty string")
    return value.strip()


def load_sentences(path: str | os.PathLike | None = None) -> Sentences:
    """Read and check a sentences file (default: the shipped `sentences.toml`).

    Raises `SentencesFileError` (a ValueError) naming the file and the key when the TOML does not
    parse, a voice table or a polarity is missing, a value is not a non-empty string, or a key is
    unknown, and when the path is missing or not a file.
    """
    path = DEFAULT_SENTENCES_PATH if path is None else Path(path)
    if not Path(path).is_file():
        what = "is a directory" if Path(path).is_dir() else "no such file"
        raise SentencesFileError(
            path,
            f"{what}; pass a sentences file (TOML, the keys of sentences.toml) with --sentences",
        )
    raw = Path(path).read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SentencesFileError(path, f"not a valid TOML file ({exc})") from None
    texts: dict[str, str] = {}
    if "neutral" not in data:
        raise SentencesFileError(path, "no 'neutral' sentence; add neutral = \"...\" at the top")
    texts["neutral"] = _sentence(data["neutral"], path, "neutral")
    for voice in VOICES:
        table = data.get(voice)
        if not isinstance(table, dict):
            raise SentencesFileError(
                path, f'no [{voice}] table; add one with confidence = "..." and doubt = "..."'
            )
        for polarity in _POLARITIES:
            key = f"{voice}.{polarity}"
            if polarity not in table:
                raise SentencesFileError(
                    path,
                    f"[{voice}] has no '{polarity}' sentence "
                    f"('{key}'); add {polarity} = \"...\" under [{voice}]",
                )
            texts[key] = _sentence(table[polarity], path, key)
        unknown = sorted(set(table) - set(_POLARITIES))
        if unknown:
            raise SentencesFileError(
                path,
                f"unknown key '{voice}.{unknown[0]}'; a voice table "
                f"holds only {' and '.join(_POLARITIES)}",
            )
    unknown = sorted(set(data) - {"neutral", *VOICES})
    if unknown:
        raise SentencesFileError(
            path,
            f"unknown key '{unknown[0]}'; the file holds neutral and "
            f"the tables {', '.join(VOICES)}",
        )
    return Sentences(
        source=str(path), sha256=hashlib.sha256(raw).hexdigest(), texts=MappingProxyType(texts)
    )
