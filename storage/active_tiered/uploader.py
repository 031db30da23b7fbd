"""The per-broker WAL uploader (KIP-1176): one object for the new bytes of every partition
this broker leads in active-tiered mode, PUT to the fast bucket of its own AZ.

Data flow: the leader appends locally as classic does and tells the uploader (``appended``);
every ``active.tiered.upload.interval.ms``, or as soon as ``active.tiered.upload.max.bytes``
are waiting, the uploader reads each partition's bytes from its upload cursor to its log end
offset, concatenates them into one object, PUTs it, and only then hands the refs (bucket,
key, offsets, byte range) to the partition's index and its metadata scheme. A failed PUT is
retried on the next tick with the same bytes; meanwhile followers get raw records.

A partition's *first tiered offset* is its log end offset when this broker first appended
to it as leader in the current leader epoch: followers below it get raw records.

Objects are deleted once every in-sync follower has fetched past them (so holds their data)
or after ``active.tiered.wal.retention.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.records import iter_batches

from ..log import StorageError
from ..objectstore import ObjectStore, ObjectStoreError
from .metadata import WalRef
from .metrics import ActiveTieredMetrics

if TYPE_CHECKING:
    from .log import ActiveTieredLog

log = logging.getLogger(__name__)
# How often objects are checked for deletion.
DELETE_CHECK_INTERVAL_S = 1.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Leading:
    """Upload state of one partition this broker leads."""

    log: "ActiveTieredLog"
    leader_epoch: int
    first_tiered_offset: int
    # Next offset to upload: everything below it (and at or above first_tiered_offset) is
    # in an uploaded object.
    cursor: int
    # When the oldest bytes not yet uploaded were appended (None: nothing waiting).
    waiting_since: float | None = None


@dataclass
class _Object:
    bucket: str
    key: str
    uploaded_at_ms: int
    # (log, last offset it holds of that log)
    parts: list[tuple["ActiveTieredLog", int]] = field(default_factory=list)


# Publishes the refs of one uploaded object (all partitions; each scheme gets its own).
Publisher = Callable[[list[WalRef]], Awaitable[None]]


class WalUploader:
    def __init__(self, store: ObjectStore, bucket: str, key_prefix: str, interval_ms: int,
                 max_bytes: int, metrics: ActiveTieredMetrics) -> None:
        self.store = store
        self.bucket = bucket
        self.key_prefix = key_prefix
        self.interval_s = interval_ms / 1000
        self.max_bytes = max_bytes
        self.metrics = metrics
        # False after a failed PUT, until one succeeds: followers then get raw records.
        self.healthy = True
        self._leading: dict[int, _Leading] = {}  # by id(log)
        self._objects: list[_Object] = []
        self._waiting_bytes = 0
        self._full = asyncio.Event()
        self._publish: Publisher | None = None
        self._on_uploaded: Callable[[str, int], None] = lambda topic, partition: None
        self._task: asyncio.Task | None = None
        self._last_delete_check = 0.0

    def start(self, publish: Publisher, on_uploaded: Callable[[str, int], None]) -> None:
        self._publish = publish
        self._on_uploaded = on_uploaded
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- what the logs tell it -----------------------------------------------------------

    def appended(self, log_: "ActiveTieredLog", log_end_before: int, leader_epoch: int,
                 nbytes: int) -> None:
        state = self._leading.get(id(log_))
        if state is None or state.leader_epoch != leader_epoch:
            state = self._leading[id(log_)] = _Leading(log_, leader_epoch, log_end_before,
                                                       log_end_before)
        if state.waiting_since is None:
            state.waiting_since = time.monotonic()
        self._waiting_bytes += nbytes
        if self._waiting_bytes >= self.max_bytes:
            self._full.set()

    def forget(self, log_: "ActiveTieredLog") -> None:
        """The log stopped being led here (follower append, truncation, close)."""
        self._leading.pop(id(log_), None)

    def leading(self, log_: "ActiveTieredLog") -> _Leading | None:
        return self._leading.get(id(log_))

    def will_upload(self, log_: "ActiveTieredLog", offset: int) -> bool:
        """Will a coming upload cover ``offset``? (else a follower needs raw records)"""
        state = self._leading.get(id(log_))
        return self.healthy and state is not None and offset >= state.cursor

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._full.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            self._full.clear()
            try:
                while await self.upload_once():
                    pass  # more than max_bytes were waiting: the next object at once
                if time.monotonic() - self._last_delete_check >= DELETE_CHECK_INTERVAL_S:
                    self._last_delete_check = time.monotonic()
                    await self.delete_objects()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("WAL upload round failed")

    async def upload_once(self) -> bool:
        """Upload one object of what is waiting; True if more was left behind."""
        self._waiting_bytes = 0
        parts: list[tuple[_Leading, int, bytes, int]] = []  # state, base, data, next offset
        budget = self.max_bytes
        left_behind = False
        for state in list(self._leading.values()):
            end = state.log.log_end_offset
            if state.cursor >= end:
                continue
            if budget <= 0:
                left_behind = True
                break
            try:
                data, next_offset = await self._read(state.log, state.cursor, end, budget)
            except StorageError as e:
                log.warning("cannot read %r for upload: %s", state.log, e)
                self.forget(state.log)
                continue
            if data:
                parts.append((state, state.cursor, data, next_offset))
                budget -= len(data)
                left_behind |= next_offset < end
        if not parts:
            return False
        key = f"{self.key_prefix}{_now_ms():013d}-{uuid.uuid4().hex[:8]}"
        body = b"".join(data for _, _, data, _ in parts)
        put_started = time.monotonic()
        for state, *_ in parts:
            if state.waiting_since is not None:
                self.metrics.timed("upload_wait", put_started - state.waiting_since)
                state.waiting_since = None
        try:
            await self.store.put(self.bucket, key, body)
        except ObjectStoreError as e:
            if self.healthy:
                log.warning("WAL upload to %s failed, followers fetch records meanwhile: %s",
                            self.bucket, e)
            self.healthy = False
            return False
        self.healthy = True
        self.metrics.timed("put", time.monotonic() - put_started)
        self.metrics.uploaded(self.bucket, len(body), len(parts))
        uploaded_at = _now_ms()
        obj = _Object(self.bucket, key, uploaded_at)
        self._objects.append(obj)
        published: list[tuple[_Leading, WalRef]] = []
        position = 0
        for state, base, data, next_offset in parts:
            published.append((state, WalRef(
                self.bucket, key, state.log.topic, state.log.partition, base, next_offset - 1,
                position, len(data), uploaded_at)))
            position += len(data)
        # Published before followers are pointed at the refs (and before the cursor moves,
        # so that they wait for it meanwhile): with the topic scheme a follower then finds
        # the refs committed to the topic when it looks.
        publish_started = time.monotonic()
        await self._publish([ref for _, ref in published])
        self.metrics.timed("publish", time.monotonic() - publish_started)
        for state, ref in published:
            obj.parts.append((state.log, ref.last_offset))
            if self._leading.get(id(state.log)) is not state or state.cursor != ref.base_offset:
                continue  # leadership changed while uploading: not ours to hand out
            state.cursor = ref.last_offset + 1
            if state.log.log_end_offset > state.cursor and state.waiting_since is None:
                state.waiting_since = time.monotonic()  # appended while this one uploaded
            state.log.wal_refs.add(ref)
            state.log.handed_out(ref)
            self._on_uploaded(ref.topic, ref.partition)
        return left_behind

    @staticmethod
    async def _read(log_: "ActiveTieredLog", offset: int, end: int,
                    budget: int) -> tuple[bytes, int]:
        """Whole batches from ``offset`` towards ``end``, about ``budget`` bytes (at least
        one batch); and the offset after them."""
        chunks: list[bytes] = []
        while offset < end and budget > 0:
            data = (await log_.read(offset, budget, max_offset=end,
                                    min_one_batch=not chunks)).records
            if not data:
                break
            last = None
            for last in iter_batches(data):
                pass
            chunks.append(data)
            offset = last.next_offset
            budget -= len(data)
        return b"".join(chunks), offset

    # -- deletion ------------------------------------------------------------------------

    async def delete_objects(self) -> None:
        now = _now_ms()
        deletable = [obj for obj in self._objects if self._deletable(obj, now)]
        if not deletable:
            return
        keys = {obj.key for obj in deletable}
        try:
            await self.store.delete(self.bucket, keys)
        except ObjectStoreError as e:
            log.warning("deleting %d WAL objects failed (retried later): %s", len(keys), e)
            return
        self.metrics.deleted(self.bucket, len(keys))
        self._objects = [obj for obj in self._objects if obj.key not in keys]
        for obj in deletable:
            for log_, _ in obj.parts:
                log_.wal_refs.drop(lambda ref: ref.key not in keys)

    def _deletable(self, obj: _Object, now_ms: int) -> bool:
        for log_, last_offset in obj.parts:
            if now_ms - obj.uploaded_at_ms > log_.config.wal_retention_ms:
                return True
        return all(log_.replicas_hold(last_offset) for log_, last_offset in obj.parts)
