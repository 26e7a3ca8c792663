"""The JSON form of the result dataclasses (stats.json), and back.

`to_jsonable` writes every field and, for readers outside Python, every property (Rate.percent,
ExperimentSummary.S, ...); NaN becomes null. `from_jsonable` rebuilds a dataclass from the fields
alone, guided by its type hints, so a stats.json round-trips to equal objects.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from functools import cache

import numpy as np


def to_jsonable(value):
    """Plain JSON data (dicts, lists, str, int, float, None) from result objects."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {
            f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value) if f.repr
        }
        for name in _properties(type(value)):
            out[name] = to_jsonable(getattr(value, name))
        return out
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


@cache
def _properties(cls: type) -> tuple[str, ...]:
    return tuple(
        name
        for name in dir(cls)
        if not name.startswith("_") and isinstance(getattr(cls, name), property)
    )


def from_jsonable(cls, data):
    """Rebuild an object of type `cls` (a dataclass, or a container of them) from to_jsonable data.

    Raises ValueError naming the field when data does not fit the type.
    """
    return _decode(cls, data, cls.__name__ if isinstance(cls, type) else "value")


def _decode(hint, data, where: str):
    origin = typing.get_origin(hint)
    if hint is typing.Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        inner = [h for h in options if h is not type(None)]
        return _decode(inner[0], data, where)
    if data is None and hint is float:
        return float("nan")
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise ValueError(f"stats field {where}: expected an object for {hint.__name__}")
        hints = typing.get_type_hints(hint)
        kwargs = {}
        for f in dataclasses.fields(hint):
            if f.name in data:
                kwargs[f.name] = _decode(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"stats field {where}.{f.name} is missing")
        return hint(**kwargs)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
        return tuple(_decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        return {key_type(k): _decode(value_type, v, f"{where}[{k!r}]") for k, v in data.items()}
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(data)]
    if hint in (int, float, str, bool):
        if not isinstance(data, (int, float, str, bool)):
            raise ValueError(
                f"stats field {where}: expected {hint.__name__}, got {type(data).__name__}"
            )
        return hint(data)
    if hint is np.ndarray:
        return np.asarray(data)
    return data
