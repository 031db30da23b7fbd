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
from pathlib import Path

from ..config import LogConfig
from ..histogram import Histogram
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
        self.reopen_seconds = Histogram()
        self._leading: dict[tuple[str, int], SharedLog] = {}
        self._compacting: asyncio.Task | None = None

    def open_log(self, topic: str, partition: int, config: LogConfig,
                 directory: Path) -> SharedLog:
        return SharedLog(topic, partition, config, directory, self)

    def leadership_changed(self, log_: SharedLog, role: Leadership) -> None:
        key = (log_.topic, log_.partition)
        if role is not Leadership.LEADER and self._leading.get(key) is log_:
            del self._leading[key]

    def reopened(self, log_: SharedLog, seconds: float, ranges: int) -> None:
        """``log_`` was rebuilt from ``ranges`` ranges of its stream and now leads."""
        self._leading[(log_.topic, log_.partition)] = log_
        self.reopen_seconds.observe(seconds)

    async def start(self, streams: StreamMetadata) -> None:
        self.streams = self.wal.streams = streams
        self.started.set()
        self._compacting = asyncio.create_task(self.compactor.run(self._leading, streams))

    async def stop(self) -> None:
        if self._compacting is not None:
            self._compacting.cancel()
            await asyncio.gather(self._compacting, return_exceptions=True)
        await self.wal.close()
