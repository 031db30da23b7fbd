"""The active-tiered storage engine (KIP-1176). See docs/active-tiered.md.

``ActiveTiered`` is what the engine shares on one broker: the WAL uploader, the downloader,
the three metadata schemes and the counters. The broker registers ``open_log`` as the
engine of ``kipper.storage.mode=active-tiered`` and starts it with a ``ReplicaLink``, its
view of partition state and of the metadata topic (replication.active_tiered).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from pathlib import Path
from typing import Protocol

from ..config import LogConfig
from ..objectstore import ObjectStore, fast_bucket
from .downloader import WalDownloader
from .log import ActiveTieredLog
from .metadata import WAL_METADATA_TOPIC, MetadataTopicClient, WalRef, make_schemes
from .metrics import ActiveTieredMetrics
from .uploader import WalUploader

log = logging.getLogger(__name__)

__all__ = ["ActiveTiered", "ActiveTieredLog", "ReplicaLink", "WAL_METADATA_TOPIC"]


class ReplicaLink(MetadataTopicClient, Protocol):
    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        """The in-sync replicas other than this broker, of a partition it leads."""

    def uploaded(self, topic: str, partition: int) -> None:
        """New data of the partition is uploaded: wake follower fetches waiting for it, and
        let the high watermark move (ack.on.upload)."""


class ActiveTiered:
    def __init__(self, store: ObjectStore, *, node_id: int, az: str, key_prefix: str,
                 upload_interval_ms: int, upload_max_bytes: int,
                 download_timeout_ms: int) -> None:
        self.metrics = ActiveTieredMetrics()
        self.downloader = WalDownloader(store, self.metrics, download_timeout_ms)
        self.uploader = WalUploader(store, fast_bucket(az),
                                    f"{key_prefix}wal/{az}/broker-{node_id}/",
                                    upload_interval_ms, upload_max_bytes, self.metrics)
        self.schemes = make_schemes(self.metrics, download_timeout_ms / 1000)
        self._logs: dict[tuple[str, int], ActiveTieredLog] = {}
        self._link: ReplicaLink | None = None

    def open_log(self, topic: str, partition: int, config: LogConfig,
                 directory: Path) -> ActiveTieredLog:
        log_ = ActiveTieredLog(topic, partition, config, directory, self)
        self._logs[(topic, partition)] = log_
        return log_

    def closed(self, log_: ActiveTieredLog) -> None:
        self.uploader.forget(log_)
        if self._logs.get((log_.topic, log_.partition)) is log_:
            del self._logs[(log_.topic, log_.partition)]
        for scheme in self.schemes.values():
            scheme.closed(log_)

    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        return self._link.in_sync_followers(topic, partition) if self._link else []

    async def start(self, link: ReplicaLink) -> None:
        self._link = link
        for scheme in self.schemes.values():
            await scheme.start(link)
        self.uploader.start(self._publish, link.uploaded)

    async def stop(self) -> None:
        await self.uploader.stop()
        for scheme in self.schemes.values():
            await scheme.stop()

    async def _publish(self, refs: list[WalRef]) -> None:
        """Hand each scheme the refs of its partitions; one scheme failing (the metadata
        topic unavailable) must not hold back the others."""
        by_scheme: dict[str, list[WalRef]] = defaultdict(list)
        for ref in refs:
            log_ = self._logs.get((ref.topic, ref.partition))
            if log_ is not None:
                by_scheme[log_.config.wal_metadata_scheme].append(ref)
        results = await asyncio.gather(*(
            self.schemes[name].publish(scheme_refs, self._logs)
            for name, scheme_refs in by_scheme.items()), return_exceptions=True)
        for name, result in zip(by_scheme, results):
            if isinstance(result, Exception):
                log.warning(
                    "publishing WAL metadata (%s scheme) failed: %s", name, result)
