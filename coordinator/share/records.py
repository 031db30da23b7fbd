"""Keys and values of the records in ``__share_group_state``.

One key per share partition (group, topic id, partition), Kafka's SharePartitionKey; the
value is the partition's whole state after a change (a snapshot, as Kafka's
ShareSnapshotValue: start offset and state batches), so the topic is compacted to one record
per share partition and loading keeps the last one. A null value (tombstone) deletes the
share partition's state (DeleteShareGroupOffsets, a deleted share group).

The layout is Kafka's field order in a non-flexible encoding: big-endian int16 version, then
group id (int16-length string), topic id (string), partition (int32); the value holds the
start offset (int64) and an int32-length array of (first offset int64, last offset int64,
delivery state int8, delivery count int16).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ..record_format import MalformedRecord, RecordReader, RecordWriter
from .share_partition import RecordState, ShareSnapshot, StateBatch

KEY_VERSION = 0
VALUE_VERSION = 0


class MalformedShareRecord(MalformedRecord):
    """A record of ``__share_group_state`` this coordinator cannot read."""


@dataclass(frozen=True, slots=True, order=True)
class SharePartitionKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The string whose hash picks the partition of ``__share_group_state`` (Kafka's
        ``SharePartitionKey.asCoordinatorKey``)."""
        return f"{self.group_id}:{self.topic_id}:{self.partition}"

    def to_bytes(self) -> bytes:
        return (RecordWriter().int16(KEY_VERSION).string(self.group_id)
                .string(str(self.topic_id)).int32(self.partition).to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> SharePartitionKey:
        reader = RecordReader(data, MalformedShareRecord)
        if (version := reader.int16()) != KEY_VERSION:
            raise MalformedShareRecord(f"unknown share state key version {version}")
        group_id = reader.required_string()
        try:
            topic_id = uuid.UUID(reader.required_string())
        except ValueError as e:
            raise MalformedShareRecord(str(e)) from e
        return cls(group_id, topic_id, reader.int32())


def snapshot_to_bytes(snapshot: ShareSnapshot) -> bytes:
    writer = RecordWriter().int16(VALUE_VERSION).int64(snapshot.start_offset)
    writer.int32(len(snapshot.batches))
    for batch in snapshot.batches:
        writer.int64(batch.first_offset).int64(batch.last_offset).int8(batch.state)
        writer.int16(batch.delivery_count)
    return writer.to_bytes()


def snapshot_from_bytes(data: bytes) -> ShareSnapshot:
    reader = RecordReader(data, MalformedShareRecord)
    if (version := reader.int16()) != VALUE_VERSION:
        raise MalformedShareRecord(f"unknown share state value version {version}")
    start_offset = reader.int64()
    batches = []
    for _ in range(reader.int32()):
        first, last, state, count = reader.int64(), reader.int64(), reader.int8(), reader.int16()
        try:
            batches.append(StateBatch(first, last, RecordState(state), count))
        except ValueError as e:
            raise MalformedShareRecord(str(e)) from e
    return ShareSnapshot(start_offset, tuple(batches))
