"""The shared storage engine (KIP-1183, AutoMQ-style): leader-based partitions with no
broker-to-broker replication; object storage is the only copy that counts. See
docs/shared.md.

``SharedStorage`` is what the engine shares on one broker: the WAL (one object for all the
partitions it leads, storage.shared.wal), the compactor that turns WAL ranges into
per-partition data objects (storage.shared.compactor), and the partitions it leads. The
broker registers ``open_log`` as the engine of ``kipper.storage.mode=shared`` and starts it
with a ``StreamMetadata``: the stream metadata in the cluster metadata log, committed
through the controller (replication.shared_streams).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from pathlib import Path

from ..config import LogConfig
from ..log import Leadership
from ..objectstore import WAL_BUCKET, ObjectStore
from .compactor import Compactor
from .log import SharedLog
from .stream import (
    SHARED_STREAM_RECORD,
    CommitOutcome,
    SharedStreams,
    StreamCommit,
    StreamMetadata,
    StreamRange,
)
from .wal import SharedWal

log = logging.getLogger(__name__)

__all__ = ["SHARED_STREAM_RECORD", "CommitOutcome", "SharedLog", "SharedStorage",
           "SharedStreams", "StreamCommit", "StreamMetadata", "StreamRange"]


class SharedStorage:
    def __init__(self, store: ObjectStore, *, node_id: int, key_prefix: str,
                 wal_interval_ms: int, wal_max_bytes: int,
                 data_object_interval_ms: int) -> None:
        self.store = store
        # One regional bucket, as KIP-1183 and AutoMQ: every AZ's brokers read it.
        self.wal = SharedWal(store, WAL_BUCKET, f"{key_prefix}shared/wal/broker-{node_id}/",
                             wal_interval_ms, wal_max_bytes)
        self.compactor = Compactor(store, WAL_BUCKET, f"{key_prefix}shared/data/",
                                   data_object_interval_ms)
        self.streams: StreamMetadata | None = None
        self.started = asyncio.Event()
        self._leading: dict[tuple[str, int], SharedLog] = {}
        self._compacting: asyncio.Task | None = None
        # The reopens under way, and since when and how long each took, for one log line
        # per wave of new leaderships (a failover moves hundreds at once).
        self._reopening: set[int] = set()
        self._wave_started = 0.0
        self._wave: list[float] = []

    def open_log(self, topic: str, partition: int, config: LogConfig, directory: Path, *,
                 clean_recovery_point: int | None = None) -> SharedLog:
        return SharedLog(topic, partition, config, directory, self,
                         clean_recovery_point=clean_recovery_point)

    def leadership_changed(self, log_: SharedLog, role: Leadership) -> None:
        key = (log_.topic, log_.partition)
        if role is not Leadership.LEADER and self._leading.get(key) is log_:
            del self._leading[key]

    def reopening(self, log_: SharedLog) -> None:
        if not self._reopening:
            self._wave_started, self._wave = time.monotonic(), []
        self._reopening.add(id(log_))

    def reopened(self, log_: SharedLog, seconds: float | None) -> None:
        """``log_`` was rebuilt from its stream in ``seconds`` and now leads (None: its
        reopening was abandoned, the leadership having moved on)."""
        if seconds is not None:
            self._leading[(log_.topic, log_.partition)] = log_
            self._wave.append(seconds)
        self._reopening.discard(id(log_))
        if not self._reopening and self._wave:
            log.info("reopened %d partition(s) from object storage in %.3f s (per partition: "
                     "median %.3f s, max %.3f s)", len(self._wave),
                     time.monotonic() - self._wave_started, statistics.median(self._wave),
                     max(self._wave))
            self._wave = []

    async def start(self, streams: StreamMetadata) -> None:
        self.streams = self.wal.streams = streams
        self.started.set()
        self._compacting = asyncio.create_task(self.compactor.run(self._leading, streams))

    async def stop(self) -> None:
        if self._compacting is not None:
            self._compacting.cancel()
            await asyncio.gather(self._compacting, return_exceptions=True)
        await self.wal.close()
