"""Keys and values of the records in ``__consumer_offsets``, in Kafka's own format.

Kafka's layouts (OffsetCommitKey v1 / OffsetCommitValue v3, GroupMetadataKey v2 /
GroupMetadataValue v3: big-endian, int16-length strings, int32-length bytes) keep the topic
readable with Kafka's tools. A null value is a tombstone: the offset or group is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..record_format import MalformedRecord, RecordReader, RecordWriter

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

class MalformedGroupRecord(MalformedRecord):
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


def encode_offset_key(key: OffsetKey) -> bytes:
    return (RecordWriter().int16(OFFSET_KEY_VERSION).string(key.group_id).string(key.topic)
            .int32(key.partition).to_bytes())


def encode_group_key(key: GroupKey) -> bytes:
    return RecordWriter().int16(GROUP_KEY_VERSION).string(key.group_id).to_bytes()


def encode_offset_value(value: OffsetValue) -> bytes:
    return (RecordWriter().int16(OFFSET_VALUE_VERSION).int64(value.offset)
            .int32(value.leader_epoch).string(value.metadata)
            .int64(value.commit_timestamp).to_bytes())


def encode_group_value(value: GroupValue) -> bytes:
    writer = (RecordWriter().int16(GROUP_VALUE_VERSION).string(value.protocol_type)
              .int32(value.generation_id).string(value.protocol_name).string(value.leader_id)
              .int64(value.state_timestamp).int32(len(value.members)))
    for member in value.members:
        (writer.string(member.member_id).string(member.group_instance_id)
         .string(member.client_id).string(member.client_host)
         .int32(member.rebalance_timeout_ms).int32(member.session_timeout_ms)
         .bytes(member.subscription).bytes(member.assignment))
    return writer.to_bytes()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = RecordReader(data, MalformedGroupRecord)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.int32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.required_string())
    raise MalformedGroupRecord(f"unknown key version {version}")


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = RecordReader(data, MalformedGroupRecord)
    version = reader.int16()
    if version != OFFSET_VALUE_VERSION:
        raise MalformedGroupRecord(f"unsupported offset commit value version {version}")
    return OffsetValue(reader.int64(), reader.int32(), reader.string() or "", reader.int64())


def decode_group_value(data: bytes) -> GroupValue:
    reader = RecordReader(data, MalformedGroupRecord)
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
