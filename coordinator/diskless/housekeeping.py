"""What the writable batch coordinator does on a timer: topic deletion and WAL object
garbage collection (KIP-1150/1164), object merging (KIP-1165), log compaction of
compacted topics (compaction.py), and retention (of topics whose cleanup.policy has
delete).

Retention runs on the schedule every engine's retention runs on, the broker's
``log.retention.check.interval.ms`` (``LogManager.run_retention`` calls ``apply_retention``);
the rest every ``interval_ms``.

Every change is a record appended to the coordinator's log first; objects are removed
from S3 only after a record saying so is applied. That order is what keeps GC safe:
- an object whose batches all died is deleted only ``object_delete_delay_ms`` after it
  emptied, so reads that fetched its coordinates just before a merge or retention finish;
- an orphan (uploaded, never committed) is first marked deleted in the state, and only the
  keys the state agrees to delete go; a commit of that key arriving later is refused
  (its producer retries), and one applied earlier makes the state refuse the deletion.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs
from storage.config import LogConfig
from storage.diskless.control_plane import (
    BatchCoordinate,
    BatchMove,
    CompactResult,
    ControlPlane,
    DeleteTopic,
    EnforceRetention,
    ExpireProducers,
    Merge,
    ObjectsDeleted,
    RecordRejected,
    RetentionLimits,
    split_to_fit,
)
from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreError

from .batch_coordinator import CoordinatorUnavailable
from .compaction import LogCleaner, fill_objects, read_batches

log = logging.getLogger(__name__)
# A topic id the state knows but the metadata does not must stay unknown this long
# before its batches are dropped: a new topic's first commit may reach the coordinator
# before the coordinator's broker has applied the topic's creation.
UNKNOWN_TOPIC_GRACE_S = 60.0
# Batches one merged object takes, and so moves one Merge record names: every broker applies
# a record in one step of its event loop, and 5,000 moves held it 120-175 ms (1,000: about
# 35 ms). Merged objects are then 1,000 batches at most (2 MB at 2 KB a batch).
MERGE_MAX_MOVES = 1_000
# A merge run merges its objects in groups of about this many batches (whole objects), each
# group read, merged and stored before the next is read: a WAL object of a 10,000-partition
# topic holds thousands, and the 64 objects of a run, read and sorted at once, held the
# coordinator's event loop for 50 ms and more at a time and its memory for all of them.
MERGE_GROUP_BATCHES = 8 * MERGE_MAX_MOVES


@dataclass
class HousekeepingSettings:
    interval_ms: int = 5_000
    object_delete_delay_ms: int = 60_000
    orphan_grace_ms: int = 600_000
    # Objects smaller than this are merged, once at least merge_min_objects of them exist.
    merge_max_object_bytes: int = 4 * 1024 * 1024
    merge_min_objects: int = 8
    merge_max_objects: int = 64
    merge_min_age_ms: int = 30_000
    # Compaction: keys the cleaner's key → offset map holds in one pass (Kafka's dedupe
    # buffer, about 100 bytes a key here), and bytes read from object storage at a time.
    compaction_max_keys: int = 1_000_000
    compaction_read_bytes: int = 8 * 1024 * 1024


@dataclass
class HousekeepingStats:
    retention_runs: int = 0
    deleted_objects: int = 0
    deleted_orphans: int = 0
    # Merged objects written (one Merge record each), and the WAL objects merge runs read.
    merges: int = 0
    merged_objects: int = 0
    compactions: int = 0
    # Swaps the coordinator refused (a batch changed while it was being rewritten).
    compactions_refused: int = 0
    compaction_bytes_before: int = 0
    compaction_bytes_after: int = 0


class Housekeeping:
    def __init__(self, control_plane: ControlPlane, is_writable: Callable[[], bool],
                 image: MetadataImage, store: ObjectStore, key_prefix: str,
                 configs: DynamicConfigs, settings: HousekeepingSettings) -> None:
        self.control_plane = control_plane
        # Only the writable coordinator's broker runs housekeeping.
        self.is_writable = is_writable
        self.image = image
        self.store = store
        self.wal_prefix = f"{key_prefix}wal/"
        self.merged_prefix = f"{self.wal_prefix}merged-"
        self.compacted_prefix = f"{self.wal_prefix}compacted-"
        # Read at every run: retention follows topic and broker config changes at once.
        self.configs = configs
        self.settings = settings
        self.stats = HousekeepingStats()
        self.cleaner = LogCleaner(control_plane, store, self.compacted_prefix,
                                  settings.compaction_max_keys, settings.compaction_read_bytes)
        self._unknown_since: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_ms / 1000)
            await self.run_once()

    async def run_once(self) -> None:
        # Each step on its own: a merge that keeps failing (an object store timing out)
        # must not keep dead objects from being deleted.
        for what, step in (("topic deletion", self._drop_deleted_topics),
                           ("merge", self.merge_small_objects),
                           ("compaction", self.compact_logs),
                           ("object deletion", self._delete_dead_objects),
                           ("orphan deletion", self._delete_orphans)):
            await self._on_writable_coordinator(what, step)

    async def apply_retention(self, now_ms: int) -> int:
        """retention.ms / retention.bytes of every diskless topic at ``now_ms``, in one
        record per ten thousand topics or so (on the writable coordinator's broker only);
        return the bytes removed."""
        removed = await self._on_writable_coordinator(
            "retention", lambda: self._apply_retention(now_ms))
        return removed or 0

    async def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms of every diskless log at ``now_ms``, in one record (on
        the writable coordinator's broker only); return how many producers were forgotten."""
        result = await self._on_writable_coordinator(
            "producer expiration", lambda: self.control_plane.expire_producers(
                ExpireProducers(now_ms, expiration_ms)))
        return 0 if result is None else result.expired

    async def _on_writable_coordinator(self, what: str, work):
        """``work()``'s result when this broker runs the writable coordinator, else None;
        a failure is logged and waits for the next run."""
        if not self.is_writable():
            return None
        try:
            return await work()
        except (CoordinatorUnavailable, ObjectStoreError) as e:
            log.warning("diskless %s postponed: %s", what, e)
        except RecordRejected as e:  # e.g. a record too large for the coordinator's log
            log.error("diskless %s refused by the batch coordinator: %s", what, e)
        except Exception:
            log.exception("diskless %s failed", what)
        return None

    def _diskless_topics(self) -> dict[str, LogConfig]:
        configs = {}
        for topic in self.image.topics.values():
            config = self.configs.log_config(topic)
            # Also a topic switched away from diskless: its diskless spans keep retention.
            if config.storage_mode == "diskless" or any(
                    span.mode == "diskless" for info in topic.partitions.values()
                    for span in info.spans):
                configs[str(topic.topic_id)] = config
        return configs

    async def _drop_deleted_topics(self) -> None:
        now = time.monotonic()
        in_metadata = {str(topic_id) for topic_id in self.image.topics_by_id}
        for topic_id in {topic_id for topic_id, _ in self.control_plane.logs()}:
            if topic_id in in_metadata:
                self._unknown_since.pop(topic_id, None)
                continue
            since = self._unknown_since.setdefault(topic_id, now)
            if now - since >= UNKNOWN_TOPIC_GRACE_S:
                await self.control_plane.delete_topic(DeleteTopic(topic_id, _now_ms()))
                self._unknown_since.pop(topic_id, None)
                log.info("dropped the batches of deleted topic %s", topic_id)

    async def _apply_retention(self, now_ms: int) -> int:
        topics = [RetentionLimits(topic_id, config.retention_ms, config.retention_bytes)
                  for topic_id, config in self._diskless_topics().items()
                  if config.delete_policy
                  and (config.retention_ms >= 0 or config.retention_bytes >= 0)]
        if not topics:
            return 0
        removed_batches = removed_bytes = 0
        # About ten thousand topics a record (control_plane.MAX_REQUEST_BYTES).
        for some_topics in split_to_fit(topics):
            result = await self.control_plane.enforce_retention(
                EnforceRetention(now_ms, some_topics))
            removed_batches += result.removed_batches
            removed_bytes += result.removed_bytes
        self.stats.retention_runs += 1
        if removed_batches:
            log.info("retention removed %d diskless batches (%d bytes)",
                     removed_batches, removed_bytes)
        return removed_bytes

    async def _delete_dead_objects(self) -> None:
        keys = self.control_plane.files_to_delete(_now_ms(), self.settings.object_delete_delay_ms)
        self.stats.deleted_objects += await self._delete(keys)

    async def _delete_orphans(self) -> None:
        cutoff = datetime.now(UTC).timestamp() - self.settings.orphan_grace_ms / 1000
        orphans = [info.key async for info in self.store.list_objects(WAL_BUCKET, self.wal_prefix)
                   if info.last_modified.timestamp() < cutoff
                   and not self.control_plane.is_known_object(info.key)]
        deleted = await self._delete(orphans)
        if deleted:
            log.info("deleted %d orphan WAL objects (uploaded, never committed)", deleted)
        self.stats.deleted_orphans += deleted

    async def _delete(self, keys: list[str]) -> int:
        """Record the deletion, then delete what the state agreed to; return that count.
        About twenty thousand keys a record (control_plane.MAX_REQUEST_BYTES): a deleted
        topic or a retention run can empty more objects than that."""
        deleted = 0
        for some_keys in split_to_fit(keys):
            result = await self.control_plane.objects_deleted(ObjectsDeleted(some_keys))
            if result.refused:
                log.info("kept %d objects that still hold live batches", len(result.refused))
            await self.store.delete(WAL_BUCKET, list(result.deleted))
            deleted += len(result.deleted)
        return deleted

    async def merge_small_objects(self) -> None:
        """KIP-1165: rewrite small WAL objects' live batches, ordered by partition and
        offset, into merged objects, and repoint each one's batches in one record. One
        record names MERGE_MAX_MOVES batches at most (and fits control_plane.
        MAX_REQUEST_BYTES), so the batches of thousands of partitions go into as many merged
        objects as that takes; a failure leaves the rest for the next run."""
        # Only WAL objects as brokers wrote them: merged and compacted objects are already
        # ordered by partition, and merging them again would rewrite the same bytes over
        # and over. Left out by the query, not after it: small merged objects are older
        # than the WAL objects written since, so they would fill any window of oldest
        # candidates and stop merging for good.
        keys = self.control_plane.merge_candidates(
            self.settings.merge_max_object_bytes, self.settings.merge_max_objects,
            (self.merged_prefix, self.compacted_prefix),
            created_before_ms=_now_ms() - self.settings.merge_min_age_ms)
        if len(keys) < self.settings.merge_min_objects:
            return
        group: list[list[BatchCoordinate]] = []
        for key in keys:
            group.append(self.control_plane.object_batches(key))
            if sum(map(len, group)) >= MERGE_GROUP_BATCHES:
                await self._merge_objects(group)
                group = []
            await asyncio.sleep(0)  # thousands of batches an object: one object a turn
        if group:
            await self._merge_objects(group)

    async def _merge_objects(self, in_objects: list[list[BatchCoordinate]]) -> None:
        """The batches of some objects (each object's in order) into merged objects; one
        object alone is left as it is (a run's last group): rewriting it gains nothing."""
        if len(in_objects) < 2:
            return
        coordinates = list(heapq.merge(*in_objects, key=lambda c: c.log_order))
        merged_objects = fill_objects(self.merged_prefix, (
            _move(c, data)
            for c, data in zip(coordinates, await read_batches(self.store, coordinates))),
            MERGE_MAX_MOVES)
        for merged in merged_objects:
            await self.store.put(WAL_BUCKET, merged.key, bytes(merged.data))
            result = await self.control_plane.merge(
                Merge(merged.key, len(merged.data), _now_ms(), merged.entries))
            self.stats.merges += 1
            log.info("merged batches of %d WAL objects into %s (%d batches moved, %d skipped)",
                     len({move.old_object_key for move in merged.entries}), merged.key,
                     result.moved, result.skipped)
        self.stats.merged_objects += len(in_objects)

    async def compact_logs(self) -> None:
        """Clean every partition of the compacted diskless topics that needs it."""
        compacted = {topic_id: config for topic_id, config in self._diskless_topics().items()
                     if config.compact}
        for topic_id, partition in self.control_plane.logs():
            config = compacted.get(topic_id)
            if config is None:
                continue
            for result in await self.cleaner.clean(topic_id, partition, config, _now_ms()):
                self._count_compaction(topic_id, partition, result)

    def _count_compaction(self, topic_id: str, partition: int, result: CompactResult) -> None:
        if result.refused is not None:
            self.stats.compactions_refused += 1
            log.info("compaction of %s-%d refused, to be retried: %s", topic_id, partition,
                     result.refused)
            return
        self.stats.compactions += 1
        self.stats.compaction_bytes_before += result.bytes_before
        self.stats.compaction_bytes_after += result.bytes_after
        log.info("compacted %s-%d: %d batches rewritten, %d dropped, %d bytes to %d",
                 topic_id, partition, result.rewritten, result.dropped, result.bytes_before,
                 result.bytes_after)


def _move(coordinate: BatchCoordinate, data: bytes) -> tuple[Callable[[int], BatchMove], bytes]:
    """For ``fill_objects``: the batch's BatchMove to a byte offset of the merged object,
    and its bytes."""
    return (lambda offset: BatchMove(coordinate.topic_id, coordinate.partition,
                                     coordinate.base_offset, coordinate.object_key, offset,
                                     coordinate.byte_size)), data


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
