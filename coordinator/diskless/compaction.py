"""Log compaction of diskless topics: the batch coordinator's object rewrite (KIP-1165's
merge job) keeping the latest record of each key, as Kafka's log cleaner does.

One pass over a partition (``LogCleaner.clean_once``), on the writable coordinator's broker:
1. plan from the coordinates alone: the dirty section runs from the cleaner checkpoint
   (``LogInfo.cleaned_offset``) to the first uncleanable offset, the lowest of the last
   stable offset, the log's last batch (Kafka's active segment: reads past a dropped batch
   always find a later one) and the first batch newer than ``min.compaction.lag.ms``; the
   log is cleaned once the dirty share of its bytes reaches ``min.cleanable.dirty.ratio``,
   or its first dirty batch is older than ``max.compaction.lag.ms``, or a retained
   tombstone's delete horizon has passed;
2. read the dirty section from object storage into a key → latest offset map holding at
   most ``max_keys`` keys (Kafka's dedupe buffer): where it fills, the pass ends and the
   next pass continues from there;
3. read the log from its start to where the map ends and rewrite every batch losing a
   record (``rewrite_batch``: same base offset, last offset delta and producer fields) into
   one new object: records superseded by a later one of their key go, aborted transactional
   records go, tombstones go once ``delete.retention.ms`` has passed since the cleaning that
   first reached their batch; a batch left empty is dropped, unless it is its producer's
   last batch (kept empty, so the producer's sequence survives, as Kafka does);
4. submit a ``Compact`` record: the coordinator swaps the coordinates of every rewritten
   batch, all or nothing, and moves the checkpoint. A swap refused because a batch changed
   meanwhile leaves the new object garbage for the GC; an object uploaded by a broker that
   died before submitting is an orphan the GC collects. A pass rewriting more batches than
   one record of the coordinator's log can name (a few thousand) writes several objects,
   one swap each, in offset order, and only the last moves the checkpoint (Kafka's cleaner
   swaps a pass's segments group by group the same way).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from protocol.records import (
    BatchHeader,
    StoredRecord,
    read_header,
    rebase,
    rewrite_batch,
    stored_records,
)
from storage.config import LogConfig
from storage.diskless.control_plane import (
    BatchCoordinate,
    BatchRewrite,
    BoundedList,
    Compact,
    CompactResult,
    ControlPlane,
    WireRecord,
)
from storage.objectstore import WAL_BUCKET, ObjectStore
from storage.producer_state import AbortedTransaction

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirtySection:
    """What one pass may clean: [first_dirty, first_uncleanable) is read into the map."""

    batches: list[BatchCoordinate]  # the whole log, by offset
    first_dirty: int
    first_uncleanable: int


class LogCleaner:
    def __init__(self, control_plane: ControlPlane, store: ObjectStore, object_prefix: str,
                 max_keys: int, read_bytes: int) -> None:
        self.control_plane = control_plane
        self.store = store
        self.object_prefix = object_prefix
        self.max_keys = max_keys
        self.read_bytes = read_bytes

    async def clean(self, topic_id: str, partition: int, config: LogConfig,
                    now_ms: int) -> list[CompactResult]:
        """Clean the log if it needs it, in as many passes as the key map's bound takes to
        reach the end of its dirty section: one result per pass."""
        results = []
        section = self.dirty_section(topic_id, partition, config, now_ms)
        target = None if section is None else section.first_uncleanable
        while section is not None:
            result, cleaned_offset = await self.clean_once(topic_id, partition, config,
                                                           section, now_ms)
            results.append(result)
            if result.refused is not None or cleaned_offset >= target:
                break
            section = self.dirty_section(topic_id, partition, config, now_ms, until=target)
        return results

    def dirty_section(self, topic_id: str, partition: int, config: LogConfig, now_ms: int,
                      until: int | None = None) -> DirtySection | None:
        """The section to clean, or None if the log does not need cleaning now; ``until``:
        a pass continuing a cleaning up to there, needed whatever the dirty ratio now."""
        info = self.control_plane.log_info(topic_id, partition)
        batches = self.control_plane.find_batches(topic_id, partition, info.log_start_offset,
                                                  1 << 62) if info.high_watermark else []
        if len(batches) < 2:
            return None
        first_uncleanable = min(self.control_plane.last_stable_offset(topic_id, partition),
                                batches[-1].base_offset)
        too_new = next((b for b in batches
                        if b.effective_timestamp > now_ms - config.min_compaction_lag_ms), None)
        if too_new is not None:
            first_uncleanable = min(first_uncleanable, too_new.base_offset)
        if until is not None:
            first_uncleanable = min(first_uncleanable, until)
        first_dirty = max(info.cleaned_offset, info.log_start_offset)
        dirty = [b for b in batches
                 if b.base_offset >= first_dirty and b.last_offset < first_uncleanable]
        clean_bytes = sum(b.byte_size for b in batches if b.last_offset < first_dirty)
        dirty_bytes = sum(b.byte_size for b in dirty)
        horizon = info.tombstone_horizon_ms
        needed = (
            (until is not None and dirty)
            or (dirty and dirty_bytes / (clean_bytes + dirty_bytes)
             >= config.min_cleanable_dirty_ratio)
            or (dirty and dirty[0].effective_timestamp <= now_ms - config.max_compaction_lag_ms)
            or 0 <= horizon <= now_ms)
        if not needed:
            return None
        return DirtySection(batches, first_dirty, max(first_dirty, first_uncleanable))

    async def clean_once(self, topic_id: str, partition: int, config: LogConfig,
                         section: DirtySection, now_ms: int) -> tuple[CompactResult, int]:
        """One pass: the coordinator's answer to its swap, and the offset it cleaned to."""
        aborted = self.control_plane.aborted_transactions(
            topic_id, partition, section.batches[0].base_offset, section.first_uncleanable)
        latest, cleaned_offset = await self._latest_offsets(section, aborted)
        last_batches = {(p.producer_id, p.last_offset)
                        for p in self.control_plane.active_producers(topic_id, partition)}
        rewrites = []
        horizon = None
        async for coordinate, batch in self._read(
                [b for b in section.batches if b.last_offset < cleaned_offset]):
            header = read_header(batch)
            if header.is_control:
                continue  # markers stay (see docs/diskless.md, Compaction)
            records = stored_records(batch, header)
            tombstones_expire = (coordinate.cleaned_at_ms >= 0 and coordinate.cleaned_at_ms
                                 + config.delete_retention_ms <= now_ms)
            kept = [] if _is_aborted(header, aborted) else [
                r for r in records if _survives(r, latest, tombstones_expire)]
            if any(r.is_tombstone for r in kept):
                kept_until = (now_ms if coordinate.cleaned_at_ms < 0
                              else coordinate.cleaned_at_ms) + config.delete_retention_ms
                horizon = kept_until if horizon is None else min(horizon, kept_until)
            if len(kept) == len(records):
                continue
            if kept or (header.producer_id, coordinate.last_offset) in last_batches:
                rewrites.append(_rewrite(coordinate,
                                         rewrite_batch(header, kept, header.compression)))
            else:
                rewrites.append(_rewrite(coordinate, b""))
        objects = list(fill_objects(self.object_prefix, rewrites)) or [RewrittenObject("")]
        results = []
        for index, compacted in enumerate(objects):
            key = compacted.key if compacted.data else ""  # every batch of it was dropped
            if key:
                await self.store.put(WAL_BUCKET, key, bytes(compacted.data))
            # Only the last swap moves the checkpoint (a MAX of 0 leaves it): if a later
            # one is refused, the next pass starts over from where this one started.
            last = index == len(objects) - 1
            result = await self.control_plane.compact(Compact(
                topic_id, partition, key, len(compacted.data), now_ms,
                cleaned_offset if last else 0, compacted.entries,
                -1 if horizon is None else horizon))
            if result.refused is not None:
                return result, cleaned_offset
            results.append(result)
        return CompactResult(sum(r.rewritten for r in results), sum(r.dropped for r in results),
                             sum(r.bytes_before for r in results),
                             sum(r.bytes_after for r in results)), cleaned_offset

    async def _latest_offsets(self, section: DirtySection, aborted: list[AbortedTransaction]
                              ) -> tuple[dict[bytes, int], int]:
        """The latest offset of each key of the dirty section, at most ``max_keys`` keys
        (by a 128-bit hash, as Kafka's dedupe buffer), and the offset the map covers up to."""
        latest: dict[bytes, int] = {}
        dirty = [b for b in section.batches if section.first_dirty <= b.base_offset
                 and b.last_offset < section.first_uncleanable]
        async for coordinate, batch in self._read(dirty):
            header = read_header(batch)
            if header.is_control or _is_aborted(header, aborted):
                continue
            if latest and len(latest) + header.record_count > self.max_keys:
                return latest, coordinate.base_offset
            for record in stored_records(batch, header):
                if record.key is not None:
                    latest[_key_hash(record.key)] = record.offset
        return latest, section.first_uncleanable

    async def _read(self, coordinates: list[BatchCoordinate]
                    ) -> AsyncIterator[tuple[BatchCoordinate, bytearray]]:
        """Each batch with its assigned base offset, in order, read ``read_bytes`` at a
        time (one ranged GET per object of each chunk)."""
        start = 0
        while start < len(coordinates):
            end, size = start, 0
            while end < len(coordinates) and (end == start or size < self.read_bytes):
                size += coordinates[end].byte_size
                end += 1
            chunk = coordinates[start:end]
            for coordinate, raw in zip(chunk, await read_batches(self.store, chunk)):
                batch = bytearray(raw)
                rebase(batch, 0, coordinate.base_offset)
                yield coordinate, batch
            start = end


@dataclass
class RewrittenObject:
    """One object a merge or a compaction writes, and the entries (a merge's moves, a
    compaction's rewrites) of the one record that points batches into it: that record
    must fit the coordinator's log, so the object takes batches only while it does, and
    no more than ``max_entries`` (None: as many as fit)."""

    key: str
    max_entries: int | None = None
    data: bytearray = field(default_factory=bytearray, init=False)
    _entries: BoundedList = field(default_factory=BoundedList, init=False)

    @property
    def entries(self) -> tuple[WireRecord, ...]:
        return tuple(self._entries.entries)

    def add(self, entry_at: Callable[[int], WireRecord], batch: bytes) -> bool:
        """Append ``batch`` and its entry, ``entry_at`` its byte offset in this object;
        False, adding nothing, once the record is full."""
        if self.max_entries is not None and len(self._entries.entries) >= self.max_entries:
            return False
        if not self._entries.add(entry_at(len(self.data))):
            return False
        self.data += batch
        return True


def fill_objects(key_prefix: str, batches: Iterable[tuple[Callable[[int], WireRecord], bytes]],
                 max_entries: int | None = None) -> Iterator[RewrittenObject]:
    """The batches, each with the function giving its entry at an offset, in order, written
    into as many objects (keys from ``key_prefix``) as their records take to fit: each
    object as soon as it is full, so that the caller stores and records it before the next
    is filled (the event loop has its turns in between)."""
    filling: RewrittenObject | None = None
    for entry_at, batch in batches:
        if filling is None or not filling.add(entry_at, batch):
            if filling is not None:
                yield filling
            filling = RewrittenObject(f"{key_prefix}{uuid.uuid4().hex}", max_entries)
            filling.add(entry_at, batch)
    if filling is not None:
        yield filling


async def read_batches(store: ObjectStore, coordinates: list[BatchCoordinate]) -> list[bytes]:
    """The stored bytes of each batch, in order: one ranged GET per object."""
    by_object: dict[str, list[BatchCoordinate]] = {}
    for coordinate in coordinates:
        by_object.setdefault(coordinate.object_key, []).append(coordinate)
    data: dict[tuple[str, int], bytes] = {}
    for key, batches in by_object.items():
        ranges = [(c.byte_offset, c.byte_size) for c in batches]
        for c, raw in zip(batches, await store.get_ranges(WAL_BUCKET, key, ranges)):
            data[(key, c.byte_offset)] = raw
    return [data[(c.object_key, c.byte_offset)] for c in coordinates]


def _rewrite(coordinate: BatchCoordinate, rewritten: bytes,
             ) -> tuple[Callable[[int], BatchRewrite], bytes]:
    """For ``fill_objects``: the batch's BatchRewrite at a byte offset of the compacted
    object, and its rewritten bytes (none: every record went, the batch is dropped)."""
    return (lambda offset: BatchRewrite(
        coordinate.base_offset, coordinate.object_key, coordinate.byte_offset,
        coordinate.byte_size, offset if rewritten else 0, len(rewritten))), rewritten


def _key_hash(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _survives(record: StoredRecord, latest: dict[bytes, int], tombstones_expire: bool) -> bool:
    """Kept unless a later record of its key is in the map, or it is a tombstone past its
    delete horizon. Records without a key are kept (a compacted topic should have none)."""
    if record.key is None:
        return True
    if latest.get(_key_hash(record.key), record.offset) > record.offset:
        return False
    return not (record.is_tombstone and tombstones_expire)


def _is_aborted(header: BatchHeader, aborted: list[AbortedTransaction]) -> bool:
    return header.is_transactional and any(
        t.producer_id == header.producer_id and t.first_offset <= header.base_offset
        < t.last_offset for t in aborted)
