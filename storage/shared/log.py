"""A shared partition's log (KIP-1183): a classic local log as the leader's cache, whose
records count only once they are in object storage and in the stream metadata.

- As leader, an append goes to the local log (offsets, producer state: ClassicLog's), then
  to the broker's WAL (storage.shared.wal), and returns once the WAL object holding it is
  committed to the partition's stream. A retried batch that producer state recognises
  waits the same way for its original append's commit.
- On becoming leader the log *reopens*: the local copy is dropped and rebuilt from the
  stream (data objects and WAL ranges, in offset order), which also rebuilds producer
  state, idempotence and open transactions alike. Until it has, the broker does not serve
  the partition (replication.shared_partition).
- Not leading, the log serves nothing; it is rebuilt on the next leadership.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.records import BatchHeader

from ..append_rules import AppendDecision
from ..classic import ClassicLog
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
                 engine: "SharedStorage") -> None:
        super().__init__(topic, partition, config, directory)
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
                try:
                    await self._rebuild(ranges)
                    break
                except (ObjectStoreError, asyncio.TimeoutError) as e:
                    log.warning("%r: reopening from object storage failed (retrying): %s",
                                self, e)
                    await asyncio.sleep(REOPEN_RETRY_S)
        except asyncio.CancelledError:
            self._engine.reopened(self, None)
            raise
        end = ranges[-1].last_offset + 1 if ranges else self.log_start_offset
        self.state.became_leader(leader_epoch, end)
        self._engine.reopened(self, time.monotonic() - started)

    async def _rebuild(self, ranges: list[StreamRange]) -> None:
        """The local log made the stream's copy: emptied, then every range appended."""
        await self.truncate_fully_and_start_at(ranges[0].base_offset if ranges else 0)
        store = self._engine.store
        for i in range(0, len(ranges), REOPEN_CONCURRENCY):
            window = ranges[i:i + REOPEN_CONCURRENCY]
            chunks = await asyncio.gather(*(store.get_range(r.bucket, r.key, r.position,
                                                            r.length) for r in window))
            for chunk in chunks:
                await self.append_as_follower(chunk)

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self, *, sync: bool = True) -> None:
        self.on_leadership_change(Leadership.STOPPED, -1)
        await super().close(sync=sync)

    async def delete(self) -> None:
        self.on_leadership_change(Leadership.STOPPED, -1)
        await super().delete()
