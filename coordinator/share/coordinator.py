"""The share coordinator: owner of share partitions' acquisition state, kept in
``__share_group_state`` (KIP-932; Kafka's ShareCoordinatorShard together with the
SharePartition the partition leader holds in Kafka).

Each share partition (group, topic id, partition) belongs to one partition of
``__share_group_state`` (``abs(hash(group:topicId:partition)) % partitions``, as Kafka's
share coordinator); the broker leading it is the share partition's *owner*: the only one
that acquires, acknowledges and releases its records, and it writes the partition's state
there after every change a member must not lose (acknowledgements, releases, lock
expiries, a new start offset), before answering. A new owner (leader change, restart)
replays the partition: the last snapshot of each share partition is its state, with
records that were acquired back to AVAILABLE (their locks did not survive; their delivery
counts did).

Kafka keeps the acquisition state on the topic partition's leader and persists it through
the share coordinator. kipper puts both on the owner: a diskless partition has no leader
(any broker of a consumer's AZ serves it), so one designated place must decide who holds
which record; the brokers serving ShareFetch read the records themselves and ask the owner
only which offsets to send (``broker.share_owners``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..coordinator_log import CoordinatorLog, CoordinatorLogError, LoggedMarker, LoggedRecord, LogRecord
from ..group.timer import Scheduled, Timer
from ..group_config import ShareGroupSettings
from ..internal_topic import SHARE_GROUP_STATE_TOPIC
from ..partition_loader import PartitionLoader, replay_into
from .records import MalformedShareRecord, SharePartitionKey, snapshot_from_bytes, snapshot_to_bytes
from .share_partition import (
    AcknowledgementBatch,
    AcquiredRange,
    SharePartition,
    ShareLimits,
    ShareSnapshot,
)

log = logging.getLogger(__name__)

EARLIEST = "earliest"


@dataclass(frozen=True, slots=True)
class ShareCoordinatorSettings:
    limits: ShareLimits
    # A group's share.auto.offset.reset (where a share partition without state starts) and
    # share.record.lock.duration.ms, read when they apply: a change holds from then on.
    group_settings: Callable[[str], ShareGroupSettings]


@dataclass(frozen=True, slots=True)
class AcquireRequest:
    key: SharePartitionKey
    member_id: str
    max_records: int
    # The reading broker's view of the topic partition.
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class AcquireResult:
    error: ErrorCode
    ranges: tuple[AcquiredRange, ...] = ()


@dataclass(slots=True)
class LoadedShareStates:
    """The last snapshot of each share partition in a partition of __share_group_state (a
    tombstone removing it): the state machine loading replays the partition into."""

    partition: int
    snapshots: dict[SharePartitionKey, ShareSnapshot] = field(default_factory=dict)
    next_offset: int = 0

    def apply(self, offset: int, record: LoggedRecord | LoggedMarker) -> None:
        self.next_offset = offset + 1
        if isinstance(record, LoggedMarker):
            return
        try:
            key = SharePartitionKey.from_bytes(record.key or b"")
            if record.value is None:
                self.snapshots.pop(key, None)
            else:
                self.snapshots[key] = snapshot_from_bytes(record.value)
        except MalformedShareRecord as e:
            log.warning("%s-%d offset %d: skipping record: %s", SHARE_GROUP_STATE_TOPIC,
                        self.partition, offset, e)


class ShareCoordinator:
    def __init__(self, settings: ShareCoordinatorSettings, store: CoordinatorLog,
                 timer: Timer) -> None:
        self.settings = settings
        self.store = store
        self.timer = timer
        self._active = False
        self._background: set[asyncio.Task] = set()
        # Share partitions owned here: restored (lazily) from their snapshot or new.
        self._partitions: dict[SharePartitionKey, SharePartition] = {}
        self._snapshots: dict[SharePartitionKey, ShareSnapshot] = {}
        # Changes made to each share partition, and how many of them are written.
        self._changes: dict[SharePartitionKey, int] = {}
        self._written: dict[SharePartitionKey, int] = {}
        self._write_locks: dict[SharePartitionKey, asyncio.Lock] = {}
        self._expiry_timers: dict[SharePartitionKey, Scheduled] = {}
        self.loader: PartitionLoader[LoadedShareStates] = PartitionLoader(
            SHARE_GROUP_STATE_TOPIC, store, self._spawn,
            lambda partition: replay_into(store, partition, LoadedShareStates(partition)),
            self._on_loaded, self._on_unloaded)

    # -- lifecycle and ownership ----------------------------------------------------------

    async def start(self) -> None:
        self._active = True
        self.loader.sync()

    async def stop(self) -> None:
        self._active = False
        self.loader.unload_all()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def on_metadata_change(self) -> None:
        if self._active:
            self.loader.sync()

    def _on_loaded(self, partition: int, loaded: LoadedShareStates) -> None:
        self._snapshots.update(loaded.snapshots)
        if loaded.snapshots:
            log.info("loaded %d share partitions of %s-%d", len(loaded.snapshots),
                     SHARE_GROUP_STATE_TOPIC, partition)

    def _on_unloaded(self, partition: int) -> None:
        for key in [k for k in self._expiry_timers if self._state_partition(k) == partition]:
            self._expiry_timers.pop(key).cancel()
        for table in (self._partitions, self._snapshots, self._changes, self._written,
                      self._write_locks):
            for key in [k for k in table if self._state_partition(k) == partition]:
                del table[key]

    def _state_partition(self, key: SharePartitionKey) -> int:
        return self.store.partition_for(key.coordinator_key())

    def owner_error(self, key: SharePartitionKey) -> ErrorCode | None:
        """Why this broker cannot act for ``key`` now, if it cannot."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        return self.loader.serving_error(self._state_partition(key))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- what the brokers serving ShareFetch and ShareAcknowledge ask ---------------------------

    async def acquire(self, request: AcquireRequest) -> AcquireResult:
        key = request.key
        if (error := self.owner_error(key)) is not None:
            return AcquireResult(error)
        partition = self._partitions.get(key)
        if partition is None:
            partition = self._open(key, request.log_start_offset, request.high_watermark)
            # Written before any record goes out: a new owner must not start elsewhere.
            if (error := await self._write(key)) is not None:
                return AcquireResult(error)
        now = self.timer.now_ms()
        lock_duration_ms = self.settings.group_settings(key.group_id).record_lock_duration_ms
        ranges = partition.acquire(request.member_id, request.max_records,
                                   request.log_start_offset, request.high_watermark, now,
                                   lock_duration_ms)
        if ranges and key not in self._expiry_timers:
            self._schedule_expiry(key, partition)
        return AcquireResult(ErrorCode.none, tuple(ranges))

    def return_unsent(self, key: SharePartitionKey, member_id: str,
                      unsent: list[range]) -> None:
        partition = self._partitions.get(key)
        if partition is not None and self.owner_error(key) is None:
            for offsets in unsent:
                partition.return_unsent(member_id, offsets)

    async def acknowledge(self, key: SharePartitionKey, member_id: str,
                          batches: list[AcknowledgementBatch]) -> ErrorCode:
        if (error := self.owner_error(key)) is not None:
            return error
        partition = self._partitions.get(key)
        if partition is None:
            return ErrorCode.invalid_record_state  # nothing was acquired here
        error = partition.acknowledge(member_id, batches)
        if error != ErrorCode.none:
            return error
        self._changed(key)
        return await self._write(key) or ErrorCode.none

    async def release_member(self, keys: list[SharePartitionKey], member_id: str) -> None:
        """A member closed its share session: what it holds goes back for redelivery."""
        for key in keys:
            partition = self._partitions.get(key)
            if (partition is not None and self.owner_error(key) is None
                    and partition.release_member(member_id)):
                self._changed(key)
                await self._write(key)

    def _schedule_expiry(self, key: SharePartitionKey, partition: SharePartition) -> None:
        """One timer per share partition, due when its earliest lock expires."""
        deadline = partition.next_lock_deadline_ms()
        if deadline is not None:
            self._expiry_timers[key] = self.timer.schedule(
                max(deadline - self.timer.now_ms(), 1), self._expire_locks, key, partition)

    def _expire_locks(self, key: SharePartitionKey, partition: SharePartition) -> None:
        self._expiry_timers.pop(key, None)
        if self._partitions.get(key) is not partition:
            return  # unloaded since, or replaced
        if partition.expire_locks(self.timer.now_ms()):
            self._changed(key)
            self._spawn(self._write_logged(key))
        self._schedule_expiry(key, partition)

    # -- administration (share group offsets) -------------------------------------------------

    def start_offset(self, key: SharePartitionKey) -> int | None:
        """The share-partition start offset, None when the group has no state for it."""
        partition = self._partitions.get(key)
        if partition is not None:
            return partition.start_offset
        snapshot = self._snapshots.get(key)
        return snapshot.start_offset if snapshot is not None else None

    async def reset_start_offset(self, key: SharePartitionKey, offset: int) -> ErrorCode:
        """AlterShareGroupOffsets (the group has no members: nothing is in flight)."""
        if (error := self.owner_error(key)) is not None:
            return error
        partition = self._partitions.get(key) or self._open(key, offset, offset)
        partition.reset_start(offset)
        self._changed(key)
        return await self._write(key) or ErrorCode.none

    async def delete_state(self, key: SharePartitionKey) -> ErrorCode:
        """DeleteShareGroupOffsets: forget the share partition (a tombstone)."""
        if (error := self.owner_error(key)) is not None:
            return error
        self._partitions.pop(key, None)
        self._snapshots.pop(key, None)
        try:
            await self.store.append(self._state_partition(key),
                                    [LogRecord(key.to_bytes(), None)], self.timer.now_ms())
        except CoordinatorLogError as e:
            return e.error_code
        return ErrorCode.none

    # -- state and its writes -----------------------------------------------------------------

    def _open(self, key: SharePartitionKey, log_start_offset: int,
              high_watermark: int) -> SharePartition:
        snapshot = self._snapshots.pop(key, None)
        limits = self.settings.limits
        if snapshot is not None:
            partition = SharePartition.restore(snapshot, limits)
        else:
            reset = self.settings.group_settings(key.group_id).auto_offset_reset
            start = log_start_offset if reset == EARLIEST else high_watermark
            partition = SharePartition(start, limits)
            self._changed(key)
        self._partitions[key] = partition
        return partition

    def _changed(self, key: SharePartitionKey) -> None:
        self._changes[key] = self._changes.get(key, 0) + 1

    async def _write(self, key: SharePartitionKey) -> ErrorCode | None:
        """Write the share partition's state, once every change made so far is in it (one
        write covers the changes of every caller waiting meanwhile); the error if it failed."""
        wanted = self._changes.get(key, 0)
        lock = self._write_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if self._written.get(key, 0) >= wanted:
                return None
            partition = self._partitions.get(key)
            if partition is None:
                return ErrorCode.not_coordinator  # unloaded meanwhile
            covered = self._changes.get(key, 0)
            record = LogRecord(key.to_bytes(), snapshot_to_bytes(partition.snapshot()))
            try:
                await self.store.append(self._state_partition(key), [record],
                                        self.timer.now_ms())
            except CoordinatorLogError as e:
                return e.error_code
            self._written[key] = max(self._written.get(key, 0), covered)
            return None

    async def _write_logged(self, key: SharePartitionKey) -> None:
        if (error := await self._write(key)) is not None:
            log.warning("share partition %s: state not written: %s", key, error.name)
