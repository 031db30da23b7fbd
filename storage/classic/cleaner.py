"""One cleaning of one compacted classic log (Kafka's ``Cleaner``; the choice of which log
to clean, when, and its checkpoint are storage.log_cleaner's, Kafka's LogCleanerManager).

A log is cut in three sections: *clean* [log start, first dirty) was cleaned before;
*dirty* [first dirty, first uncleanable) was not; above first uncleanable (the active
segment, records newer than ``min.compaction.lag.ms``, anything at or above the last stable
offset) nothing is cleaned. A cleaning:

1. ``plan`` (on the event loop): the sections, and a copy of what the log knows that the
   rest needs (segments, aborted transactions, each producer's last batch);
2. ``build_offset_map`` (in a thread): key -> latest offset over the dirty section, in a map
   of bounded size; when it fills, the cleaning stops where it stopped (the next one goes on
   from there, Kafka's passes);
3. per group of segments (``group_segments``, Kafka's groupSegmentsBySize), ``clean_group``
   (in a thread) writes one ``.cleaned`` segment keeping each record that is the latest of
   its key, and ``ClassicLog.replace_segments`` (on the event loop) swaps it in.

What a rewritten batch keeps (``protocol.records.rewrite_batch``): its base and last
offsets, timestamps and producer fields, so offsets never change. Dropped:

* a record superseded by a later one of its key, and keyless records (refused at produce);
* a tombstone, once its segment was cleaned ``delete.retention.ms`` ago (its delete
  horizon: consumers that read the log within that time see it), the segment's mtime being
  when it was cleaned;
* the records of aborted transactions; a transaction marker once no batch of its
  transaction remains and its delete horizon passed (Kafka's rules);
* a batch left empty, except a producer's last batch, kept empty so that its sequence and
  epoch survive (a producer-state rebuild reads them), and the last batch of a group, kept
  as an empty batch without a producer so the segment still ends where it ended (what a
  crash recovery of the swap relies on).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.records import (
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_LOG_APPEND,
    BatchHeader,
    InvalidRecordBatch,
    iter_batches,
    read_marker,
    rewrite_batch,
    stored_records,
)

from ..producer_state import AbortedTransaction
from .segment import INT32_MAX, LogSegment

_READ_CHUNK = 1 << 20
# Kafka's SkimpyOffsetMap: a 16-byte hash of the key and an 8-byte offset per entry, filled
# to at most 90 % (log.cleaner.io.buffer.load.factor).
_BYTES_PER_ENTRY = 24
_LOAD_FACTOR = 0.9
_INDEX_ENTRY_BYTES = 12  # the larger of an offset-index (8) and a time-index (12) entry


class CleaningAborted(Exception):
    """The log changed under the cleaning (a segment deleted or replaced); nothing was
    swapped in for the current group and the next cleaning starts over."""


class OffsetMap:
    """Key -> latest offset, of at most ``memory_bytes`` // 24 x 0.9 keys, each stored as
    its 16-byte hash (what bounds the memory, whatever the key sizes)."""

    def __init__(self, memory_bytes: int) -> None:
        self.slots = max(1, int(memory_bytes // _BYTES_PER_ENTRY * _LOAD_FACTOR))
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    @staticmethod
    def _hash(key: bytes) -> bytes:
        return hashlib.blake2b(key, digest_size=16).digest()

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as ``key``'s latest; False (nothing recorded) when full."""
        digest = self._hash(key)
        if digest not in self._offsets and len(self._offsets) >= self.slots:
            return False
        self._offsets[digest] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(self._hash(key))

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots


class Throttler:
    """Kafka's cleaner Throttler: sleeps (in the cleaner's thread) whenever the bytes read
    and written since the last check exceed ``rate()`` bytes per second."""

    _CHECK_INTERVAL_S = 0.3

    def __init__(self, rate: Callable[[], float]) -> None:
        self._rate = rate
        self._period_start = time.monotonic()
        self._bytes = 0

    def maybe_throttle(self, n: int) -> None:
        self._bytes += n
        now = time.monotonic()
        elapsed = now - self._period_start
        if elapsed < self._CHECK_INTERVAL_S:
            return
        rate = self._rate()
        if rate > 0 and self._bytes / elapsed > rate:
            time.sleep(self._bytes / rate - elapsed)
            now = time.monotonic()
        self._period_start, self._bytes = now, 0


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What the cleaner reads of one segment, copied when the cleaning was planned."""

    segment: LogSegment
    path: Path
    base_offset: int
    next_offset: int
    size: int
    modified_ms: int


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """The sections of a log and what a cleaning of it needs (Kafka's LogToClean)."""

    log_start: int
    first_dirty: int
    first_uncleanable: int
    # Non-active segments, oldest first (the active one is never cleaned).
    segments: list[SegmentView]
    aborted: list[AbortedTransaction]
    # producer id -> last offset of its last batch (Kafka's lastRecordsOfActiveProducers).
    producer_last_offsets: dict[int, int]
    delete_retention_ms: int
    segment_bytes: int
    max_index_entries: int
    index_interval_bytes: int

    @property
    def clean_bytes(self) -> int:
        return sum(s.size for s in self.segments if s.next_offset <= self.first_dirty)

    @property
    def cleanable_bytes(self) -> int:
        return sum(s.size for s in self.segments
                   if s.next_offset > self.first_dirty and s.base_offset < self.first_uncleanable)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0

    def add(self, other: CleanerStats) -> None:
        self.bytes_read += other.bytes_read
        self.bytes_written += other.bytes_written
        self.records_read += other.records_read
        self.records_removed += other.records_removed


def _batches(view: SegmentView, throttler: Throttler, stats: CleanerStats
             ) -> Iterator[tuple[memoryview, BatchHeader]]:
    """(buffer, header) of each batch of the segment as it was planned, read through a file
    descriptor of its own: one the log closes (retention, deletion) is never used here."""
    try:
        fd = os.open(view.path, os.O_RDONLY)
    except FileNotFoundError:
        raise CleaningAborted(f"{view.path} was deleted") from None
    try:
        position = 0
        while position < view.size:
            chunk = os.pread(fd, min(_READ_CHUNK, view.size - position), position)
            if not chunk:
                raise CleaningAborted(f"{view.path} was truncated")
            first = next(iter_batches(chunk, allow_partial_tail=True), None)
            if first is not None and first.size > len(chunk):
                chunk = os.pread(fd, first.size, position)  # one batch larger than a chunk
            buf = memoryview(chunk)
            consumed = 0
            for header in iter_batches(buf, allow_partial_tail=True):
                yield buf, header
                consumed = header.position + header.size
            if consumed == 0:
                raise CleaningAborted(f"{view.path} has no whole batch at {position}")
            stats.bytes_read += consumed
            throttler.maybe_throttle(consumed)
            position += consumed
    finally:
        os.close(fd)


class _AbortedIndex:
    """Whether a transactional batch belongs to an aborted transaction."""

    def __init__(self, aborted: list[AbortedTransaction]) -> None:
        self._by_producer: dict[int, list[AbortedTransaction]] = defaultdict(list)
        for txn in aborted:
            self._by_producer[txn.producer_id].append(txn)

    def contains(self, batch: BatchHeader) -> bool:
        return batch.is_transactional and any(
            t.first_offset <= batch.base_offset <= t.last_offset
            for t in self._by_producer.get(batch.producer_id, ()))


def build_offset_map(plan: CleaningPlan, offset_map: OffsetMap, throttler: Throttler,
                     stats: CleanerStats) -> int:
    """Fill ``offset_map`` from the dirty section; return where the map stops covering it
    (the first dirty offset whose key found no room; first uncleanable when all fit)."""
    aborted = _AbortedIndex(plan.aborted)
    for view in plan.segments:
        if view.next_offset <= plan.first_dirty or view.base_offset >= plan.first_uncleanable:
            continue
        for buf, batch in _batches(view, throttler, stats):
            if batch.next_offset <= plan.first_dirty or batch.is_control \
                    or aborted.contains(batch):
                continue
            if batch.base_offset >= plan.first_uncleanable:
                return plan.first_uncleanable
            for record in stored_records(buf, batch):
                if record.offset < plan.first_dirty or record.key is None:
                    continue
                if record.offset >= plan.first_uncleanable:
                    return plan.first_uncleanable
                if not offset_map.put(record.key, record.offset):
                    return record.offset
    return plan.first_uncleanable


def group_segments(plan: CleaningPlan, end_offset: int) -> list[list[SegmentView]]:
    """The segments holding offsets below ``end_offset``, in runs that each fit one segment
    (Kafka's groupSegmentsBySize): at most segment.bytes, an offset range an index can
    address, and the index entries a segment may hold."""
    groups: list[list[SegmentView]] = []
    for view in plan.segments:
        if view.base_offset >= end_offset:
            break
        if groups:
            group = groups[-1]
            size = sum(s.size for s in group) + view.size
            entries = sum(s.size // max(plan.index_interval_bytes, 1) + 1 for s in group) \
                + view.size // max(plan.index_interval_bytes, 1) + 1
            if size <= plan.segment_bytes and entries <= plan.max_index_entries \
                    and view.next_offset - 1 - group[0].base_offset <= INT32_MAX:
                group.append(view)
                continue
        groups.append([view])
    return groups


class TransactionTracker:
    """Kafka's CleanedTransactionMetadata, over one cleaning from the log start: which
    transactions still have a batch in the cleaned log when their marker is reached."""

    def __init__(self, aborted: list[AbortedTransaction]) -> None:
        self.aborted = _AbortedIndex(aborted)
        # producer id -> whether a batch of its open transaction was kept.
        self._kept: dict[int, bool] = {}

    def data_batch(self, batch: BatchHeader, kept: bool) -> None:
        if batch.is_transactional:
            self._kept[batch.producer_id] = self._kept.get(batch.producer_id, False) or kept

    def marker_discardable(self, batch: BatchHeader) -> bool:
        return not self._kept.pop(batch.producer_id, False)


def clean_group(plan: CleaningPlan, group: list[SegmentView], cleaned: LogSegment,
                offset_map: OffsetMap, end_offset: int, transactions: TransactionTracker,
                throttler: Throttler, now_ms: int) -> CleanerStats:
    """Write into ``cleaned`` (a new ``.cleaned`` segment) what ``group`` keeps; flush it."""
    stats = CleanerStats()
    last: BatchHeader | None = None
    last_kept = False
    for view in group:
        # A segment cleaned delete.retention.ms ago loses its tombstones and spent markers.
        past_horizon = view.next_offset <= plan.first_dirty \
            and view.modified_ms + plan.delete_retention_ms <= now_ms
        out = bytearray()
        for buf, batch in _batches(view, throttler, stats):
            kept = _filter_batch(plan, buf, batch, offset_map, end_offset, transactions,
                                 past_horizon, stats)
            last = batch
            last_kept = kept is not None
            if kept is not None:
                out += kept
        if out:
            cleaned.append(out, list(iter_batches(out)))
            stats.bytes_written += len(out)
            throttler.maybe_throttle(len(out))
    if last is not None and not last_kept:
        filler = rewrite_batch(dataclasses.replace(
            last, producer_id=NO_PRODUCER_ID, producer_epoch=-1, base_sequence=NO_SEQUENCE,
            attributes=last.attributes & TIMESTAMP_TYPE_LOG_APPEND), [], 0)
        cleaned.append(filler, list(iter_batches(filler)))
        stats.bytes_written += len(filler)
    dirty = any(v.next_offset > plan.first_dirty for v in group)
    cleaned.seal()
    cleaned.set_modified_ms(now_ms if dirty else max(v.modified_ms for v in group))
    cleaned.flush()
    return stats


def _filter_batch(plan: CleaningPlan, buf: memoryview, batch: BatchHeader,
                  offset_map: OffsetMap, end_offset: int, transactions: TransactionTracker,
                  past_horizon: bool, stats: CleanerStats) -> bytes | bytearray | None:
    """The batch as the cleaned segment keeps it (itself, rewritten, or empty); None to drop."""
    stats.records_read += batch.record_count
    whole = buf[batch.position:batch.position + batch.size]
    if batch.is_control:
        try:
            read_marker(buf, batch)
        except InvalidRecordBatch:
            return bytes(whole)  # not a transaction marker: not the cleaner's to judge
        if transactions.marker_discardable(batch) and past_horizon:
            stats.records_removed += batch.record_count
            return _empty_or_none(plan, batch)
        return bytes(whole)
    if transactions.aborted.contains(batch):
        stats.records_removed += batch.record_count
        kept = _empty_or_none(plan, batch)
        transactions.data_batch(batch, kept is not None)
        return kept
    records = stored_records(buf, batch)
    keep = []
    for record in records:
        if record.key is None:
            continue  # Kafka's cleaner drops them too (produce refuses them)
        if record.offset >= end_offset:
            keep.append(record)  # beyond the map: nothing later is known
            continue
        latest = offset_map.get(record.key)
        if latest is not None and record.offset < latest:
            continue
        if record.is_tombstone and past_horizon:
            continue
        keep.append(record)
    stats.records_removed += len(records) - len(keep)
    if len(keep) == len(records):
        result: bytes | bytearray | None = bytes(whole)
    elif keep:
        result = rewrite_batch(batch, keep, batch.compression)
    else:
        result = _empty_or_none(plan, batch)
    transactions.data_batch(batch, result is not None)
    return result


def _empty_or_none(plan: CleaningPlan, batch: BatchHeader) -> bytearray | None:
    """An empty batch for a producer's last batch (its sequence survives), else None."""
    if batch.producer_id >= 0 and plan.producer_last_offsets.get(batch.producer_id) \
            == batch.last_offset:
        return rewrite_batch(batch, [], 0)
    return None


def max_index_entries(segment_index_bytes: int) -> int:
    return max(1, segment_index_bytes // _INDEX_ENTRY_BYTES)

