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

Transactions (Kafka's ProducerAppendInfo.appendDataBatch / appendEndTxnMarker):

- A producer's first transactional batch opens its transaction at that batch's offset; a
  non-transactional batch while one is open is INVALID_TXN_STATE.
- A marker (commit or abort control batch, from the transaction coordinator) closes it. A
  marker of an older producer epoch is INVALID_PRODUCER_EPOCH, of an older coordinator epoch
  TRANSACTION_COORDINATOR_FENCED. A marker may bump the epoch (the coordinator fencing a
  producer): the producer's older batches are then rejected, and it restarts at sequence 0.
- An aborted transaction is kept as (producer id, first offset, marker offset) while its
  records exist (``trim``): read_committed fetches return the ones they cover.
- The first offset of the oldest transaction not yet decided, or whose marker is not yet
  replicated, bounds the last stable offset (``first_unstable_offset``).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from protocol.records import InvalidRecordBatch, TxnMarker

BATCHES_PER_PRODUCER = 5
NO_PRODUCER_EPOCH = -1
NO_OFFSET = -1
MAX_SEQUENCE = 2**31 - 1

# Snapshot layout: version, CRC-32C of the rest, producer count, then per producer its id,
# epoch, last timestamp, (since version 2) the first offset of its open transaction and its
# coordinator epoch, and batch count followed by those batches; (since version 2) then the
# aborted transactions.
SNAPSHOT_VERSION = 2
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY_V1 = struct.Struct(">qhqb")
_ENTRY = struct.Struct(">qhqqib")
_BATCH = struct.Struct(">iiqqq")
_ABORTED = struct.Struct(">qqq")


class ProducerBatch(Protocol):
    """The header fields producer state needs (protocol.records.BatchHeader has them)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    max_timestamp: int

    @property
    def last_sequence(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...


class ProducerStateError(Exception):
    error_code: ErrorCode


class InvalidProducerEpoch(ProducerStateError):
    error_code = ErrorCode.invalid_producer_epoch


class OutOfOrderSequence(ProducerStateError):
    error_code = ErrorCode.out_of_order_sequence_number


class InvalidTxnState(ProducerStateError):
    error_code = ErrorCode.invalid_txn_state


class CoordinatorFenced(ProducerStateError):
    error_code = ErrorCode.transaction_coordinator_fenced


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


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction's records: ``producer_id``'s from ``first_offset`` up to its
    abort marker at ``last_offset`` (what a read_committed consumer skips)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTransaction:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER))
    last_timestamp: int = -1
    # The offset of the open transaction's first batch; NO_OFFSET when none is open.
    txn_first_offset: int = NO_OFFSET
    # The epoch of the transaction coordinator that wrote the producer's last marker.
    coordinator_epoch: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def add(self, epoch: int, batch: BatchMetadata) -> None:
        self.set_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            # Sequence numbers restart with every epoch; older batches can never match again.
            self.batches.clear()
            self.epoch = epoch

    def copy(self) -> "ProducerEntry":
        return ProducerEntry(self.producer_id, self.epoch, deque(self.batches, BATCHES_PER_PRODUCER),
                             self.last_timestamp, self.txn_first_offset, self.coordinator_epoch)

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
    # The new entries of the producers the batches change (replacing the current ones).
    updates: list[ProducerEntry] = field(default_factory=list)
    # The transaction a marker ends.
    completed: CompletedTransaction | None = None


def _in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (
        next_sequence == 0 and last_sequence == MAX_SEQUENCE)


class ProducerState:
    """Every producer's entry in one partition, keyed by producer id, and the partition's
    transactions."""

    def __init__(self, producers: Iterable[ProducerEntry] = (),
                 aborted: Iterable[AbortedTransaction] = ()) -> None:
        self.producers: dict[int, ProducerEntry] = {e.producer_id: e for e in producers}
        # Oldest marker first.
        self.aborted: list[AbortedTransaction] = list(aborted)
        # Decided transactions whose marker the high watermark may not have passed yet.
        self._unreplicated: list[CompletedTransaction] = []

    def check_append(self, batches: Sequence[ProducerBatch], first_offset: int,
                     log_append_time_ms: int | None = None,
                     marker: TxnMarker | None = None, *,
                     check_sequences: bool = True) -> AppendPlan:
        """Validate client batches that would be stored from ``first_offset`` on, or, with
        ``marker``, the one control batch that carries it.

        ``check_sequences=False`` for batches a coordinator wrote: they have no sequence
        numbers, so neither sequences nor retries are checked (Kafka's coordinator origin).

        Raises ProducerStateError (or InvalidSequence). Changes nothing: pass the plan to
        ``apply`` once the batches are stored, in the same step that advances the log end
        offset, so that the next append is checked against them.
        """
        if marker is not None:
            return self._check_marker(marker, first_offset,
                                      batches[0].max_timestamp if log_append_time_ms is None
                                      else log_append_time_ms)
        pending: dict[int, ProducerEntry] = {}
        next_offset = first_offset
        for batch in batches:
            batch_first_offset = next_offset
            next_offset += batch.last_offset_delta + 1
            if batch.producer_id < 0:
                continue
            if batch.base_sequence < 0 and check_sequences:
                raise InvalidSequence(
                    f"invalid sequence number {batch.base_sequence} in record batch with "
                    f"producer id {batch.producer_id}")
            current = self.producers.get(batch.producer_id)
            if check_sequences and current is not None:
                duplicate = current.find_duplicate(batch)
                if duplicate is not None:
                    return AppendPlan(duplicate=duplicate)
            updated = pending.get(batch.producer_id)
            if updated is None:
                updated = pending[batch.producer_id] = ProducerEntry(
                    batch.producer_id, current.epoch if current else NO_PRODUCER_EPOCH,
                    txn_first_offset=current.txn_first_offset if current else NO_OFFSET,
                    coordinator_epoch=current.coordinator_epoch if current else -1)
            _check_epoch(updated, batch)
            if check_sequences:
                _check_sequence(current, updated, batch)
            _check_transaction(updated, batch, batch_first_offset)
            timestamp = batch.max_timestamp if log_append_time_ms is None else log_append_time_ms
            updated.add(batch.producer_epoch, BatchMetadata(
                batch.base_sequence, batch.last_sequence, batch_first_offset,
                batch_first_offset + batch.last_offset_delta, timestamp))
        return AppendPlan(updates=[self._merged(updated) for updated in pending.values()])

    def _merged(self, updated: ProducerEntry) -> ProducerEntry:
        """``updated``'s batches appended to the producer's current entry (a copy)."""
        current = self.producers.get(updated.producer_id)
        if current is None:
            return updated
        merged = current.copy()
        for batch in updated.batches:
            merged.add(updated.epoch, batch)
        merged.txn_first_offset = updated.txn_first_offset
        return merged

    def _check_marker(self, marker: TxnMarker, offset: int, timestamp: int) -> AppendPlan:
        current = self.producers.get(marker.producer_id)
        entry = current.copy() if current else ProducerEntry(marker.producer_id)
        if marker.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"marker epoch {marker.producer_epoch} of producer {marker.producer_id} is "
                f"smaller than the last seen epoch {entry.epoch}")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise CoordinatorFenced(
                f"marker of coordinator epoch {marker.coordinator_epoch} for producer "
                f"{marker.producer_id}: epoch {entry.coordinator_epoch} wrote its last marker")
        completed = None
        if entry.txn_first_offset != NO_OFFSET:
            completed = CompletedTransaction(marker.producer_id, entry.txn_first_offset, offset,
                                             aborted=not marker.commit)
        entry.set_epoch(marker.producer_epoch)
        entry.txn_first_offset = NO_OFFSET
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = timestamp
        return AppendPlan(updates=[entry], completed=completed)

    def apply(self, plan: AppendPlan) -> None:
        for updated in plan.updates:
            self.producers[updated.producer_id] = updated
        if plan.completed is not None:
            self._complete(plan.completed)

    def _complete(self, completed: CompletedTransaction) -> None:
        self._unreplicated.append(completed)
        if completed.aborted:
            self.aborted.append(AbortedTransaction(completed.producer_id, completed.first_offset,
                                                   completed.last_offset))

    def load_batch(self, batch: ProducerBatch, base_offset: int,
                   marker: TxnMarker | None = None) -> None:
        """Record a batch already in the log (recovery, replication): no checks, as Kafka.
        ``marker``: the marker the batch carries, if it is a control batch."""
        if batch.producer_id < 0:
            return
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            entry = self.producers[batch.producer_id] = ProducerEntry(batch.producer_id)
        if marker is not None:
            if entry.txn_first_offset != NO_OFFSET:
                self._complete(CompletedTransaction(batch.producer_id, entry.txn_first_offset,
                                                    base_offset, aborted=not marker.commit))
            entry.set_epoch(marker.producer_epoch)
            entry.txn_first_offset = NO_OFFSET
            entry.coordinator_epoch = marker.coordinator_epoch
            entry.last_timestamp = batch.max_timestamp
            return
        if batch.is_transactional and entry.txn_first_offset == NO_OFFSET:
            entry.txn_first_offset = base_offset
        entry.add(batch.producer_epoch, BatchMetadata(
            batch.base_sequence, batch.last_sequence, base_offset,
            base_offset + batch.last_offset_delta, batch.max_timestamp))

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset a read_committed consumer may not read yet: the start of the
        oldest open transaction, or of a decided one whose marker is not below
        ``high_watermark`` (not yet replicated); None when there is none."""
        self.forget_replicated(high_watermark)
        firsts = [e.txn_first_offset for e in self.producers.values()
                  if e.txn_first_offset != NO_OFFSET]
        firsts += [t.first_offset for t in self._unreplicated]
        return min(firsts, default=None)

    def forget_replicated(self, high_watermark: int) -> None:
        """Forget the decided transactions whose markers are below ``high_watermark``: they
        no longer bound the last stable offset. Called whenever the high watermark moves
        (classic, active-tiered: PartitionLog.on_high_watermark_updated, also on followers)
        or after each commit (diskless: committed is the high watermark), so that they do not
        pile up between queries."""
        if self._unreplicated:  # (asked for every partition a fetch reads: mostly none)
            self._unreplicated = [t for t in self._unreplicated
                                  if t.last_offset >= high_watermark]

    def last_stable_offset(self, high_watermark: int) -> int:
        first_unstable = self.first_unstable_offset(high_watermark)
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """The aborted transactions with records in [start, end) (what a read_committed
        fetch of those offsets returns)."""
        return [t for t in self.aborted if t.last_offset >= start and t.first_offset < end]

    def trim(self, log_start_offset: int) -> None:
        """Forget aborted transactions whose records are all below the log start."""
        self.aborted = [t for t in self.aborted if t.last_offset >= log_start_offset]

    def truncate_to(self, offset: int) -> None:
        """Forget transactions decided at or above ``offset`` (the log was cut there); the
        producers' entries are rebuilt by the caller."""
        self.aborted = [t for t in self.aborted if t.last_offset < offset]
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (they may then start anew),
        but not one with an open transaction, as Kafka; return how many."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp >= expiration_ms
                   and entry.txn_first_offset == NO_OFFSET]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    def snapshot(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for entry in self.producers.values():
            body += _ENTRY.pack(entry.producer_id, entry.epoch, entry.last_timestamp,
                                entry.txn_first_offset, entry.coordinator_epoch,
                                len(entry.batches))
            for batch in entry.batches:
                body += _BATCH.pack(batch.first_sequence, batch.last_sequence,
                                    batch.first_offset, batch.last_offset, batch.timestamp)
        body += _COUNT.pack(len(self.aborted))
        for aborted in self.aborted:
            body += _ABORTED.pack(aborted.producer_id, aborted.first_offset, aborted.last_offset)
        return _HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    @classmethod
    def restore(cls, data: bytes) -> "ProducerState":
        """A snapshot of this version or of version 1 (before transactions)."""
        try:
            version, crc = _HEADER.unpack_from(data, 0)
            body = memoryview(data)[_HEADER.size:]
            if version not in (1, SNAPSHOT_VERSION):
                raise CorruptSnapshot(f"producer state snapshot version {version} is unknown")
            if crc32c(body) != crc:
                raise CorruptSnapshot("producer state snapshot fails its checksum")
            (count,), position = _COUNT.unpack_from(body, 0), _COUNT.size
            entries = []
            for _ in range(count):
                if version == 1:
                    producer_id, epoch, last_timestamp, batch_count = _ENTRY_V1.unpack_from(
                        body, position)
                    txn_first_offset, coordinator_epoch = NO_OFFSET, -1
                    position += _ENTRY_V1.size
                else:
                    (producer_id, epoch, last_timestamp, txn_first_offset, coordinator_epoch,
                     batch_count) = _ENTRY.unpack_from(body, position)
                    position += _ENTRY.size
                entry = ProducerEntry(producer_id, epoch, last_timestamp=last_timestamp,
                                      txn_first_offset=txn_first_offset,
                                      coordinator_epoch=coordinator_epoch)
                for _ in range(batch_count):
                    entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                    position += _BATCH.size
                entries.append(entry)
            aborted = []
            if version >= 2:
                (count,), position = _COUNT.unpack_from(body, position), position + _COUNT.size
                for _ in range(count):
                    aborted.append(AbortedTransaction(*_ABORTED.unpack_from(body, position)))
                    position += _ABORTED.size
        except struct.error as e:
            raise CorruptSnapshot(f"producer state snapshot is truncated: {e}") from None
        if position != len(body):
            raise CorruptSnapshot("producer state snapshot has trailing bytes")
        return cls(entries, aborted)


def _check_epoch(updated: ProducerEntry, batch: ProducerBatch) -> None:
    if batch.producer_epoch < updated.epoch:
        raise InvalidProducerEpoch(
            f"epoch {batch.producer_epoch} of producer {batch.producer_id} is smaller than "
            f"the last seen epoch {updated.epoch}")


def _check_transaction(updated: ProducerEntry, batch: ProducerBatch, first_offset: int) -> None:
    if batch.is_transactional:
        if updated.txn_first_offset == NO_OFFSET:
            updated.txn_first_offset = first_offset
    elif updated.txn_first_offset != NO_OFFSET:
        raise InvalidTxnState(
            f"expected a transactional batch from producer {batch.producer_id}: its "
            f"transaction from offset {updated.txn_first_offset} is open")


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
