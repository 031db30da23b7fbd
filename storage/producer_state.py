"""Idempotent-producer state of one partition: epochs, sequence numbers, the last batches.

Pure logic without I/O, shared by the classic log and the diskless batch coordinator;
each persists ``snapshot()`` its own way. The rules are Kafka's (ProducerStateManager,
ProducerAppendInfo, ProducerStateEntry, 2.5 and later):

- A batch whose epoch is older than the producer's current epoch is rejected with
  INVALID_PRODUCER_EPOCH (what Kafka answers a Produce since 2.7; PRODUCER_FENCED only
  comes from a transaction coordinator).
- A batch that repeats the exact sequence range of one of the producer's last five batches
  in the same epoch is a retry: it is not written again and gets the ORIGINAL offsets.
- Otherwise its first sequence must follow the last one (wrapping at Int32.MaxValue), and
  a new epoch must start at sequence 0: else OUT_OF_ORDER_SEQUENCE_NUMBER.
- A producer the partition has no state for (new, expired, or removed with the records it
  wrote) may start at any sequence: since KIP-360 brokers no longer answer a Produce with
  UNKNOWN_PRODUCER_ID.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from protocol.records import InvalidRecordBatch

BATCHES_PER_PRODUCER = 5
NO_PRODUCER_EPOCH = -1
MAX_SEQUENCE = 2**31 - 1

# Snapshot layout: version, CRC-32C of the rest, producer count, then per producer its id,
# epoch, last timestamp and batch count followed by those batches.
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


class ProducerBatch(Protocol):
    """The header fields producer state needs (protocol.records.BatchHeader has them)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    max_timestamp: int

    @property
    def last_sequence(self) -> int: ...


class ProducerStateError(Exception):
    error_code: ErrorCode


class InvalidProducerEpoch(ProducerStateError):
    error_code = ErrorCode.invalid_producer_epoch


class OutOfOrderSequence(ProducerStateError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidSequence(InvalidRecordBatch):
    """A batch carries a producer id but no sequence: Kafka rejects it as INVALID_RECORD."""


class CorruptSnapshot(ValueError):
    """Snapshot bytes that fail their checksum or do not parse: rebuild from the log."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    # Max timestamp of the batch as stored (the broker's clock for LogAppendTime topics);
    # a duplicate's produce response reports it as the log append time, as Kafka does.
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:
            # Sequence numbers restart with every epoch; older batches can never match again.
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        for retained in self.batches:
            if (retained.first_sequence, retained.last_sequence) == (
                    batch.base_sequence, batch.last_sequence):
                return retained
        return None


@dataclass(slots=True)
class AppendPlan:
    """What ``check_append`` decided: a duplicate to answer with, or the updates to apply."""

    duplicate: BatchMetadata | None = None
    updates: list[ProducerEntry] = field(default_factory=list)


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (
        next_sequence == 0 and last_sequence == MAX_SEQUENCE)


class ProducerState:
    """Every producer's entry in one partition, keyed by producer id."""

    def __init__(self, producers: Iterable[ProducerEntry] = ()) -> None:
        self.producers: dict[int, ProducerEntry] = {e.producer_id: e for e in producers}

    def check_append(self, batches: Sequence[ProducerBatch], first_offset: int,
                     log_append_time_ms: int | None = None) -> AppendPlan:
        """Validate client batches that would be stored from ``first_offset`` on.

        Raises ProducerStateError (or InvalidSequence). Changes nothing: pass the plan to
        ``apply`` once the batches are stored, in the same step that advances the log end
        offset, so that the next append is checked against them.
        """
        pending: dict[int, ProducerEntry] = {}
        next_offset = first_offset
        for batch in batches:
            batch_first_offset = next_offset
            next_offset += batch.last_offset_delta + 1
            if batch.producer_id < 0:
                continue
            if batch.base_sequence < 0:
                raise InvalidSequence(
                    f"invalid sequence number {batch.base_sequence} in record batch with "
                    f"producer id {batch.producer_id}")
            current = self.producers.get(batch.producer_id)
            duplicate = current.find_duplicate(batch) if current is not None else None
            if duplicate is not None:
                return AppendPlan(duplicate=duplicate)
            updated = pending.get(batch.producer_id)
            if updated is None:
                updated = pending[batch.producer_id] = ProducerEntry(
                    batch.producer_id, current.epoch if current else NO_PRODUCER_EPOCH)
            _check_epoch(updated, batch)
            _check_sequence(current, updated, batch)
            timestamp = batch.max_timestamp if log_append_time_ms is None else log_append_time_ms
            updated.add(batch.producer_epoch, BatchMetadata(
                batch.base_sequence, batch.last_sequence, batch_first_offset,
                batch_first_offset + batch.last_offset_delta, timestamp))
        return AppendPlan(updates=list(pending.values()))

    def apply(self, plan: AppendPlan) -> None:
        for updated in plan.updates:
            current = self.producers.get(updated.producer_id)
            if current is None:
                self.producers[updated.producer_id] = updated
                continue
            for batch in updated.batches:
                current.add(updated.epoch, batch)

    def load_batch(self, batch: ProducerBatch, base_offset: int) -> None:
        """Record a batch already in the log (recovery, replication): no checks, as Kafka."""
        if batch.producer_id < 0:
            return
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerEntry(batch.producer_id)
        entry.add(batch.producer_epoch, BatchMetadata(
            batch.base_sequence, batch.last_sequence, base_offset,
            base_offset + batch.last_offset_delta, batch.max_timestamp))

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` (they may then start anew)."""
        for producer_id in [pid for pid, entry in self.producers.items()
                            if now_ms - entry.last_timestamp >= expiration_ms]:
            del self.producers[producer_id]

    def snapshot(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for entry in self.producers.values():
            body += _ENTRY.pack(entry.producer_id, entry.epoch, entry.last_timestamp,
                                len(entry.batches))
            for batch in entry.batches:
                body += _BATCH.pack(batch.first_sequence, batch.last_sequence,
                                    batch.first_offset, batch.last_offset, batch.timestamp)
        return _HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    @classmethod
    def restore(cls, data: bytes) -> "ProducerState":
        try:
            version, crc = _HEADER.unpack_from(data, 0)
            body = memoryview(data)[_HEADER.size:]
            if version != SNAPSHOT_VERSION:
                raise CorruptSnapshot(f"producer state snapshot version {version} is unknown")
            if crc32c(body) != crc:
                raise CorruptSnapshot("producer state snapshot fails its checksum")
            (count,), position = _COUNT.unpack_from(body, 0), _COUNT.size
            entries = []
            for _ in range(count):
                producer_id, epoch, last_timestamp, batch_count = _ENTRY.unpack_from(body, position)
                position += _ENTRY.size
                entry = ProducerEntry(producer_id, epoch, last_timestamp=last_timestamp)
                for _ in range(batch_count):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                    position += _BATCH.size
                entries.append(entry)
        except struct.error as e:
            raise CorruptSnapshot(f"producer state snapshot is truncated: {e}") from None
        if position != len(body):
            raise CorruptSnapshot("producer state snapshot has trailing bytes")
        return cls(entries)



def _check_epoch(updated: ProducerEntry, batch: ProducerBatch) -> None:
    if batch.producer_epoch < updated.epoch:
        raise InvalidProducerEpoch(
            f"epoch {batch.producer_epoch} of producer {batch.producer_id} is smaller than "
            f"the last seen epoch {updated.epoch}")


def _check_sequence(current: ProducerEntry | None, updated: ProducerEntry,
                    batch: ProducerBatch) -> None:
    if batch.producer_epoch != updated.epoch:
        if batch.base_sequence != 0 and updated.epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequence(
                f"new epoch {batch.producer_epoch} of producer {batch.producer_id} starts at "
                f"sequence {batch.base_sequence}, not 0 (current epoch {updated.epoch})")
        return
    if current is None or current.epoch == NO_PRODUCER_EPOCH:
        return  # no state for this producer: any sequence is accepted
    # Same epoch as ``current`` here: continue from this request's batches, else from the log.
    last_sequence = updated.last_sequence if updated.batches else current.last_sequence
    if not _in_sequence(last_sequence, batch.base_sequence):
        raise OutOfOrderSequence(
            f"out of order sequence number for producer {batch.producer_id}: "
            f"{batch.base_sequence} (incoming), {last_sequence} (current end)")
