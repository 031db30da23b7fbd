"""Check a request body's declared lengths before kio's native decoder sees it.

The native decoder reserves memory for whatever array length a frame declares, and an
allocation failure there aborts the whole process. This walk reads only lengths and
counts, following the same kio schema, and refuses a frame whose declared sizes exceed
the bytes it has or that sends null where the schema allows none.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import lru_cache
from types import NoneType, UnionType
from typing import Callable, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)


class BadShape(ValueError):
    pass


_FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8,
                "float64": 8, "uuid": 16, "error_code": 2, "timedelta_i32": 4,
                "timedelta_i64": 8, "datetime_i64": 8}
_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _nullable(field: dataclasses.Field) -> bool:
    return get_origin(field.type) is UnionType and NoneType in get_args(field.type)


class _Reader:
    def __init__(self, buf: bytes, position: int) -> None:
        self.buf = buf
        self.position = position

    def remaining(self) -> int:
        return len(self.buf) - self.position

    def skip(self, size: int) -> None:
        if size < 0 or size > self.remaining():
            raise BadShape(f"declares {size} bytes with {self.remaining()} left")
        self.position += size

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.position >= len(self.buf):
                raise BadShape("varint runs past the end of the frame")
            byte = self.buf[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 35:
                raise BadShape("varint is too long")

    def fixed(self, codec: struct.Struct) -> int:
        if codec.size > self.remaining():
            raise BadShape("frame ends inside a field")
        (value,) = codec.unpack_from(self.buf, self.position)
        self.position += codec.size
        return value

    def length(self, flexible: bool, wide: bool) -> int:
        """A string/bytes/array length; -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return self.fixed(_INT32 if wide else _INT16)


@lru_cache(maxsize=None)
def _plan(entity: type) -> list[Callable[[_Reader], None]]:
    """One checker per non-tagged field, in wire order; a run of fixed-size fields is one
    skip (a Fetch request repeats six of them for each of thousands of partitions)."""
    flexible = entity.__flexible__
    steps = []
    fixed_run = 0
    for field in dataclasses.fields(entity):
        if get_field_tag(field) is not None:
            continue  # tagged fields sit in the tagged section, skipped as a whole
        size = _fixed_size(field)
        if size is not None:
            fixed_run += size
            continue
        if fixed_run:
            steps.append(_skipper(fixed_run))
            fixed_run = 0
        steps.append(_field_checker(field, flexible))
    if fixed_run:
        steps.append(_skipper(fixed_run))
    return steps


def _fixed_size(field: dataclasses.Field) -> int | None:
    """The wire size of a field of a fixed-size primitive type (not an array)."""
    kind = classify_field(field)
    if kind.is_array or isinstance(kind, (EntityField, EntityTupleField)):
        return None
    return _FIXED_SIZES.get(get_schema_field_type(field))


def _skipper(size: int) -> Callable[[_Reader], None]:
    return lambda r: r.skip(size)


def _field_checker(field: dataclasses.Field, flexible: bool) -> Callable[[_Reader], None]:
    kind = classify_field(field)
    nullable = _nullable(field)
    if isinstance(kind, (EntityField, EntityTupleField)):
        element: Callable[[_Reader], None] = lambda r, t=kind.type_: _check_entity(t, r)
    else:
        kafka_type = get_schema_field_type(field)
        element = _primitive_checker(kafka_type, flexible)
    if not kind.is_array:
        if isinstance(kind, EntityField) and nullable:
            def nullable_entity(r: _Reader) -> None:
                if r.fixed(_INT8) >= 0:
                    element(r)
            return nullable_entity
        return element

    def array(r: _Reader) -> None:
        count = r.length(flexible, wide=True)
        if count < 0:
            if not nullable:
                raise BadShape(f"null array for non-nullable field {field.name}")
            return
        if count > r.remaining():
            raise BadShape(f"{field.name} declares {count} elements with {r.remaining()} bytes left")
        for _ in range(count):
            element(r)
    return array


def _primitive_checker(kafka_type: str, flexible: bool) -> Callable[[_Reader], None]:
    if kafka_type in _FIXED_SIZES:
        return _skipper(_FIXED_SIZES[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        wide = kafka_type != "string"

        def sized(r: _Reader) -> None:
            length = r.length(flexible, wide)
            if length >= 0:
                r.skip(length)
        return sized
    raise BadShape(f"unknown field type {kafka_type}")


def _check_entity(entity: type, r: _Reader) -> None:
    for step in _plan(entity):
        step(r)
    if entity.__flexible__:
        for _ in range(r.uvarint()):
            r.uvarint()
            r.skip(r.uvarint())


def check_shape(entity: type, buf: bytes, position: int) -> None:
    """Raise BadShape unless every declared size of ``entity`` at ``position`` fits."""
    _check_entity(entity, _Reader(buf, position))

