"""Kafka's coordinator record layouts, as written to ``__consumer_offsets`` and
``__transaction_state``: a big-endian int16 version, then the fields of that version.

Non-flexible versions use int16-length strings and int32-length arrays and bytes; flexible
ones (``compact_*``) use unsigned-varint lengths plus one and end each structure with tagged
fields (a count, then per field its tag, size and bytes).
"""

from __future__ import annotations

import struct
import uuid

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class MalformedRecord(ValueError):
    """A coordinator record this broker cannot read."""


class RecordWriter:
    def __init__(self) -> None:
        self.out = bytearray()

    def _pack(self, layout: struct.Struct, value: int) -> RecordWriter:
        self.out += layout.pack(value)
        return self

    def int8(self, value: int) -> RecordWriter:
        return self._pack(_INT8, value)

    def int16(self, value: int) -> RecordWriter:
        return self._pack(_INT16, value)

    def int32(self, value: int) -> RecordWriter:
        return self._pack(_INT32, value)

    def int64(self, value: int) -> RecordWriter:
        return self._pack(_INT64, value)

    def string(self, value: str | None) -> RecordWriter:
        if value is None:
            return self.int16(-1)
        raw = value.encode()
        self.int16(len(raw))
        self.out += raw
        return self

    def bytes(self, value: bytes) -> RecordWriter:
        self.int32(len(value))
        self.out += value
        return self

    def unsigned_varint(self, value: int) -> RecordWriter:
        while value >= 0x80:
            self.out.append(value & 0x7F | 0x80)
            value >>= 7
        self.out.append(value)
        return self

    def compact_string(self, value: str) -> RecordWriter:
        raw = value.encode()
        self.unsigned_varint(len(raw) + 1)
        self.out += raw
        return self

    def compact_nullable_string(self, value: str | None) -> RecordWriter:
        return self.unsigned_varint(0) if value is None else self.compact_string(value)

    def uuid(self, value: uuid.UUID) -> RecordWriter:
        self.out += value.bytes
        return self

    def array_length(self, length: int, compact: bool) -> RecordWriter:
        """An array's element count (-1: null), as ``RecordReader.array_length`` reads it."""
        return self.unsigned_varint(length + 1) if compact else self.int32(length)

    def tagged_fields(self, fields: dict[int, bytes]) -> RecordWriter:
        """The tagged fields of a flexible structure, by tag (none: an empty set)."""
        self.unsigned_varint(len(fields))
        for tag in sorted(fields):
            self.unsigned_varint(tag).unsigned_varint(len(fields[tag]))
            self.out += fields[tag]
        return self

    def to_bytes(self) -> bytes:
        return bytes(self.out)


class RecordReader:
    """Reads one record; any shortfall or bad field raises ``error`` (a MalformedRecord)."""

    def __init__(self, data: bytes, error: type[MalformedRecord] = MalformedRecord) -> None:
        self.data = data
        self.position = 0
        self.error = error

    def _unpack(self, layout: struct.Struct) -> int:
        try:
            (value,) = layout.unpack_from(self.data, self.position)
        except struct.error:
            raise self.error("record ends early") from None
        self.position += layout.size
        return value

    def int8(self) -> int:
        return self._unpack(_INT8)

    def int16(self) -> int:
        return self._unpack(_INT16)

    def int32(self) -> int:
        return self._unpack(_INT32)

    def int64(self) -> int:
        return self._unpack(_INT64)

    def unsigned_varint(self) -> int:
        value = shift = 0
        while True:
            if self.position >= len(self.data) or shift > 28:
                raise self.error("bad unsigned varint")
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def _raw(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise self.error("record ends early")
        raw = self.data[self.position:self.position + size]
        self.position += size
        return bytes(raw)

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise self.error("string is not UTF-8") from None

    def string(self) -> str | None:
        size = self.int16()
        return None if size == -1 else self._decode(self._raw(size))

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise self.error("null where a string is required")
        return value

    def compact_string(self) -> str:
        size = self.unsigned_varint() - 1
        if size < 0:
            raise self.error("null where a string is required")
        return self._decode(self._raw(size))

    def compact_nullable_string(self) -> str | None:
        size = self.unsigned_varint() - 1
        return None if size < 0 else self._decode(self._raw(size))

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._raw(16))

    def array_length(self, compact: bool) -> int:
        """An array's element count; -1 for a null array."""
        return self.unsigned_varint() - 1 if compact else self.int32()

    def bytes(self) -> bytes:
        return self._raw(self.int32())

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields of a flexible structure, by tag."""
        fields = {}
        for _ in range(self.unsigned_varint()):
            tag = self.unsigned_varint()
            fields[tag] = self._raw(self.unsigned_varint())
        return fields
