"""Keys and values of the records in ``__consumer_offsets``, in Kafka's own format.

Kafka's layouts (OffsetCommitKey v1 / OffsetCommitValue v3, GroupMetadataKey v2 /
GroupMetadataValue v3: big-endian, int16-length strings, int32-length bytes) keep the topic
readable with Kafka's tools. A null value is a tombstone: the offset or group is deleted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class MalformedGroupRecord(ValueError):
    """A record of ``__consumer_offsets`` this coordinator cannot read."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp: int
    members: tuple[MemberValue, ...]


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def int16(self, value: int) -> "_Writer":
        self.out += _INT16.pack(value)
        return self

    def int32(self, value: int) -> "_Writer":
        self.out += _INT32.pack(value)
        return self

    def int64(self, value: int) -> "_Writer":
        self.out += _INT64.pack(value)
        return self

    def string(self, value: str | None) -> "_Writer":
        if value is None:
            return self.int16(-1)
        raw = value.encode()
        self.int16(len(raw))
        self.out += raw
        return self

    def bytes(self, value: bytes) -> "_Writer":
        self.int32(len(value))
        self.out += value
        return self


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _unpack(self, layout: struct.Struct) -> int:
        try:
            (value,) = layout.unpack_from(self.data, self.position)
        except struct.error:
            raise MalformedGroupRecord("record ends early") from None
        self.position += layout.size
        return value

    def int16(self) -> int:
        return self._unpack(_INT16)

    def int32(self) -> int:
        return self._unpack(_INT32)

    def int64(self) -> int:
        return self._unpack(_INT64)

    def _raw(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise MalformedGroupRecord("record ends early")
        raw = self.data[self.position:self.position + size]
        self.position += size
        return bytes(raw)

    def string(self) -> str | None:
        size = self.int16()
        if size == -1:
            return None
        try:
            return self._raw(size).decode()
        except UnicodeDecodeError:
            raise MalformedGroupRecord("string is not UTF-8") from None

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise MalformedGroupRecord("null where a string is required")
        return value

    def bytes(self) -> bytes:
        return self._raw(self.int32())


def encode_offset_key(key: OffsetKey) -> bytes:
    return bytes(_Writer().int16(OFFSET_KEY_VERSION).string(key.group_id).string(key.topic)
                 .int32(key.partition).out)


def encode_group_key(key: GroupKey) -> bytes:
    return bytes(_Writer().int16(GROUP_KEY_VERSION).string(key.group_id).out)


def encode_offset_value(value: OffsetValue) -> bytes:
    return bytes(_Writer().int16(OFFSET_VALUE_VERSION).int64(value.offset)
                 .int32(value.leader_epoch).string(value.metadata)
                 .int64(value.commit_timestamp).out)


def encode_group_value(value: GroupValue) -> bytes:
    writer = (_Writer().int16(GROUP_VALUE_VERSION).string(value.protocol_type)
              .int32(value.generation_id).string(value.protocol_name).string(value.leader_id)
              .int64(value.state_timestamp).int32(len(value.members)))
    for member in value.members:
        (writer.string(member.member_id).string(member.group_instance_id)
         .string(member.client_id).string(member.client_host)
         .int32(member.rebalance_timeout_ms).int32(member.session_timeout_ms)
         .bytes(member.subscription).bytes(member.assignment))
    return bytes(writer.out)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.int32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.required_string())
    raise MalformedGroupRecord(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data)
    version = reader.int16()
    if version != OFFSET_VALUE_VERSION:
        raise MalformedGroupRecord(f"unsupported offset commit value version {version}")
    return OffsetValue(reader.int64(), reader.int32(), reader.string() or "", reader.int64())


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.int16()
    if version != GROUP_VALUE_VERSION:
        raise MalformedGroupRecord(f"unsupported group metadata value version {version}")
    protocol_type = reader.required_string()
    generation_id = reader.int32()
    protocol_name = reader.string()
    leader_id = reader.string()
    state_timestamp = reader.int64()
    members = tuple(
        MemberValue(reader.required_string(), reader.string(), reader.required_string(),
                    reader.required_string(), reader.int32(), reader.int32(), reader.bytes(),
                    reader.bytes())
        for _ in range(reader.int32()))
    return GroupValue(protocol_type, generation_id, protocol_name, leader_id, state_timestamp,
                      members)
