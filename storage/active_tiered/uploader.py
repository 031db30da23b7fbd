"""The per-broker WAL uploader (KIP-1176): one object for the new bytes of every partition
this broker leads in active-tiered mode, PUT to the fast bucket of its own AZ.

The replica layer's "became leader" makes the engine ``track`` a partition here, "became
follower" or "stopped" ``untrack`` it; nothing else starts or ends its uploads.

Data flow: the leader appends locally as classic does and tells the uploader (``appended``);
every ``active.tiered.upload.interval.ms``, or as soon as ``active.tiered.upload.max.bytes``
are waiting, the uploader reads each partition's bytes from its upload cursor to its log end
offset, concatenates them into one object, PUTs it, and only then hands the refs (bucket,
key, offsets, byte range) to the partition's index and its metadata scheme. A failed PUT, or
one that has not answered within ``active.tiered.upload.timeout.ms`` (a hung store), is
abandoned and retried on the next tick with the same bytes; meanwhile followers get raw
records, so acks=all goes on at the speed of classic replication.

A partition's *first tiered offset* is its log end offset when this broker became its
leader (in the current leader epoch): followers below it get raw records.

Objects are deleted once every in-sync follower has fetched past them (so holds their data)
or after ``active.tiered.wal.retention.ms``, by a loop of their own: a slow DeleteObjects
never holds back an upload.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from protocol.records import iter_batches

from ..classic import ClassicLog
from ..log import StorageError
from ..objectstore import ObjectStore, ObjectStoreError
from .metadata import WalRef
from .metrics import ActiveTieredMetrics
from .state import TieredPartitionState, UploadCursor

log = logging.getLogger(__name__)
# How often objects are checked for deletion.
DELETE_CHECK_INTERVAL_S = 1.0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Object:
    bucket: str
    key: str
    uploaded_at_ms: int
    # (partition, last offset it holds of that partition)
    parts: list[tuple[TieredPartitionState, int]] = field(default_factory=list)


@dataclass
class _Part:
    """One partition's bytes in an object being uploaded."""

    state: TieredPartitionState
    # The leadership they were read under: the refs are handed out only if it still holds.
    upload: UploadCursor
    base_offset: int
    data: bytes
    next_offset: int


# Publishes the refs of one uploaded object (all partitions; each scheme gets its own).
Publisher = Callable[[list[WalRef]], Awaitable[None]]


class LeaderView(Protocol):
    """What the uploader needs to know of the partitions it uploads for."""

    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        """The in-sync replicas other than this broker, of a partition it leads."""

    def uploaded(self, topic: str, partition: int) -> None:
        """New data of the partition is uploaded: wake follower fetches waiting for it, and
        let the high watermark move (ack.on.upload)."""


class WalUploader:
    def __init__(self, store: ObjectStore, bucket: str, key_prefix: str, interval_ms: int,
                 max_bytes: int, metrics: ActiveTieredMetrics, timeout_ms: int) -> None:
        self.store = store
        self.bucket = bucket
        self.key_prefix = key_prefix
        self.interval_s = interval_ms / 1000
        # Followers wait for an upload at most this long before they get records.
        self.timeout_s = timeout_ms / 1000
        self.max_bytes = max_bytes
        self.metrics = metrics
        # False after a failed PUT, until one succeeds: followers then get raw records.
        self.healthy = True
        # The partitions this broker leads, by id() of their state, in the order they came.
        self._leading: dict[int, TieredPartitionState] = {}
        self._objects: list[_Object] = []
        self._waiting_bytes = 0
        self._full = asyncio.Event()
        # Set by an append, a leadership taken, and a round that failed (its data still
        # waits): with no active-tiered partition written to, the loop sleeps instead of
        # looking every interval.
        self._appended = asyncio.Event()
        self._publish: Publisher | None = None
        self._leaders: LeaderView | None = None
        self._tasks: list[asyncio.Task] = []

    def start(self, publish: Publisher, leaders: LeaderView) -> None:
        self._publish = publish
        self._leaders = leaders
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._run_deletes())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- what the engine tells it ---------------------------------------------------------

    def track(self, state: TieredPartitionState) -> None:
        """This broker became the partition's leader (``state.upload`` is set)."""
        self._leading[id(state)] = state
        self._appended.set()  # its log may hold records not uploaded yet

    def untrack(self, state: TieredPartitionState) -> None:
        """This broker no longer leads the partition (``state.upload`` is None)."""
        self._leading.pop(id(state), None)

    def appended(self, state: TieredPartitionState, nbytes: int) -> None:
        """The leader appended ``nbytes`` to the partition."""
        if state.upload is None:
            return
        self._appended.set()
        if state.upload.waiting_since is None:
            state.upload.waiting_since = time.monotonic()
        self._waiting_bytes += nbytes
        if self._waiting_bytes >= self.max_bytes:
            self._full.set()

    def will_upload(self, state: TieredPartitionState, offset: int) -> bool:
        """Will a coming upload cover ``offset``? (else a follower needs raw records)"""
        return self.healthy and state.upload is not None and offset >= state.upload.cursor

    # -- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._appended.wait()
            try:
                await asyncio.wait_for(self._full.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            self._full.clear()
            self._appended.clear()
            try:
                while await self.upload_once():
                    pass  # more than max_bytes were waiting: the next object at once
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("WAL upload round failed")
                self._appended.set()  # what waited is still there: the next round tries
            if not self.healthy:
                self._appended.set()  # the PUT failed: try again after an interval

    async def _run_deletes(self) -> None:
        while True:
            await asyncio.sleep(DELETE_CHECK_INTERVAL_S)
            try:
                await self.delete_objects()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("WAL object deletion failed")

    async def upload_once(self) -> bool:
        """Upload one object of what is waiting; True if more was left behind."""
        self._waiting_bytes = 0
        parts: list[_Part] = []
        budget = self.max_bytes
        left_behind = False
        for state in list(self._leading.values()):
            upload = state.upload
            end = state.log.log_end_offset
            if upload is None or upload.cursor >= end:
                continue
            if budget <= 0:
                left_behind = True
                break
            try:
                data, next_offset = await self._read(state.log, upload.cursor, end, budget)
            except StorageError as e:
                log.warning("cannot read %r for upload, uploading from its end on: %s",
                            state.log, e)
                state.restart_upload()
                continue
            if data:
                parts.append(_Part(state, upload, upload.cursor, data, next_offset))
                budget -= len(data)
                left_behind |= next_offset < end
        if not parts:
            return False
        key = f"{self.key_prefix}{_now_ms():013d}-{uuid.uuid4().hex[:8]}"
        body = b"".join(part.data for part in parts)
        put_started = time.monotonic()
        for part in parts:
            if part.upload.waiting_since is not None:
                self.metrics.timed("upload_wait", put_started - part.upload.waiting_since)
                part.upload.waiting_since = None
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.store.put(self.bucket, key, body)
        except (ObjectStoreError, TimeoutError) as e:
            if self.healthy:
                log.warning("WAL upload to %s failed, followers fetch records meanwhile: %s",
                            self.bucket, e or f"no answer within {self.timeout_s:g} s")
            self.healthy = False
            return False
        self.healthy = True
        self.metrics.timed("put", time.monotonic() - put_started)
        self.metrics.uploaded(self.bucket, len(body), len(parts))
        uploaded_at = _now_ms()
        obj = _Object(self.bucket, key, uploaded_at)
        published: list[tuple[_Part, WalRef]] = []
        position = 0
        for part in parts:
            published.append((part, WalRef(
                self.bucket, key, part.state.log.topic, part.state.log.partition,
                part.base_offset, part.next_offset - 1, position, len(part.data), uploaded_at)))
            position += len(part.data)
        # Published before followers are pointed at the refs (and before the cursor moves,
        # so that they wait for it meanwhile): with the topic scheme a follower then finds
        # the refs committed to the topic when it looks.
        publish_started = time.monotonic()
        await self._publish([ref for _, ref in published])
        self.metrics.timed("publish", time.monotonic() - publish_started)
        for part, ref in published:
            state, upload = part.state, part.upload
            obj.parts.append((state, ref.last_offset))
            if state.upload is not upload or upload.cursor != ref.base_offset:
                continue  # leadership changed while uploading: not ours to hand out
            upload.cursor = ref.last_offset + 1
            if state.log.log_end_offset > upload.cursor and upload.waiting_since is None:
                upload.waiting_since = time.monotonic()  # appended while this one uploaded
            state.refs.add(ref)
            state.followers.handed_out(ref.last_offset, self._in_sync(state))
            self._leaders.uploaded(ref.topic, ref.partition)
        # Only now, with its parts known: the deletion loop would take a partless object
        # for one every follower holds.
        self._objects.append(obj)
        return left_behind

    def _in_sync(self, state: TieredPartitionState) -> list[int]:
        return self._leaders.in_sync_followers(state.log.topic, state.log.partition)

    @staticmethod
    async def _read(log_: ClassicLog, offset: int, end: int,
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
            for state, _ in obj.parts:
                state.refs.drop(lambda ref: ref.key not in keys)

    def _deletable(self, obj: _Object, now_ms: int) -> bool:
        for state, _ in obj.parts:
            if now_ms - obj.uploaded_at_ms > state.log.config.wal_retention_ms:
                return True
        # Only a leader knows where its followers are; after a leadership change the
        # object waits for its retention.
        return all(state.upload is not None
                   and state.followers.hold(last_offset, self._in_sync(state))
                   for state, last_offset in obj.parts)
