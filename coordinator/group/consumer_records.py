"""The records of KIP-848 consumer groups in ``__consumer_offsets``, in Kafka's layout.

Keys are non-flexible (int16 version, then int16-length strings), values flexible version 0
(compact strings and arrays, tagged fields), with Kafka's key versions:

- 3  ConsumerGroupMetadata (group): the group epoch;
- 5  ConsumerGroupMemberMetadata (group, member): what the member subscribes to and where it
  runs;
- 6  ConsumerGroupTargetAssignmentMetadata (group): the assignment epoch;
- 7  ConsumerGroupTargetAssignmentMember (group, member): the member's target partitions;
- 8  ConsumerGroupCurrentMemberAssignment (group, member): its epochs, reconciliation state,
  assigned partitions and partitions pending revocation.

A null value deletes. kipper does not write Kafka's ConsumerGroupPartitionMetadata (key 4, gone
in Kafka 4.1): the subscribed topics' metadata is read from the cluster image when the group is
loaded. ``LoadedConsumerGroups`` is what replaying them leaves.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from ..record_format import RecordReader, RecordWriter
from .assignors import Assignment
from .consumer_group import MemberAssignment, MemberState, MemberSubscriptionInfo
from .records import MalformedGroupRecord

GROUP_METADATA_KEY = 3
MEMBER_METADATA_KEY = 5
TARGET_METADATA_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
KEY_VERSIONS = frozenset({GROUP_METADATA_KEY, MEMBER_METADATA_KEY, TARGET_METADATA_KEY,
                          TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY})
VALUE_VERSION = 0
_GROUP_KEYS = {GROUP_METADATA_KEY, TARGET_METADATA_KEY}
# Kafka's MemberState bytes.
_STATE_CODES = {MemberState.UNRELEASED_PARTITIONS: 1, MemberState.UNREVOKED_PARTITIONS: 2,
                MemberState.STABLE: 3}
_STATES = {code: state for state, code in _STATE_CODES.items()}


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """The key of a consumer group record: its version says which, ``member_id`` is empty
    for the group-wide ones."""
    version: int
    group_id: str
    member_id: str = ""


def encode_key(key: ConsumerKey) -> bytes:
    writer = RecordWriter().int16(key.version).string(key.group_id)
    if key.version not in _GROUP_KEYS:
        writer.string(key.member_id)
    return writer.to_bytes()


def decode_key(version: int, reader: RecordReader) -> ConsumerKey:
    group_id = reader.required_string()
    member_id = "" if version in _GROUP_KEYS else reader.required_string()
    return ConsumerKey(version, group_id, member_id)


def _value() -> RecordWriter:
    return RecordWriter().int16(VALUE_VERSION)


def _reader(data: bytes) -> RecordReader:
    reader = RecordReader(data, MalformedGroupRecord)
    version = reader.int16()
    if version != VALUE_VERSION:
        raise MalformedGroupRecord(f"unsupported consumer group value version {version}")
    return reader


def encode_epoch(epoch: int) -> bytes:
    """The value of ConsumerGroupMetadata and ConsumerGroupTargetAssignmentMetadata."""
    return _value().int32(epoch).tagged_fields({}).to_bytes()


def decode_epoch(data: bytes) -> int:
    return _reader(data).int32()


def encode_member(info: MemberSubscriptionInfo) -> bytes:
    writer = (_value().compact_nullable_string(info.instance_id)
              .compact_nullable_string(info.rack_id).compact_string(info.client_id)
              .compact_string(info.client_host)
              .array_length(len(info.subscribed_topic_names), compact=True))
    for name in info.subscribed_topic_names:
        writer.compact_string(name)
    return (writer.compact_nullable_string(info.subscribed_topic_regex)
            .compact_nullable_string(info.server_assignor).int32(info.rebalance_timeout_ms)
            .unsigned_varint(0)  # ClassicMemberMetadata: null (not a classic member)
            .tagged_fields({}).to_bytes())


def decode_member(data: bytes) -> MemberSubscriptionInfo:
    reader = _reader(data)
    instance_id = reader.compact_nullable_string()
    rack_id = reader.compact_nullable_string()
    client_id = reader.compact_string()
    client_host = reader.compact_string()
    names = tuple(reader.compact_string() for _ in range(max(reader.array_length(True), 0)))
    regex = reader.compact_nullable_string()
    assignor = reader.compact_nullable_string()
    return MemberSubscriptionInfo(instance_id, rack_id, client_id, client_host, names, regex,
                                  assignor, reader.int32())


def _write_partitions(writer: RecordWriter, assignment: Assignment) -> RecordWriter:
    writer.array_length(len(assignment), compact=True)
    for topic_id in sorted(assignment, key=lambda t: t.bytes):
        writer.uuid(topic_id).array_length(len(assignment[topic_id]), compact=True)
        for p in sorted(assignment[topic_id]):
            writer.int32(p)
        writer.tagged_fields({})
    return writer


def _read_partitions(reader: RecordReader) -> Assignment:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(max(reader.array_length(True), 0)):
        topic_id = reader.uuid()
        assignment[topic_id] = frozenset(reader.int32()
                                         for _ in range(max(reader.array_length(True), 0)))
        reader.skip_tagged_fields()
    return assignment


def encode_target(assignment: Assignment) -> bytes:
    return _write_partitions(_value(), assignment).tagged_fields({}).to_bytes()


def decode_target(data: bytes) -> Assignment:
    return _read_partitions(_reader(data))


def encode_current(current: MemberAssignment) -> bytes:
    writer = (_value().int32(current.member_epoch).int32(current.previous_member_epoch)
              .int8(_STATE_CODES[current.state]))
    _write_partitions(writer, current.assigned)
    return _write_partitions(writer, current.pending_revocation).tagged_fields({}).to_bytes()


def decode_current(data: bytes) -> MemberAssignment:
    reader = _reader(data)
    epoch, previous, code = reader.int32(), reader.int32(), reader.int8()
    if code not in _STATES:
        raise MalformedGroupRecord(f"unknown member state {code}")
    return MemberAssignment(epoch, previous, _STATES[code], _read_partitions(reader),
                            _read_partitions(reader))


@dataclass(slots=True)
class LoadedConsumerGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, MemberSubscriptionInfo] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, MemberAssignment] = field(default_factory=dict)


@dataclass(slots=True)
class LoadedConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition, as its records leave
    them."""
    groups: dict[str, LoadedConsumerGroup] = field(default_factory=dict)

    def apply(self, key: ConsumerKey, value: bytes | None) -> None:
        if value is None:
            self._delete(key)
            return
        group = self.groups.setdefault(key.group_id, LoadedConsumerGroup())
        if key.version == GROUP_METADATA_KEY:
            group.group_epoch = decode_epoch(value)
        elif key.version == TARGET_METADATA_KEY:
            group.assignment_epoch = decode_epoch(value)
        elif key.version == MEMBER_METADATA_KEY:
            group.members[key.member_id] = decode_member(value)
        elif key.version == TARGET_MEMBER_KEY:
            group.targets[key.member_id] = decode_target(value)
        else:
            group.current[key.member_id] = decode_current(value)

    def _delete(self, key: ConsumerKey) -> None:
        group = self.groups.get(key.group_id)
        if group is None:
            return
        if key.version == GROUP_METADATA_KEY:
            del self.groups[key.group_id]
        elif key.version == MEMBER_METADATA_KEY:
            group.members.pop(key.member_id, None)
        elif key.version == TARGET_MEMBER_KEY:
            group.targets.pop(key.member_id, None)
        elif key.version == CURRENT_ASSIGNMENT_KEY:
            group.current.pop(key.member_id, None)
