"""One share partition: which records of a topic partition a share group has delivered, to
whom, and what became of them (KIP-932; Kafka's SharePartition).

The records from the share-partition start offset (SPSO) up to the end offset (SPEO, the
first offset never acquired) are *in flight*; each has a state and a delivery count:

    AVAILABLE --acquire--> ACQUIRED --accept--> ACKNOWLEDGED
        ^                     |  \\--reject / gap--> ARCHIVED
        +--release / lock expiry (delivery count below the limit)
                              \\--release / lock expiry at the limit--> ARCHIVED

Acquiring increments the delivery count and locks the record for
``record_lock_duration_ms`` to one member. The SPSO moves past every leading record that is
ACKNOWLEDGED or ARCHIVED, and records below the log start are dropped. At most
``max_record_locks`` offsets are in flight, which bounds the memory of a partition whatever
its consumers do.

Nothing here knows where the records live or how the state is persisted: the share
coordinator (``coordinator.share.coordinator``) calls it and writes ``snapshot()`` to
``__share_group_state`` after every change a member should not lose.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's RecordState ids (also the ``deliveryState`` it persists)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """The acknowledge types of ShareFetch / ShareAcknowledge (KIP-932)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(frozen=True, slots=True)
class ShareLimits:
    delivery_count_limit: int
    max_record_locks: int


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Consecutive offsets acquired together, all delivered ``delivery_count`` times."""
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """Offsets ``first_offset``..``last_offset`` and their acknowledge types: one type for
    all of them, or one per offset."""
    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def type_of(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first_offset]


@dataclass(frozen=True, slots=True)
class StateBatch:
    """Consecutive in-flight offsets with one state and delivery count, as persisted."""
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    """What survives a restart of a share partition: its start offset and every in-flight
    record that is not AVAILABLE at delivery count 0. An ACQUIRED record is persisted with
    its delivery count and comes back AVAILABLE (its member's lock did not survive)."""
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0


class SharePartition:
    def __init__(self, start_offset: int, limits: ShareLimits) -> None:
        self.limits = limits
        self.start_offset = start_offset
        self.end_offset = start_offset
        # Offset -> state, for offsets in [start_offset, end_offset).
        self._records: dict[int, _InFlight] = {}

    @classmethod
    def restore(cls, snapshot: ShareSnapshot, limits: ShareLimits) -> SharePartition:
        partition = cls(snapshot.start_offset, limits)
        for batch in snapshot.batches:
            state = (RecordState.AVAILABLE if batch.state == RecordState.ACQUIRED
                     else batch.state)
            for offset in range(max(batch.first_offset, snapshot.start_offset),
                                batch.last_offset + 1):
                partition._records[offset] = _InFlight(state, batch.delivery_count)
            partition.end_offset = max(partition.end_offset, batch.last_offset + 1)
        for offset in range(partition.start_offset, partition.end_offset):
            partition._records.setdefault(offset, _InFlight(RecordState.AVAILABLE, 0))
        partition._advance_start()
        return partition

    # -- acquisition --------------------------------------------------------------------------

    def acquire(self, member_id: str, max_records: int, log_start_offset: int,
                high_watermark: int, now_ms: int, lock_duration_ms: int) -> list[AcquiredRange]:
        """Lock up to ``max_records`` records for ``member_id`` for ``lock_duration_ms``
        (the group's ``share.record.lock.duration.ms``): AVAILABLE in-flight ones first
        (redeliveries), then new ones below ``high_watermark``."""
        if log_start_offset > self.start_offset:
            self._drop_below(log_start_offset)
        deadline = now_ms + lock_duration_ms
        acquired: list[int] = []
        for offset in range(self.start_offset, self.end_offset):
            if len(acquired) >= max_records:
                break
            record = self._records[offset]
            if record.state == RecordState.AVAILABLE:
                self._lock(record, member_id, deadline)
                acquired.append(offset)
        window_end = min(high_watermark, self.start_offset + self.limits.max_record_locks)
        while len(acquired) < max_records and self.end_offset < window_end:
            record = self._records[self.end_offset] = _InFlight(RecordState.AVAILABLE, 0)
            self._lock(record, member_id, deadline)
            acquired.append(self.end_offset)
            self.end_offset += 1
        return self._ranges(acquired)

    def return_unsent(self, member_id: str, offsets: range) -> None:
        """Undo the acquisition of ``offsets`` that the reading broker could not send (its
        response filled up): they were never delivered, so their delivery count is too."""
        for offset in offsets:
            record = self._records.get(offset)
            if (record is not None and record.state == RecordState.ACQUIRED
                    and record.member_id == member_id):
                record.state = RecordState.AVAILABLE
                record.delivery_count -= 1
                record.member_id = None
        while (self.end_offset > self.start_offset
               and (last := self._records[self.end_offset - 1]).state == RecordState.AVAILABLE
               and last.delivery_count == 0):
            del self._records[self.end_offset - 1]
            self.end_offset -= 1

    def _lock(self, record: _InFlight, member_id: str, deadline_ms: int) -> None:
        record.state = RecordState.ACQUIRED
        record.delivery_count += 1
        record.member_id = member_id
        record.lock_deadline_ms = deadline_ms

    def _ranges(self, offsets: list[int]) -> list[AcquiredRange]:
        ranges: list[AcquiredRange] = []
        for offset in offsets:
            count = self._records[offset].delivery_count
            last = ranges[-1] if ranges else None
            if last is not None and last.last_offset + 1 == offset and last.delivery_count == count:
                ranges[-1] = AcquiredRange(last.first_offset, offset, count)
            else:
                ranges.append(AcquiredRange(offset, offset, count))
        return ranges

    # -- acknowledgement and release ------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: list[AcknowledgementBatch]) -> ErrorCode:
        """Apply a member's acknowledgements, all or none: every offset must be one the
        member holds (Kafka: INVALID_RECORD_STATE otherwise)."""
        for batch in batches:
            if (batch.last_offset < batch.first_offset or not batch.types
                    or len(batch.types) not in (1, batch.last_offset - batch.first_offset + 1)
                    or any(t not in AcknowledgeType._value2member_map_ for t in batch.types)):
                return ErrorCode.invalid_request
            if batch.first_offset < self.start_offset or batch.last_offset >= self.end_offset:
                return ErrorCode.invalid_record_state  # outside the window: never acquired
            for offset in range(batch.first_offset, batch.last_offset + 1):
                record = self._records[offset]
                if record.state != RecordState.ACQUIRED or record.member_id != member_id:
                    return ErrorCode.invalid_record_state
        for batch in batches:
            for offset in range(batch.first_offset, batch.last_offset + 1):
                self._settle(self._records[offset], AcknowledgeType(batch.type_of(offset)))
        self._advance_start()
        return ErrorCode.none

    def _settle(self, record: _InFlight, ack: AcknowledgeType) -> None:
        record.member_id = None
        if ack == AcknowledgeType.ACCEPT:
            record.state = RecordState.ACKNOWLEDGED
        elif ack == AcknowledgeType.RELEASE:
            self._make_available(record)
        else:  # REJECT, or GAP: an offset without a record (compacted, a control batch)
            record.state = RecordState.ARCHIVED

    def _make_available(self, record: _InFlight) -> None:
        """A released record goes back for redelivery, unless it has been delivered as many
        times as the group allows (group.share.delivery.count.limit): then it is archived."""
        record.member_id = None
        record.state = (RecordState.ARCHIVED
                        if record.delivery_count >= self.limits.delivery_count_limit
                        else RecordState.AVAILABLE)

    def expire_locks(self, now_ms: int) -> bool:
        """Release every record whose lock has expired; whether any was."""
        expired = [r for r in self._records.values()
                   if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms]
        for record in expired:
            self._make_available(record)
        self._advance_start()
        return bool(expired)

    def release_member(self, member_id: str) -> bool:
        """Release what ``member_id`` holds (it left, or closed its share session)."""
        held = [r for r in self._records.values()
                if r.state == RecordState.ACQUIRED and r.member_id == member_id]
        for record in held:
            self._make_available(record)
        self._advance_start()
        return bool(held)

    def next_lock_deadline_ms(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self._records.values()
                     if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- start offset -----------------------------------------------------------------------

    def reset_start(self, offset: int) -> None:
        """AlterShareGroupOffsets: start over at ``offset``, nothing in flight."""
        self._records.clear()
        self.start_offset = self.end_offset = offset

    def _drop_below(self, offset: int) -> None:
        for dropped in range(self.start_offset, min(offset, self.end_offset)):
            del self._records[dropped]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance_start()

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset and self._records[self.start_offset].state in (
                RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
            del self._records[self.start_offset]
            self.start_offset += 1

    # -- persistence and description ----------------------------------------------------------

    def snapshot(self) -> ShareSnapshot:
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            record = self._records[offset]
            if record.state == RecordState.AVAILABLE and record.delivery_count == 0:
                continue
            last = batches[-1] if batches else None
            if (last is not None and last.last_offset + 1 == offset
                    and last.state == record.state
                    and last.delivery_count == record.delivery_count):
                batches[-1] = StateBatch(last.first_offset, offset, last.state,
                                         last.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, record.state, record.delivery_count))
        return ShareSnapshot(self.start_offset, tuple(batches))

    def state_of(self, offset: int) -> tuple[RecordState, int] | None:
        """The state and delivery count of an in-flight offset, None outside the window."""
        record = self._records.get(offset)
        return None if record is None else (record.state, record.delivery_count)
