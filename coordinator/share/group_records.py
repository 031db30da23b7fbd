"""The record share groups keep in ``__consumer_offsets``: Kafka's
ShareGroupStatePartitionMetadata (key version 15), the share partitions a group has state for
in ``__share_group_state``.

It is what deleting the group must delete, and what makes an empty share group outlive its
coordinator: a broker loading the partition takes the group over with it (membership itself
is not written, ``membership``). Layout as Kafka's: a non-flexible key (int16 version, group
id), a flexible version-0 value with InitializingTopics, InitializedTopics and DeletingTopics;
kipper initializes a share partition in one step (its owner writes its first state), so only
InitializedTopics is filled: per topic its id, name and partitions. A null value deletes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from ..coordinator_log import LogRecord
from ..group.records import MalformedGroupRecord
from ..record_format import RecordReader, RecordWriter

STATE_PARTITION_METADATA_KEY = 15
KEY_VERSIONS = frozenset({STATE_PARTITION_METADATA_KEY})
VALUE_VERSION = 0
# (topic name, partition), as the share group manager names share partitions.
TopicPartition = tuple[str, int]


def state_partitions_record(group_id: str, topics: Iterable[tuple[uuid.UUID, str, Iterable[int]]]
                            ) -> LogRecord:
    """The group's share partitions with state, per topic (id, name, partitions)."""
    writer = RecordWriter().int16(VALUE_VERSION).array_length(0, compact=True)
    topics = sorted((topic_id, name, sorted(partitions)) for topic_id, name, partitions in topics)
    writer.array_length(len(topics), compact=True)
    for topic_id, name, partitions in topics:
        writer.uuid(topic_id).compact_string(name).array_length(len(partitions), compact=True)
        for partition in partitions:
            writer.int32(partition)
        writer.tagged_fields({})
    writer.array_length(0, compact=True).tagged_fields({})
    return LogRecord(_key(group_id), writer.to_bytes())


def tombstone(group_id: str) -> LogRecord:
    return LogRecord(_key(group_id), None)


def _key(group_id: str) -> bytes:
    return RecordWriter().int16(STATE_PARTITION_METADATA_KEY).string(group_id).to_bytes()


def decode_group_id(reader: RecordReader) -> str:
    """The group id of a key whose version was read already."""
    return reader.required_string()


def decode_state_partitions(data: bytes) -> set[TopicPartition]:
    reader = RecordReader(data, MalformedGroupRecord)
    if (version := reader.int16()) != VALUE_VERSION:
        raise MalformedGroupRecord(f"unsupported share group value version {version}")
    partitions: set[TopicPartition] = set()
    for listed in range(3):  # initializing, initialized, deleting
        for _ in range(max(reader.array_length(True), 0)):
            reader.uuid()
            name = reader.compact_string()
            if listed < 2:  # deleting topics carry no partitions
                partitions.update((name, reader.int32())
                                  for _ in range(max(reader.array_length(True), 0)))
            reader.skip_tagged_fields()
    reader.skip_tagged_fields()
    return partitions
