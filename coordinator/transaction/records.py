"""Keys and values of the records in ``__transaction_state``, in Kafka's own format.

Kafka's layouts (TransactionLogKey v0: the transactional id; TransactionLogValue v0, and v1
which is flexible and adds tagged fields kipper does not use) keep the topic readable with
Kafka's tools. kipper writes value version 0, as Kafka does for transaction protocol
version 1; a null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

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


def encode_key(transactional_id: str) -> bytes:
    return RecordWriter().int16(KEY_VERSION).string(transactional_id).to_bytes()


def decode_key(data: bytes) -> str:
    reader = RecordReader(data, MalformedTransactionRecord)
    version = reader.int16()
    if version != KEY_VERSION:
        raise MalformedTransactionRecord(f"unknown transaction key version {version}")
    return reader.required_string()


def encode_value(value: TransactionLogValue) -> bytes:
    writer = (RecordWriter().int16(VALUE_VERSION).int64(value.producer_id)
              .int16(value.producer_epoch).int32(value.transaction_timeout_ms)
              .int8(value.state.value))
    if value.state == TransactionState.EMPTY:
        writer.int32(-1)  # Kafka writes an empty transaction's partitions as null
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        writer.int32(len(by_topic))
        for topic, partitions in by_topic.items():
            writer.string(topic).int32(len(partitions))
            for partition in partitions:
                writer.int32(partition)
    return (writer.int64(value.last_update_timestamp_ms).int64(value.start_timestamp_ms)
            .to_bytes())


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
    if flexible:
        reader.skip_tagged_fields()
    return TransactionLogValue(producer_id, producer_epoch, timeout_ms, state,
                               tuple(sorted(partitions)), last_update_ms, start_ms)


def log_value(snapshot: TransactionSnapshot) -> TransactionLogValue:
    return TransactionLogValue(snapshot.producer_id, snapshot.producer_epoch,
                               snapshot.timeout_ms, snapshot.state,
                               tuple(sorted(snapshot.partitions)),
                               snapshot.last_update_timestamp_ms, snapshot.start_timestamp_ms)


def snapshot_of(value: TransactionLogValue) -> TransactionSnapshot:
    """A transaction as loaded: the id and epoch before the last bump are not in the log."""
    return TransactionSnapshot(value.producer_id, value.producer_epoch, NO_PRODUCER_ID,
                               NO_PRODUCER_EPOCH, value.transaction_timeout_ms, value.state,
                               frozenset(value.partitions), value.start_timestamp_ms,
                               value.last_update_timestamp_ms)
