"""A shared partition's log (KIP-1183): a classic local log as the leader's cache, whose
records count only once they are in object storage and in the stream metadata.

- As leader, an append goes to the local log (offsets, producer state: ClassicLog's), then
  to the broker's WAL (storage.shared.wal), and returns once the WAL object holding it is
  committed to the partition's stream. A retried batch that producer state recognises
  waits the same way for its original append's commit.
- On becoming leader the log *reopens*: it keeps what of its local copy agrees with the
  stream and appends the rest of the stream (data objects and WAL ranges, in offset order),
  which also rebuilds producer state, idempotence and open transactions alike. Until it
  has, the broker does not serve the partition (replication.shared_partition).

  What agrees is decided as a Kafka follower truncates (KIP-101/279), by leader epochs:
  within one leader epoch only one leader appended, and its local log is always its
  committed records plus an uncommitted tail, so where the local leader-epoch cache and
  the stream's epochs (``StreamMetadata.stream_epochs``) give every offset the same epoch,
  the records are the same; the first offset where they differ is where the local copy
  stops being one.
- Not leading, the log serves nothing; it is rebuilt on the next leadership.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.records import BatchHeader, iter_batches

from ..append_rules import AppendDecision
from ..classic import ClassicLog
from ..classic.log import UnexpectedAppendOffset
from ..config import LogConfig
from ..disk_space import storage_io
from ..log import AppendResult, Leadership
from ..objectstore import ObjectStoreError
from .state import NotCommitted, SharedPartitionState
from .stream import StreamRange

if TYPE_CHECKING:
    from . import SharedStorage

log = logging.getLogger(__name__)
REOPEN_RETRY_S = 1.0
# Ranges downloaded at once while reopening one partition.
REOPEN_CONCURRENCY = 8


class SharedLog(ClassicLog):
    def __init__(self, topic: str, partition: int, config: LogConfig, directory: Path | str,
                 engine: "SharedStorage", *, clean_recovery_point: int | None = None) -> None:
        super().__init__(topic, partition, config, directory,
                         clean_recovery_point=clean_recovery_point)
        self._engine = engine
        self.state = SharedPartitionState(self)
        self._reopening: asyncio.Task | None = None

    def __repr__(self) -> str:
        return (f"SharedLog({self.topic}-{self.partition}, "
                f"[{self.log_start_offset}, {self.log_end_offset}))")

    @property
    def size_bytes(self) -> int:
        """The bytes of the partition's stream in object storage, as every replica's metadata
        has them (as diskless partitions report theirs): the local copy is a cache."""
        streams = self._engine.streams
        if streams is None:
            return 0
        return sum(r.length for r in streams.stream(self.topic, self.partition))

    @property
    def serving(self) -> bool:
        """Leading, and reopened from object storage in this leadership."""
        return self.state.leading

    def on_leadership_change(self, role: Leadership, leader_epoch: int) -> None:
        self._stop_reopening()
        self.state.stopped_leading()
        if role is Leadership.LEADER:
            self._reopening = asyncio.ensure_future(self._reopen(leader_epoch))
        self._engine.leadership_changed(self, role)

    def _stop_reopening(self) -> None:
        if self._reopening is not None and not self._reopening.done():
            self._reopening.cancel()
        self._reopening = None

    # -- leader --------------------------------------------------------------------------

    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        if not self.state.leading:
            raise NotCommitted(f"{self.topic}-{self.partition} is not open for appends here",
                               deposed=True)
        generation = self.state.generation
        end_before = self.log_end_offset
        result = await super()._append(records, batches, leader_epoch, decision)
        if self.log_end_offset > end_before:  # else a retried batch, already appended
            self._engine.wal.append(self.state, records, result.base_offset,
                                    self.log_end_offset - 1)
        await self.state.wait_committed(result.last_offset + 1, generation)
        return result

    def durable_end_offset(self) -> int:
        return self.state.committed_end if self.state.leading else -1

    def resync(self, leader_epoch: int) -> None:
        """Still the leader, but unsure where the stream ends: reopen from it."""
        self._stop_reopening()
        self._reopening = asyncio.ensure_future(self._reopen(leader_epoch))

    def truncate_locally(self, offset: int) -> None:
        """Cut the local log at ``offset`` now (records that will never be committed)."""
        if offset < self.log_end_offset:
            with storage_io(f"truncate {self.directory}"):
                self._truncate_to(offset)

    # -- reopening -----------------------------------------------------------------------

    async def _reopen(self, leader_epoch: int) -> None:
        await self._engine.started.wait()
        self._engine.reopening(self)
        started = time.monotonic()
        try:
            while True:
                ranges = self._engine.streams.stream(self.topic, self.partition)
                epochs = self._engine.streams.stream_epochs(self.topic, self.partition)
                try:
                    await self._rebuild(ranges, epochs)
                    break
                except (ObjectStoreError, asyncio.TimeoutError) as e:
                    log.warning("%r: reopening from object storage failed (retrying): %s",
                                self, e)
                    await asyncio.sleep(REOPEN_RETRY_S)
                except UnexpectedAppendOffset as e:
                    log.warning("%r: the local copy does not continue into the stream, "
                                "rebuilding it whole: %s", self, e)
                    await self.truncate_fully_and_start_at(self.log_start_offset)
        except asyncio.CancelledError:
            self._engine.reopened(self, None)
            raise
        end = ranges[-1].last_offset + 1 if ranges else self.log_start_offset
        self.state.became_leader(leader_epoch, end)
        self._engine.reopened(self, time.monotonic() - started)

    async def _rebuild(self, ranges: list[StreamRange], epochs: list[tuple[int, int]]) -> None:
        """The local log made the stream's copy: cut where it stops agreeing with the stream
        (emptied if nothing agrees), then the ranges from there appended."""
        start = ranges[0].base_offset if ranges else 0
        end = ranges[-1].last_offset + 1 if ranges else 0
        keep = self._agreeing_end(epochs, start, end)
        if keep is None:
            if not self.log_start_offset == self.log_end_offset == start:  # else: empty already
                await self.truncate_fully_and_start_at(start)
        else:
            await self.truncate_to(keep)
        missing = [r for r in ranges if r.last_offset >= self.log_end_offset]
        store = self._engine.store
        for i in range(0, len(missing), REOPEN_CONCURRENCY):
            window = missing[i:i + REOPEN_CONCURRENCY]
            chunks = await asyncio.gather(*(store.get_range(r.bucket, r.key, r.position,
                                                            r.length) for r in window))
            for chunk in chunks:
                await self.append_as_follower(self._from_log_end(chunk))

    def _agreeing_end(self, stream_epochs: list[tuple[int, int]], stream_start: int,
                      stream_end: int) -> int | None:
        """The offset up to which the local log holds the stream's records (None: no part
        of the stream; an empty stream keeps nothing either)."""
        start = max(self.log_start_offset, stream_start)
        end = min(self.log_end_offset, stream_end)
        if end <= start or self.log_start_offset > stream_end:
            return None
        local = [(entry.epoch, entry.start_offset) for entry in self._epochs.entries]
        bounds = sorted({start} | {s for _, s in local + stream_epochs if start < s < end})
        for offset in bounds:
            if _epoch_at(local, offset) != _epoch_at(stream_epochs, offset):
                return offset if offset > self.log_start_offset else None
        return end

    def _from_log_end(self, chunk: bytes) -> bytes:
        """The batches of ``chunk`` from the one holding the log end offset on."""
        for batch in iter_batches(chunk):
            if batch.next_offset > self.log_end_offset:
                return chunk[batch.position:]
        return b""

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self, *, sync: bool = True) -> None:
        self.on_leadership_change(Leadership.STOPPED, -1)
        await super().close(sync=sync)

    async def delete(self) -> None:
        self.on_leadership_change(Leadership.STOPPED, -1)
        await super().delete()


def _epoch_at(epochs: list[tuple[int, int]], offset: int) -> int | None:
    """The leader epoch of ``offset`` in a leader-epoch list (epoch, first offset)."""
    found = None
    for epoch, start in epochs:
        if start > offset:
            break
        found = epoch
    return found
