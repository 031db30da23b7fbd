"""The classic engine: today's Kafka log (Kafka's ``UnifiedLog`` over ``LocalLog``).

``LocalLog`` holds the segments; this layer adds what Kafka keeps above them: the log start
offset (checkpointed in ``log-start-offset``), the leader epoch cache, producer-state checks
and offset assignment, the flush policy, retention and DeleteRecords. The append rules every
engine shares (batch and record-set size, timestamp type) are storage.append_rules'.

The high watermark is not tracked here: the broker's partition object owns it and passes it
to ``read`` as ``max_offset``.

Every method runs to completion without awaiting (page-cache I/O is fast), so calls on one
log never interleave and need no lock. ``flush`` and ``close`` fsync, which does block the
event loop for as long as the disk takes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from protocol.records import (
    BatchHeader,
    InvalidRecordBatch,
    TxnMarker,
    assign_offsets,
    iter_batches,
    read_marker,
)

from ..append_rules import AppendDecision, AppendOrigin
from ..config import LONG_MAX, LogConfig
from ..disk_space import storage_io
from ..log import (
    AppendResult,
    EpochEndOffset,
    KafkaStorageError,
    OffsetOutOfRange,
    PartitionLog,
    ReadResult,
    SpanEnd,
    StorageError,
    TimestampOffset,
)
from ..producer_state import (
    AbortedTransaction,
    CorruptSnapshot,
    ProducerEntry,
    ProducerState,
)
from .checkpoint import read_offset, read_small_file, write_atomically, write_offset
from .cleaner import CleaningPlan, SegmentView, max_index_entries
from .directories import TRASH
from .leader_epoch import LEADER_EPOCH_FILE, LeaderEpochCache
from .local_log import LocalLog, list_log_dir
from .segment import LogSegment

LOG_START_OFFSET_FILE = "log-start-offset"
# "<offset> <base64 of ProducerState.snapshot()>": idempotent-producer state of every batch
# below <offset>. Written on flush, roll and close; batches after it are replayed on open.
PRODUCER_SNAPSHOT_FILE = "producer-state"
_REBUILD_READ_BYTES = 1 << 20
log = logging.getLogger(__name__)


class UnexpectedAppendOffset(StorageError):
    """A follower append whose batches do not continue the log end offset contiguously."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def marker_of(buf: bytes | bytearray | memoryview, batch: BatchHeader) -> TxnMarker | None:
    """The transaction marker ``batch`` carries; None for data batches and for control
    batches of another kind (logged: kipper writes none)."""
    if not batch.is_control:
        return None
    try:
        return read_marker(buf, batch)
    except InvalidRecordBatch as e:
        log.warning("ignoring control batch: %s", e)
        return None


class ClassicLog(PartitionLog):
    def __init__(self, topic: str, partition: int, config: LogConfig,
                 directory: Path | str, *, clean_recovery_point: int | None = None) -> None:
        """``clean_recovery_point``: the log end its data directory's clean shutdown
        recorded for it (storage.classic.clean_shutdown); None: recover what its own
        recovery point does not cover."""
        super().__init__(topic, partition, config)
        self.directory = directory if isinstance(directory, Path) else Path(directory)
        # Strings, and files read only if the one listing shows them: a broker opens
        # thousands of logs at start-up (see LogSegment).
        path = os.fspath(directory)
        self._log_start_file = os.path.join(path, LOG_START_OFFSET_FILE)
        self._producer_snapshot_file = os.path.join(path, PRODUCER_SNAPSHOT_FILE)
        with storage_io(f"load {path}"):
            names = list_log_dir(path)
            self._epochs = LeaderEpochCache(os.path.join(path, LEADER_EPOCH_FILE),
                                            read=LEADER_EPOCH_FILE in names)
            checkpointed_start = (read_offset(self._log_start_file) or 0
                                  if LOG_START_OFFSET_FILE in names else 0)
            self._local = LocalLog(self.directory, config, start_offset=checkpointed_start,
                                   on_recovered_batch=self._on_recovered_batch, names=names,
                                   clean_recovery_point=clean_recovery_point)
            self._log_start = max(checkpointed_start, self._local.segments[0].base_offset)
            if self._local.next_offset < self._log_start:
                # Data up to the checkpointed log start is gone (lost or never written here).
                self._local.truncate_fully_and_start_at(self._log_start)
            self._epochs.truncate_from_end(self._local.next_offset)
            self._epochs.truncate_from_start(self._log_start)
        # Deletion (release_directory): the directory renamed aside, to be removed.
        self._released = False
        self._doomed: Path | None = None
        # The log end at which what is on disk gives the current producer state (a snapshot
        # there, or an empty log to replay): close need not write a snapshot when nothing was
        # appended since (thousands of untouched partitions at shutdown).
        self._snapshot_offset: int | None = None
        self._producers = self._load_producer_state(PRODUCER_SNAPSHOT_FILE in names)
        if self._local.next_offset == self._log_start:
            self._snapshot_offset = self._log_start
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        # The last high watermark the partition reported: the cleaner stays below it.
        self._high_watermark = self._log_start

    def _on_recovered_batch(self, batch: BatchHeader) -> None:
        if batch.partition_leader_epoch >= 0:
            self._epochs.assign(batch.partition_leader_epoch, batch.base_offset)

    def __repr__(self) -> str:
        return (f"ClassicLog({self.topic}-{self.partition}, "
                f"[{self._log_start}, {self.log_end_offset}))")

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def size_bytes(self) -> int:
        return self._local.size

    @property
    def log_end_offset(self) -> int:
        return self._local.next_offset

    def reconfigure(self, config: LogConfig) -> None:
        # Segment-level settings (index interval and size) apply from the next segment.
        super().reconfigure(config)
        self._local.config = config
        if self.flush_deadline_ms() is not None and self.on_flush_pending is not None:
            self.on_flush_pending(self)  # flush.ms set while data waits unflushed

    # -- appends -------------------------------------------------------------------------

    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        now = _now_ms()
        append_time = decision.append_time_ms(now)
        base_offset = self._local.next_offset
        # Before offsets are assigned: raises ProducerStateError on a fenced epoch or an
        # out-of-order sequence; a retried batch gets its original offsets, and is not stored.
        # A control batch comes alone (the broker builds it for WriteTxnMarkers).
        producer_plan = self._producers.check_append(
            batches, base_offset, append_time, marker_of(records, batches[0]),
            check_sequences=decision.origin == AppendOrigin.CLIENT)
        if producer_plan.duplicate is not None:
            first, last = producer_plan.duplicate.first_offset, producer_plan.duplicate.last_offset
            stamp = -1 if append_time is None else producer_plan.duplicate.timestamp
            return AppendResult(first, last, stamp, self._log_start)
        next_offset = assign_offsets(records, batches, base_offset, leader_epoch, append_time)
        active = self._local.active
        self._write(records, batches, now)
        if self._local.active is not active:
            self._save_producer_state(base_offset)  # as Kafka, a snapshot at every roll
        self._producers.apply(producer_plan)
        if leader_epoch >= 0:
            self._epochs.assign(leader_epoch, base_offset)
        self._maybe_flush(batches, now)
        return AppendResult(base_offset, next_offset - 1,
                            -1 if append_time is None else append_time, self._log_start)

    def _load_producer_state(self, snapshot_exists: bool = True) -> ProducerState:
        """The last snapshot plus the batches after it (all of them without a usable one)."""
        state, offset = ProducerState(), self._log_start
        try:
            snapshot = read_small_file(self._producer_snapshot_file) if snapshot_exists else None
            if snapshot is not None:
                snapshot_offset, encoded = snapshot.split()
                if int(snapshot_offset) <= self._local.next_offset:  # else the log lost its tail
                    state = ProducerState.restore(base64.b64decode(encoded, validate=True))
                    offset = max(int(snapshot_offset), self._log_start)
                    self._snapshot_offset = int(snapshot_offset)
        except (ValueError, binascii.Error, CorruptSnapshot) as e:
            log.warning("%s: rebuilding producer state from the log: %s", self.directory, e)
        while offset < self._local.next_offset:
            chunk = self._local.read(offset, _REBUILD_READ_BYTES, None, True)
            if not chunk:
                break
            for batch in iter_batches(chunk):
                state.load_batch(batch, batch.base_offset, marker_of(chunk, batch))
                offset = batch.next_offset
        state.trim(self._log_start)
        return state

    def _save_producer_state(self, offset: int, *, sync: bool = True) -> None:
        encoded = base64.b64encode(self._producers.snapshot()).decode("ascii")
        write_atomically(self._producer_snapshot_file, f"{offset} {encoded}\n", sync=sync)
        self._snapshot_offset = offset

    async def append_as_follower(self, records: bytes) -> None:
        # A fetch response may end with a partial batch; only whole batches are stored.
        batches = list(iter_batches(records, verify_crc=True, allow_partial_tail=True))
        if not batches:
            return
        # Offsets only go up; a leader's cleaned log has gaps where the cleaner removed
        # whole batches, which its followers keep (Kafka checks the same).
        expected = self._local.next_offset
        for batch in batches:
            if batch.base_offset < expected:
                raise UnexpectedAppendOffset(
                    f"{self.topic}-{self.partition}: batch at offset {batch.base_offset} "
                    f"does not follow offset {expected - 1}")
            expected = batch.next_offset
        end = batches[-1].position + batches[-1].size
        self.check_space(end)
        now = _now_ms()
        self._write(memoryview(records)[:end], batches, now)
        for batch in batches:
            if batch.partition_leader_epoch >= 0:
                self._epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            self._producers.load_batch(batch, batch.base_offset, marker_of(records, batch))
        self._maybe_flush(batches, now)

    def _write(self, records: bytes | bytearray | memoryview, batches: list[BatchHeader],
               now: int) -> None:
        with storage_io(f"append to {self.directory}"):
            self._local.append(records, batches, now)

    def _maybe_flush(self, batches: list[BatchHeader], now: int) -> None:
        self._unflushed_messages += sum(b.record_count for b in batches)
        if self._unflushed_messages >= self.config.flush_messages \
                or now - self._last_flush_ms >= self.config.flush_ms:
            self._flush(now)
        elif self.config.flush_ms != LONG_MAX and self.on_flush_pending is not None:
            self.on_flush_pending(self)

    def flush_deadline_ms(self) -> int | None:
        if not self._unflushed_messages or self.config.flush_ms == LONG_MAX:
            return None
        return self._last_flush_ms + self.config.flush_ms

    # -- reads ---------------------------------------------------------------------------

    async def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_batch: bool = True) -> ReadResult:
        log_end = self._local.next_offset
        if offset < self._log_start or offset > log_end:
            raise OffsetOutOfRange(
                f"offset {offset} is outside [{self._log_start}, {log_end}] "
                f"of {self.topic}-{self.partition}")
        if offset == log_end or (max_offset is not None and offset >= max_offset):
            records = b""
        else:
            with storage_io(f"read {self.directory}"):
                records = self._local.read(offset, max_bytes, max_offset, min_one_batch)
        return ReadResult(records, self._log_start, log_end)

    def last_stable_offset(self, high_watermark: int) -> int:
        return self._producers.last_stable_offset(high_watermark)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._high_watermark = high_watermark
        self._producers.forget_replicated(high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        return self._producers.aborted_between(start, end)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        # The next snapshot (at a roll or close) leaves them out; until then a restart
        # rebuilds them and the next check forgets them again.
        return self._producers.remove_expired(now_ms, expiration_ms)

    def active_producers(self) -> list[ProducerEntry]:
        return list(self._producers.producers.values())

    def producer(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.producers.get(producer_id)

    async def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        for segment in self._local.segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_by_timestamp(timestamp_ms, self._log_start)
                if found is not None:
                    return found
        return None

    async def max_timestamp(self) -> TimestampOffset | None:
        # max() keeps the first of equal maxima: the earliest record wins, as in Kafka.
        segment = max(self._local.segments, key=lambda s: s.max_timestamp)
        return segment.max_timestamp_record()

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        return self._epochs.end_offset_for(leader_epoch, self._local.next_offset)

    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    # -- compaction (storage.classic.cleaner) -------------------------------------------

    def cleaning_plan(self, first_dirty: int | None, now_ms: int) -> CleaningPlan:
        """The log's clean, dirty and uncleanable sections (Kafka's cleanableOffsets):
        ``first_dirty`` is the cleaner's checkpoint (None: never cleaned), kept within the
        log; cleaning stops below the active segment, the last stable offset and the first
        segment with records newer than min.compaction.lag.ms."""
        segments = self._local.segments
        if first_dirty is None or not self._log_start <= first_dirty <= self.log_end_offset:
            first_dirty = self._log_start
        first_uncleanable = min(self._local.active.base_offset,
                                self._producers.last_stable_offset(self._high_watermark))
        lag_limit = now_ms - self.config.min_compaction_lag_ms
        for segment in segments[:-1]:
            if segment.next_offset > first_dirty and segment.largest_timestamp > lag_limit:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
        views = [SegmentView(s, s.path, s.base_offset, s.next_offset, s.size, s.modified_ms)
                 for s in segments[:-1]]
        return CleaningPlan(
            self._log_start, first_dirty, max(first_uncleanable, first_dirty), views,
            list(self._producers.aborted),
            {pid: e.last_offset for pid, e in self._producers.producers.items()},
            self.config.delete_retention_ms, self.config.segment_bytes,
            max_index_entries(self.config.segment_index_bytes),
            self.config.index_interval_bytes)

    def compaction_delay_ms(self, plan: CleaningPlan, now_ms: int) -> int:
        """How long ago the first dirty record passed max.compaction.lag.ms: above 0 the log
        is cleaned whatever its dirty ratio (Kafka's needCompactionNow, and its
        max-compaction-delay-secs gauge); 0 or less when it has not."""
        for view in plan.segments:
            if view.next_offset > plan.first_dirty and view.base_offset < plan.first_uncleanable:
                first = view.segment.first_batch_timestamp()
                return now_ms - first - self.config.max_compaction_lag_ms if first >= 0 else 0
        return 0

    def cleaned_segment(self, base_offset: int) -> LogSegment:
        return self._local.cleaned_segment(base_offset)

    def replace_segments(self, old: list[LogSegment], cleaned: LogSegment) -> bool:
        """Swap in a segment the cleaner wrote (offsets, producer state and epochs are
        unchanged by cleaning, so nothing else moves); False when the log changed first."""
        with storage_io(f"swap cleaned segments into {self.directory}"):
            return self._local.replace_segments(old, cleaned)

    # -- deletion ------------------------------------------------------------------------

    async def delete_records_before(self, offset: int) -> int:
        """Also how a follower whose log ends below the leader's log start catches up: an
        ``offset`` above the log end empties the log and restarts it there."""
        if offset > self._local.next_offset:
            with storage_io(f"empty {self.directory}"):
                self._local.truncate_fully_and_start_at(offset)
                self._epochs.clear()
            self._set_log_start(offset)
        elif offset > self._log_start:
            previous = self._log_start
            # Segments go before the checkpoint is written: on a full disk the deletion
            # frees the space the checkpoint needs.
            self._log_start = offset
            try:
                self._delete_segments(self._below_log_start)
                self._set_log_start(offset)
            except KafkaStorageError:
                # Not durable, so not done: a retry writes it (what was deleted stays so).
                self._log_start = max(previous, self._local.segments[0].base_offset)
                raise
        return self._log_start

    def _below_log_start(self, segment: LogSegment, following: LogSegment | None) -> bool:
        """Whether every record of ``segment`` is below the log start. The active segment
        too (unlike Kafka, which keeps it): DeleteRecords up to the high watermark must free
        a full disk whatever segment.bytes is."""
        end = following.base_offset if following is not None else segment.next_offset
        return end <= self._log_start

    async def enforce_retention(self, now_ms: int) -> int:
        """Delete whole segments, oldest first, that retention.ms or retention.bytes allow,
        and those entirely below the log start offset.

        The log does not know the high watermark, so unlike Kafka it cannot spare data that
        is not yet replicated; with retention in hours or days this does not arise."""
        freed = 0
        retention_ms = self.config.retention_ms
        if not self.config.delete_policy:
            # cleanup.policy=compact: only the cleaner shrinks the log (and DeleteRecords).
            return self._delete_segments(self._below_log_start)
        if retention_ms >= 0:
            freed += self._delete_segments(
                lambda segment, _: now_ms - segment.largest_timestamp > retention_ms)
        if self.config.retention_bytes >= 0:
            excess = self._local.size - self.config.retention_bytes

            def over_size(segment: LogSegment, _: LogSegment | None) -> bool:
                nonlocal excess
                if excess < segment.size:
                    return False
                excess -= segment.size
                return True

            freed += self._delete_segments(over_size)
        freed += self._delete_segments(self._below_log_start)
        return freed

    def _delete_segments(self, deletable: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete the oldest segments for which ``deletable(segment, following_segment)``
        holds, stopping at the first that it rejects; return the bytes freed."""
        segments = self._local.segments
        count = 0
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            if following is None and segment.size == 0:
                break
            if not deletable(segment, following):
                break
            count += 1
        if count == 0:
            return 0
        with storage_io(f"delete segments of {self.directory}"):
            freed = self._local.delete_oldest_segments(count)
        first_offset = self._local.segments[0].base_offset
        if first_offset > self._log_start:
            self._set_log_start(first_offset)
        return freed

    def _set_log_start(self, offset: int) -> None:
        self._log_start = offset
        self._producers.trim(offset)
        with storage_io(f"checkpoint the log start of {self.directory}"):
            write_offset(self._log_start_file, offset)
            self._epochs.truncate_from_start(offset)

    # -- live storage-mode switches (storage.spans) ----------------------------------------

    async def seal(self) -> SpanEnd:
        # The partition calls this with nothing appending and everything committed.
        return SpanEnd(self.log_end_offset, self._producers.snapshot())

    async def start_span(self, previous: SpanEnd) -> None:
        self.skip_to(previous.offset)
        carried = ProducerState.restore(previous.producer_state)
        # The previous span's state is the newer one for every producer it knows.
        self._producers.producers.update(carried.producers)
        known = {(a.producer_id, a.first_offset) for a in self._producers.aborted}
        self._producers.aborted += [a for a in carried.aborted
                                    if (a.producer_id, a.first_offset) not in known]
        with storage_io(f"save the producer state of {self.directory}"):
            self._save_producer_state(self.log_end_offset)

    def skip_to(self, offset: int) -> None:
        if offset <= self._local.next_offset:
            return
        with storage_io(f"continue {self.directory} at {offset}"):
            if self._local.next_offset == self._log_start:  # empty: it starts there
                self._local.truncate_fully_and_start_at(offset)
                self._epochs.clear()
                self._set_log_start(offset)
            else:
                self._local.skip_to(offset)
            self._save_producer_state(offset)

    async def truncate_to(self, offset: int) -> None:
        if offset >= self._local.next_offset:
            return
        with storage_io(f"truncate {self.directory}"):
            self._truncate_to(offset)

    async def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and restart the log, empty, at ``offset`` (a replica that loads
        a snapshot in place of the log below it: KIP-630)."""
        with storage_io(f"truncate {self.directory}"):
            self._local.truncate_fully_and_start_at(offset)
            self._epochs.clear()
            self._set_log_start(offset)
            self._producers = self._load_producer_state()
            self._save_producer_state(offset)

    def _truncate_to(self, offset: int) -> None:
        if offset < self._log_start:
            self._local.truncate_fully_and_start_at(offset)
            self._epochs.clear()
            self._set_log_start(offset)
        else:
            self._local.truncate_to(offset)
            log_end = self._local.next_offset
            if log_end < self._log_start:
                # The batch holding the log start was cut: the log is empty and starts there.
                self._set_log_start(log_end)
            self._epochs.truncate_from_end(log_end)
        # The cut batches must not count as stored: not now, nor after a crash.
        self._producers = self._load_producer_state()
        self._save_producer_state(self._local.next_offset)

    # -- lifecycle -----------------------------------------------------------------------

    async def flush(self) -> None:
        self.flush_blocking()

    def flush_blocking(self) -> None:
        """``flush`` for a caller that runs it on a thread and lets nothing change the log
        until it returns (coordinator.metadata_log)."""
        self._flush(_now_ms())

    def _flush(self, now: int) -> None:
        with storage_io(f"flush {self.directory}"):
            self._epochs.save(sync=True)  # durable before the recovery point passes its entries
            self._local.flush()
            # Not fsynced (Kafka writes producer snapshots at rolls, not at every flush):
            # it is written once the batches it covers are durable, so a crash leaves this
            # snapshot or an older one (CRC-checked: a torn one is ignored), and the
            # batches after the one found are replayed on open.
            self._save_producer_state(self._local.next_offset, sync=False)
        self._unflushed_messages = 0
        self._last_flush_ms = now

    async def close(self, *, sync: bool = True) -> None:
        # Off the event loop, and several at once (LogManager.close_all): a broker stopping
        # closes thousands of logs, and each rewrites small files (a rename over an existing
        # file took 0.4-0.6 ms on ext4). With 10,000 partitions holding data, closing them
        # one after another on the loop took over 20 s: the launcher killed the brokers
        # (no clean shutdown, every log recovered at the next start) and the loop answered
        # nothing meanwhile.
        await asyncio.to_thread(self._close_files, sync)

    def _close_files(self, sync: bool) -> None:
        with storage_io(f"close {self.directory}"):
            # Every change of producer state appends (moving the log end) or truncates (which
            # writes a snapshot), so a snapshot at the log end is current.
            if self._snapshot_offset != self._local.next_offset:
                self._save_producer_state(self._local.next_offset, sync=sync)
            self._epochs.save(sync=sync)
            self._local.close(sync=sync)

    def closed_log_end(self) -> int:
        return self._local.next_offset

    def release_directory(self) -> None:
        if not self._released:
            self._released = True
            self._doomed = self._local.move_aside()

    async def delete(self) -> None:
        self.release_directory()
        if self._doomed is not None:  # thousands at once (a topic deleted): removed together
            TRASH.add(self._doomed)
