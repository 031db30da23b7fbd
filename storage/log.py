"""The one partition-log interface every storage engine implements.

Request handlers and replication talk only to ``PartitionLog``; which engine sits behind
it (classic, active-tiered, diskless) is chosen per topic by ``kipper.storage.mode`` and
resolved once, in ``storage.manager``.

``append`` is the same for every engine: it applies storage.append_rules, then calls the
engine's ``_append``.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable

from protocol.records import BatchHeader, InvalidRecordBatch

from .append_rules import (
    AppendDecision,
    AppendOrigin,
    SizeRefusal,
    check_append,
    needs_recompression,
    recompressed,
)
from .config import LogConfig
from .producer_state import AbortedTransaction, ProducerEntry

if TYPE_CHECKING:
    from .disk_space import DiskSpace


class StorageError(Exception):
    """Base of the storage errors a handler maps to a Kafka error code."""


class OffsetOutOfRange(StorageError):
    """OFFSET_OUT_OF_RANGE: the requested offset is outside [log start, log end]."""


class RecordTooLarge(StorageError):
    """A batch larger than max.message.bytes (MESSAGE_TOO_LARGE)."""


class RecordListTooLarge(RecordTooLarge):
    """The batches of one append larger than segment.bytes (RECORD_LIST_TOO_LARGE)."""


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR: the engine could not persist or read (disk, object store)."""


class NotCaughtUp(StorageError):
    """This broker's copy of shared state could not be brought up to date in time (its
    writer did not answer, or the copy lags): it must not answer from it."""


class RecordsLost(KafkaStorageError):
    """Committed records whose bytes are gone (their object was deleted behind the log's
    back): no retry brings them back. A fetch answers UNKNOWN_SERVER_ERROR, as Kafka does for
    a missing remote segment, which clients surface; KAFKA_STORAGE_ERROR would have them
    retry silently forever. Other requests answer KAFKA_STORAGE_ERROR, as for any storage
    error."""


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    # -1 unless the topic uses LogAppendTime.
    log_append_time_ms: int
    log_start_offset: int


@dataclass(slots=True)
class ReadResult:
    # Whole batches, starting with the batch that contains the requested offset.
    records: bytes
    log_start_offset: int
    log_end_offset: int


@dataclass(slots=True, frozen=True)
class Prefetch:
    """Bytes a read will find already brought in once ``done`` (which raises nothing: a
    failure is the read's to report) completes."""

    size: int
    done: Awaitable[None]


@dataclass(slots=True, frozen=True)
class TimestampOffset:
    timestamp: int
    offset: int
    leader_epoch: int


@dataclass(slots=True, frozen=True)
class EpochEndOffset:
    leader_epoch: int
    end_offset: int


@dataclass(slots=True, frozen=True)
class SpanEnd:
    """Where a sealed storage span ends (its log end offset, the next span's base) and its
    producers' state then (a storage.producer_state snapshot), which the next span's engine
    starts from: idempotent producers and open transactions go on across a live storage-mode
    switch (docs/mode-switch.md)."""

    offset: int
    producer_state: bytes


class Leadership(enum.Enum):
    """This broker's role for a partition, as the replica layer tells the log."""

    LEADER = "leader"
    FOLLOWER = "follower"
    # No longer hosted here (topic deleted, broker shutting down).
    STOPPED = "stopped"


class PartitionLog(abc.ABC):
    """One topic-partition's log, whatever the engine."""

    def __init__(self, topic: str, partition: int, config: LogConfig) -> None:
        self.topic = topic
        self.partition = partition
        self.config = config
        # Set by storage.manager for the logs of data (not of internal topics): appends are
        # refused while they would eat into the space kept for metadata (storage.disk_space).
        self.disk_space: DiskSpace | None = None
        # Set by storage.manager: told when an append leaves data that flush.ms wants fsynced
        # on time, so its flush loop looks at those logs only, not at thousands of idle ones.
        self.on_flush_pending: Callable[[PartitionLog], None] | None = None

    @property
    @abc.abstractmethod
    def log_start_offset(self) -> int: ...

    @property
    @abc.abstractmethod
    def log_end_offset(self) -> int: ...

    @property
    @abc.abstractmethod
    def size_bytes(self) -> int:
        """Bytes of batches the partition holds (DescribeLogDirs' partition size): a local
        log's segments, or what a diskless partition's batches take in object storage."""

    async def append(self, records: bytearray, batches: list[BatchHeader],
                     leader_epoch: int, origin: AppendOrigin = AppendOrigin.CLIENT
                     ) -> AppendResult:
        """Assign offsets to well-formed batches (rewriting ``records`` in place, or a
        recompressed copy of them when the topic's compression.type asks for it) and store
        them, if storage.append_rules allow it; raises RecordTooLarge otherwise, and
        InvalidRecordBatch when records to recompress do not decode. Engines
        implement ``_append`` and leave this alone, so that no append skips the rules."""
        decision = check_append(self.config, records, batches, origin)
        if decision.too_large is not None:
            raise self._too_large(decision.too_large)
        if decision.invalid is not None:
            raise InvalidRecordBatch(f"{decision.invalid} of {self.topic}-{self.partition}")
        # Recompression runs here, before the first await: off the event loop, a later
        # append to this partition (a pipelined request) could overtake this one.
        if needs_recompression(decision, batches):
            records, batches, too_large = recompressed(self.config, records, batches,
                                                       decision.target_codec)
            if too_large is not None:
                raise self._too_large(too_large)
        self.check_space(len(records))
        return await self._append(records, batches, leader_epoch, decision)

    def _too_large(self, refusal: SizeRefusal) -> RecordTooLarge:
        error = RecordListTooLarge if refusal.whole_record_set else RecordTooLarge
        return error(f"{refusal.message} of {self.topic}-{self.partition}")

    def check_space(self, size: int) -> None:
        """Raise DiskFull if ``size`` more bytes of this log would take the reserved space."""
        if self.disk_space is not None:
            self.disk_space.check_data_append(size, f"{self.topic}-{self.partition}")

    @abc.abstractmethod
    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        """The engine's part of ``append``, for batches the rules accepted; ``decision``
        says how to stamp them."""

    @abc.abstractmethod
    async def append_as_follower(self, records: bytes) -> None:
        """Store batches that already carry offsets (replication)."""

    @property
    def follower_append_waits(self) -> bool:
        """Whether ``append_as_follower`` may wait on I/O (active-tiered downloads from
        object storage): the fetcher runs such appends concurrently, and the others in
        turn, without a task each (thousands of partitions in one fetch response)."""
        return False

    @abc.abstractmethod
    async def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_batch: bool = True) -> ReadResult:
        """Whole batches from ``offset``, at most ``max_bytes`` unless the first batch alone is
        larger and ``min_one_batch`` (KIP-74); never past ``max_offset`` (exclusive, e.g. the
        high watermark). Raises OffsetOutOfRange."""

    def prefetch(self, offset: int, max_bytes: int, *, max_offset: int) -> Prefetch | None:
        """Start bringing in what ``read`` from ``offset`` would need, so that a Fetch of
        many partitions waits for their remote reads together rather than one after the
        other; None when there is nothing to bring in (a local log, the default)."""
        return None

    def refresh_prefetch(self) -> Prefetch | None:
        """Once the last ``prefetch`` was waited for: start bringing in what ``read`` needs
        if it changed meanwhile (batches an engine moved); None when nothing more is needed
        (the default)."""
        return None

    async def read_for_replica(self, replica_id: int, offset: int, max_bytes: int, *,
                               max_offset: int | None = None,
                               min_one_batch: bool = True) -> ReadResult:
        """What a follower fetching from ``offset`` gets: the records, as ``read`` returns
        them, unless the engine replicates some other way (active-tiered hands out pointers
        to object-store copies instead)."""
        return await self.read(offset, max_bytes, max_offset=max_offset,
                               min_one_batch=min_one_batch)

    def on_leadership_change(self, role: Leadership, leader_epoch: int) -> None:
        """The replica layer tells the log that this broker became the partition's leader
        or a follower (in ``leader_epoch``), or stopped hosting it, as Kafka tells its
        ``RemoteLogManager`` (``onLeadershipChange``, ``stopPartitions``). An engine that
        replicates or uploads on its own (active-tiered) acts on it; classic and diskless
        need nothing, hence the no-op default.

        It is part of this interface, like ``read_for_replica`` and ``durable_end_offset``,
        rather than a protocol only some engines implement: the partition then tells every
        log the same way without asking what engine it is, and a new engine that needs it
        only overrides it."""

    async def catch_up(self, since: float) -> None:
        """Return once what this log answers (offsets, reads) includes every change
        acknowledged anywhere before ``since`` (time.monotonic()); raises NotCaughtUp.
        A log this broker writes itself is always current, hence the no-op default; an
        engine whose state is written elsewhere and copied here (diskless: the batch
        coordinator's) waits for its copy.

        Called by partitions that any broker serves (replication.leaderless_partition)."""

    def last_stable_offset(self, high_watermark: int) -> int:
        """The offset below which every transaction is decided and its marker is below
        ``high_watermark``: what read_committed consumers may read up to (the LSO)."""
        return high_watermark

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """The partition's high watermark moved (Kafka's UnifiedLog.updateHighWatermark): an
        engine that keeps decided transactions until their markers are replicated forgets
        those now below it, also on a follower that no consumer reads from."""

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        """The aborted transactions with records in [start, end), oldest marker first
        (FetchResponse's aborted_transactions for a read_committed consumer)."""
        return []

    def active_producers(self) -> list[ProducerEntry]:
        """The producers the log keeps idempotence or transaction state for
        (DescribeProducers)."""
        return []

    def producer(self, producer_id: int) -> ProducerEntry | None:
        """One producer's state (whether its transaction is open here); engines that keep
        it indexed answer without listing every producer."""
        return next((entry for entry in self.active_producers()
                     if entry.producer_id == producer_id), None)

    def durable_end_offset(self) -> int:
        """Offsets below this are durable without any follower holding them (e.g. uploaded
        with ``active.tiered.ack.on.upload``), so the high watermark may pass them; -1 when
        only the in-sync replicas make records durable."""
        return -1

    @abc.abstractmethod
    async def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        """The earliest batch whose max timestamp >= ``timestamp_ms`` (ListOffsets)."""

    @abc.abstractmethod
    async def max_timestamp(self) -> TimestampOffset | None:
        """The record with the largest timestamp (ListOffsets -3, MAX_TIMESTAMP)."""

    @abc.abstractmethod
    async def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset (DeleteRecords); return the new log start offset."""

    @abc.abstractmethod
    async def enforce_retention(self, now_ms: int) -> int:
        """Delete what retention.ms / retention.bytes allow; return bytes freed."""

    def flush_deadline_ms(self) -> int | None:
        """When flush.ms wants what this log holds unflushed fsynced (None: nothing is)."""
        return None

    def release_directory(self) -> None:
        """Of a log being deleted: stop using its directory at once (a new log of the same
        partition is opening there); ``delete`` then removes what it had."""

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the idempotent producers idle for ``expiration_ms`` (producer.id.expiration.ms)
        and with no open transaction; return how many. Engines that keep producer state
        elsewhere expire it there."""
        return 0

    @abc.abstractmethod
    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the end offset of ``leader_epoch`` (or the largest smaller one)."""

    @abc.abstractmethod
    def latest_epoch(self) -> int: ...

    @abc.abstractmethod
    async def truncate_to(self, offset: int) -> None:
        """Drop everything at and above ``offset`` (follower truncation)."""

    @abc.abstractmethod
    async def flush(self) -> None: ...

    @abc.abstractmethod
    async def close(self, *, sync: bool = True) -> None:
        """Release the log; what it keeps on local disk is durable and marked clean, so the
        next open needs no recovery. With ``sync=False`` nothing is fsynced nor marked: the
        caller syncs the whole file system, then records ``closed_log_end``
        (LogManager.close_all: one sync for thousands of logs, not several fsyncs each)."""

    def closed_log_end(self) -> int | None:
        """After ``close(sync=False)``: the log end of what it keeps on local disk, which
        the caller records in its data directory's clean shutdown once the file system is
        synced (storage.classic.clean_shutdown), so the next open skips recovery. None:
        the engine keeps nothing to recover locally."""
        return None

    @abc.abstractmethod
    async def delete(self) -> None:
        """Remove the partition's data (topic deletion)."""

    def reconfigure(self, config: LogConfig) -> None:
        self.config = config

    # -- live storage-mode switches (storage.spans, docs/mode-switch.md) ------------------

    async def seal(self) -> SpanEnd:
        """Take no more appends and say where this log ends. The replica layer calls it once
        nothing is appended any more and everything is committed (a leader-based log: its
        high watermark at its log end); an engine whose appends come from every broker
        (diskless) seals at its single writer and answers the same end to every call."""
        raise KafkaStorageError(f"a {type(self).__name__} cannot be switched to another mode")

    async def start_span(self, previous: SpanEnd) -> None:
        """Continue this log at ``previous.offset`` (the offsets before it are another
        engine's), with ``previous``'s producer state. Idempotent."""
        raise KafkaStorageError(f"a {type(self).__name__} cannot be switched to from another mode")

    def skip_to(self, offset: int) -> None:
        """Continue at ``offset`` above the log end (a replica of a span that starts there,
        whose earlier offsets are another engine's)."""
        raise KafkaStorageError(f"a {type(self).__name__} cannot leave a gap of offsets")
