"""Build kio entities of any version from one set of keyword arguments.

Handlers describe a response once; ``make`` keeps the fields the chosen version has and
converts plain values to the types kio's codec expects (ErrorCode, timedelta, datetime).
"""

from __future__ import annotations

import dataclasses
import datetime
from functools import lru_cache
from typing import Any, Callable

from kio.schema.errors import ErrorCode

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


def _timedelta(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _datetime(value: Any) -> Any:
    if isinstance(value, int):
        return None if value < 0 else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


def _error_code(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(int(value))


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "timedelta_i32": _timedelta,
    "timedelta_i64": _timedelta,
    "datetime_i64": _datetime,
    "error_code": _error_code,
}


@lru_cache(maxsize=None)
def _field_converters(cls: type) -> dict[str, Callable[[Any], Any] | None]:
    return {
        f.name: _CONVERTERS.get(f.metadata.get("kafka_type", ""))
        for f in dataclasses.fields(cls)
    }


def make(cls: type, **values: Any) -> Any:
    converters = _field_converters(cls)
    kwargs = {}
    for name, value in values.items():
        if name not in converters:
            continue
        convert = converters[name]
        kwargs[name] = convert(value) if convert is not None and value is not None else value
    return cls(**kwargs)


def entity_maker(cls: type, *names: str) -> Callable[..., Any]:
    """``make(cls, **dict(zip(names, values)))`` for many entities of one class (the 10,000
    partitions of a Metadata response): which of ``names`` the class has at its version is
    worked out once, not per entity. The values must already be of their fields' types:
    none is converted."""
    kept = [(i, name) for i, name in enumerate(names) if name in _field_converters(cls)]

    def build(*values: Any) -> Any:
        return cls(**{name: values[i] for i, name in kept})
    return build


def has_field(cls: type, name: str) -> bool:
    return name in _field_converters(cls)


def millis(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """Milliseconds from a kio timedelta/datetime field (or -1 for a null datetime)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH).total_seconds() * 1000)
    return int(value)
