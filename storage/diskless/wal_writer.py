"""The broker's diskless produce WAL buffer (KIP-1163 produce path).

Produce requests for every diskless partition on this broker go into one open buffer.
The buffer closes after ``diskless.append.commit.interval.ms``, once it holds
``diskless.append.buffer.max.bytes``, or once it holds ``max_batches`` batches (about
2,300): as many as one record of the batch coordinator's log can commit, whatever their
size (small batches of thousands of partitions reach it first); it is uploaded as one
object to ``kipper-wal``, then its batch coordinates are committed to the batch
coordinator, which assigns the offsets. Only then are the produce requests of that object
answered. Uploads of several closed buffers run concurrently, but commits happen strictly
in buffer order, so one producer's requests get offsets in the order the broker received
them.

Hedged uploads (``hedge_after_s``, off by default): when a WAL object's PUT has not answered
that long after it was sent, a second PUT of the same object is sent; whichever succeeds
first completes the upload and the other is cancelled. Both carry the same key and the same
bytes, so either one makes the object, and the commit names that key: nothing depends on
which PUT won. The price is one more PUT for each hedged object.

``commit_per_partition`` (off by default) is the naive design kept for comparison (digest §6
claim 8): each partition's batches of an object are committed as a CommitFile of their own,
concurrently, so a WAL file costs as many commit RPCs and coordinator appends as it has
partitions, instead of one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field

from protocol.records import BatchHeader, TxnMarker, read_marker
from storage.histogram import Histogram
from storage.log import KafkaStorageError, RecordListTooLarge
from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreError

from .control_plane import COMMIT_MAX_BATCHES, BatchResult, CommitBatch, CommitFile, ControlPlane
from .read_cache import ReadCache

log = logging.getLogger(__name__)


class CommitFailed(KafkaStorageError):
    """The coordinator did not commit a WAL object in time; its producers may retry
    (KAFKA_STORAGE_ERROR is retriable for Kafka clients)."""


@dataclass(slots=True)
class PendingAppend:
    """One partition's batches from one produce request, waiting for their offsets."""

    topic_id: str
    partition: int
    log_append_time: bool
    batches: list[BatchHeader]
    # The transaction marker each batch carries (control batches), else None.
    markers: list[TxnMarker | None]
    # Position of the first batch in the buffer.
    position: int
    done: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass(slots=True)
class WalStats:
    uploads: int = 0
    upload_bytes: int = 0
    upload_failures: int = 0
    commits: int = 0
    commit_failures: int = 0
    batches: int = 0
    # Uploads whose first PUT was slower than the hedge delay, so a second PUT was sent,
    # and how many of those the second PUT completed.
    hedged_puts: int = 0
    hedged_put_wins: int = 0


class WalWriter:
    def __init__(self, store: ObjectStore, control_plane: ControlPlane, key_prefix: str,
                 node_id: int, commit_interval_ms: int = 250,
                 buffer_max_bytes: int = 8 * 1024 * 1024,
                 cache: ReadCache | None = None, hedge_after_s: float | None = None,
                 commit_per_partition: bool = False,
                 max_batches: int = COMMIT_MAX_BATCHES) -> None:
        self.store = store
        self.control_plane = control_plane
        self.key_prefix = key_prefix
        self.node_id = node_id
        self.commit_interval_s = commit_interval_ms / 1000
        self.buffer_max_bytes = buffer_max_bytes
        self.cache = cache
        # None: one PUT per object, however long it takes.
        self.hedge_after_s = hedge_after_s
        self.commit_per_partition = commit_per_partition
        self.max_batches = max_batches
        self.stats = WalStats()
        # Successful PUTs of WAL objects and commits to the batch coordinator.
        self.upload_seconds = Histogram()
        self.commit_seconds = Histogram()
        self._buffer = bytearray()
        self._pending: list[PendingAppend] = []
        self._buffered_batches = 0
        self._close_timer: asyncio.TimerHandle | None = None
        # Completes when the previous closed buffer's commit has finished (either way).
        self._previous_commit: asyncio.Future | None = None
        self._in_flight: set[asyncio.Task] = set()

    def append(self, topic_id: str, partition: int, records: bytes | bytearray,
               batches: list[BatchHeader], log_append_time: bool) -> asyncio.Future:
        """Add validated batches to the open buffer. The future resolves to the coordinator's
        BatchResult of each batch once committed, or fails with a KafkaStorageError.
        A control batch must carry a transaction marker (else InvalidRecordBatch, before
        anything is buffered): the coordinator applies it to the producer's transaction.
        More batches than one commit can name raise RecordListTooLarge (nothing buffered):
        an append is committed whole, in one object."""
        if len(batches) > self.max_batches:
            raise RecordListTooLarge(f"{len(batches)} batches in one append exceed the "
                                     f"{self.max_batches} one diskless commit can name")
        markers = [read_marker(records, batch) if batch.is_control else None
                   for batch in batches]
        if self._buffered_batches + len(batches) > self.max_batches:
            self._close_buffer()
        pending = PendingAppend(topic_id, partition, log_append_time, batches, markers,
                                len(self._buffer))
        self._buffer += records
        self._pending.append(pending)
        self._buffered_batches += len(batches)
        if (len(self._buffer) >= self.buffer_max_bytes
                or self._buffered_batches >= self.max_batches):
            self._close_buffer()
        elif self._close_timer is None:
            self._close_timer = asyncio.get_running_loop().call_later(
                self.commit_interval_s, self._close_buffer)
        return pending.done

    def _close_buffer(self) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
            self._close_timer = None
        if not self._pending:
            return
        data, pending = bytes(self._buffer), self._pending
        self._buffer, self._pending, self._buffered_batches = bytearray(), [], 0
        previous = self._previous_commit
        committed = self._previous_commit = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._upload_and_commit(data, pending, previous, committed))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _upload_and_commit(self, data: bytes, pending: list[PendingAppend],
                                 previous: asyncio.Future | None,
                                 committed: asyncio.Future) -> None:
        key = f"{self.key_prefix}wal/{uuid.uuid4().hex}"
        try:
            try:
                await self._upload(key, data)
            finally:
                # Commits go in buffer order: wait for the previous one even if ours failed.
                if previous is not None:
                    await asyncio.shield(previous)
            results = await self._commit(key, data, pending)
        except Exception as error:  # every waiting producer must get an answer
            if not isinstance(error, KafkaStorageError):
                log.exception("WAL object %s failed", key)
                error = KafkaStorageError(f"WAL object {key} failed: {error!r}")
            for entry in pending:
                if not entry.done.done():
                    entry.done.set_exception(error)
            return
        finally:
            committed.set_result(None)
        position = 0
        for entry in pending:
            count = len(entry.batches)
            if not entry.done.done():  # else its produce request timed out (cancelled it)
                entry.done.set_result(results[position:position + count])
            position += count

    async def _upload(self, key: str, data: bytes) -> None:
        started = time.monotonic()
        try:
            await self._put(key, data)
        except ObjectStoreError as e:
            self.stats.upload_failures += 1
            log.warning("WAL upload of %s (%d bytes) failed: %s", key, len(data), e)
            raise KafkaStorageError(f"object storage unavailable: {e}") from e
        self.upload_seconds.observe(time.monotonic() - started)
        self.stats.uploads += 1
        self.stats.upload_bytes += len(data)

    async def _put(self, key: str, data: bytes) -> None:
        """PUT the object; with hedging, a second PUT of it once the first has taken
        ``hedge_after_s``. Fails only if every PUT sent failed (with the first one's error)."""
        first = asyncio.ensure_future(self.store.put(WAL_BUCKET, key, data))
        if self.hedge_after_s is None:
            return await first
        puts = {first}
        try:
            done, _ = await asyncio.wait(puts, timeout=self.hedge_after_s)
            if not done:
                self.stats.hedged_puts += 1
                puts.add(asyncio.ensure_future(self.store.put(WAL_BUCKET, key, data)))
            while puts:
                done, puts = await asyncio.wait(puts, return_when=asyncio.FIRST_COMPLETED)
                for put in done:
                    if put.exception() is None:
                        self.stats.hedged_put_wins += put is not first
                        return
            raise first.exception()
        finally:
            for put in puts:  # the slower PUT of the same bytes, or ours if we were cancelled
                put.cancel()

    async def _commit(self, key: str, data: bytes,
                      pending: list[PendingAppend]) -> list[BatchResult]:
        batches = []
        for entry in pending:
            for batch, marker in zip(entry.batches, entry.markers):
                start = entry.position + batch.position
                batches.append(CommitBatch(
                    entry.topic_id, entry.partition, start, batch.size,
                    batch.last_offset_delta + 1, batch.max_timestamp, entry.log_append_time,
                    batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    batch.last_sequence, batch.is_transactional,
                    None if marker is None else marker.commit,
                    -1 if marker is None else marker.coordinator_epoch))
                if self.cache is not None:
                    self.cache.put(key, start, batch.size, data[start:start + batch.size])
        now_ms = time.time_ns() // 1_000_000
        if self.commit_per_partition:
            groups: dict[tuple[str, int], list[int]] = {}
            for index, batch in enumerate(batches):
                groups.setdefault((batch.topic_id, batch.partition), []).append(index)
            requests = [CommitFile(f"{self.node_id}:{key}:{topic_id}:{partition}", key,
                                   len(data), self.node_id, now_ms,
                                   tuple(batches[i] for i in indexes),
                                   one_partition_of_object=True)
                        for (topic_id, partition), indexes in groups.items()]
            positions = list(groups.values())
        else:
            requests = [CommitFile(f"{self.node_id}:{key}", key, len(data), self.node_id,
                                   now_ms, tuple(batches))]
            positions = [list(range(len(batches)))]
        started = time.monotonic()
        try:
            answers = await asyncio.gather(
                *(self.control_plane.commit_file(request) for request in requests))
        except Exception as e:
            self.stats.commit_failures += 1
            log.warning("commit of WAL object %s failed: %s (it becomes an orphan)", key, e)
            raise CommitFailed(f"the batch coordinator did not commit: {e}") from e
        self.commit_seconds.observe(time.monotonic() - started)
        self.stats.commits += len(requests)
        self.stats.batches += len(batches)
        by_index = {index: result for indexes, answer in zip(positions, answers)
                    for index, result in zip(indexes, answer)}
        return [by_index[index] for index in range(len(batches))]

    async def close(self) -> None:
        """Flush the open buffer and wait for every upload and commit in flight."""
        self._close_buffer()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
