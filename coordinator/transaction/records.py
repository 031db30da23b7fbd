"""Keys and values of the records in ``__transaction_state``, in Kafka's own format.

Kafka's layouts (TransactionLogKey v0: the transactional id; TransactionLogValue v0, and v1
which is flexible and adds tagged fields) keep the topic readable with Kafka's tools. kipper
writes value version 0 unless a producer id rotation (transaction protocol version 2, an
exhausted epoch) needs the tagged fields PreviousProducerId (0) and NextProducerId (1), which
a coordinator taking the partition over must know; a null value is a tombstone: the
transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..record_format import MalformedRecord, RecordReader, RecordWriter
from .state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionSnapshot,
    TransactionState,
)

KEY_VERSION = 0
VALUE_VERSION = 0
_FLEXIBLE_VALUE_VERSION = 1
_PREVIOUS_PRODUCER_ID_TAG, _NEXT_PRODUCER_ID_TAG = 0, 1
_TAG_INT64 = struct.Struct(">q")


class MalformedTransactionRecord(MalformedRecord):
    """A record of ``__transaction_state`` this coordinator cannot read."""


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TransactionState
    # (topic, partition) of every partition in the transaction, sorted.
    partitions: tuple[tuple[str, int], ...]
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    # The producer id before a rotation, and the one a prepared transaction continues with.
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID

    @property
    def tagged_fields(self) -> dict[int, bytes]:
        tags = {_PREVIOUS_PRODUCER_ID_TAG: self.previous_producer_id,
                _NEXT_PRODUCER_ID_TAG: self.next_producer_id}
        return {tag: _TAG_INT64.pack(value) for tag, value in tags.items()
                if value != NO_PRODUCER_ID}


def encode_key(transactional_id: str) -> bytes:
    return RecordWriter().int16(KEY_VERSION).string(transactional_id).to_bytes()


def decode_key(data: bytes) -> str:
    reader = RecordReader(data, MalformedTransactionRecord)
    version = reader.int16()
    if version != KEY_VERSION:
        raise MalformedTransactionRecord(f"unknown transaction key version {version}")
    return reader.required_string()


def encode_value(value: TransactionLogValue) -> bytes:
    tags = value.tagged_fields
    flexible = bool(tags)
    writer = (RecordWriter().int16(_FLEXIBLE_VALUE_VERSION if flexible else VALUE_VERSION)
              .int64(value.producer_id).int16(value.producer_epoch)
              .int32(value.transaction_timeout_ms).int8(value.state.value))
    if value.state == TransactionState.EMPTY:
        writer.array_length(-1, flexible)  # Kafka writes an empty transaction's as null
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        writer.array_length(len(by_topic), flexible)
        for topic, partitions in by_topic.items():
            if flexible:
                writer.compact_string(topic)
            else:
                writer.string(topic)
            writer.array_length(len(partitions), flexible)
            for partition in partitions:
                writer.int32(partition)
            if flexible:
                writer.tagged_fields({})
    writer.int64(value.last_update_timestamp_ms).int64(value.start_timestamp_ms)
    if flexible:
        writer.tagged_fields(tags)
    return writer.to_bytes()


def decode_value(data: bytes) -> TransactionLogValue:
    reader = RecordReader(data, MalformedTransactionRecord)
    version = reader.int16()
    if version not in (VALUE_VERSION, _FLEXIBLE_VALUE_VERSION):
        raise MalformedTransactionRecord(f"unknown transaction value version {version}")
    flexible = version == _FLEXIBLE_VALUE_VERSION
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    status = reader.int8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise MalformedTransactionRecord(f"unknown transaction status {status}") from None
    partitions: list[tuple[str, int]] = []
    for _ in range(max(reader.array_length(flexible), 0)):
        topic = reader.compact_string() if flexible else reader.required_string()
        partitions += [(topic, reader.int32()) for _ in range(reader.array_length(flexible))]
        if flexible:
            reader.skip_tagged_fields()
    last_update_ms = reader.int64()
    start_ms = reader.int64()
    tags = reader.tagged_fields() if flexible else {}
    try:
        previous, following = (
            _TAG_INT64.unpack(tags[tag])[0] if tag in tags else NO_PRODUCER_ID
            for tag in (_PREVIOUS_PRODUCER_ID_TAG, _NEXT_PRODUCER_ID_TAG))
    except struct.error:
        raise MalformedTransactionRecord("a producer id tag is not 8 bytes") from None
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, state,
                               tuple(sorted(partitions)), last_update_ms, start_ms,
                               previous, following)


def log_value(snapshot: TransactionSnapshot) -> TransactionLogValue:
    return TransactionLogValue(snapshot.producer_id, snapshot.producer_epoch,
                               snapshot.timeout_ms, snapshot.state,
                               tuple(sorted(snapshot.partitions)),
                               snapshot.last_update_timestamp_ms, snapshot.start_timestamp_ms,
                               snapshot.last_producer_id, snapshot.next_producer_id)


def snapshot_of(value: TransactionLogValue) -> TransactionSnapshot:
    """A transaction as loaded: the epoch before the last bump is not in the log (nor in
    Kafka's), the producer ids of a rotation are."""
    return TransactionSnapshot(value.producer_id, value.producer_epoch,
                               value.previous_producer_id, NO_PRODUCER_EPOCH,
                               value.transaction_timeout_ms, value.state,
                               frozenset(value.partitions), value.start_timestamp_ms,
                               value.last_update_timestamp_ms, value.next_producer_id)
