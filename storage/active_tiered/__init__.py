"""The active-tiered storage engine (KIP-1176). See docs/active-tiered.md.

``ActiveTiered`` is what the engine shares on one broker: the WAL uploader, the downloader,
the three metadata schemes and the counters. The broker registers ``open_log`` as the
engine of ``kipper.storage.mode=active-tiered`` and starts it with a ``ReplicaLink``, its
view of partition state and of the metadata topic (replication.active_tiered).

Leadership is told, never inferred: the replica layer calls each log's
``on_leadership_change``, which lands in ``leadership_changed`` here, as Kafka's
``ReplicaManager`` calls ``RemoteLogManager.onLeadershipChange`` and ``stopPartitions``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from pathlib import Path
from typing import Protocol

from ..config import LogConfig
from ..log import Leadership
from ..objectstore import ObjectStore, fast_bucket
from .downloader import WalDownloader
from .log import ActiveTieredLog
from .metadata import WAL_METADATA_TOPIC, MetadataTopicClient, WalRef, make_schemes
from .metrics import ActiveTieredMetrics
from .state import TieredPartitionState
from .uploader import LeaderView, WalUploader

log = logging.getLogger(__name__)

__all__ = ["ActiveTiered", "ActiveTieredLog", "ReplicaLink", "WAL_METADATA_TOPIC"]


class ReplicaLink(MetadataTopicClient, LeaderView, Protocol):
    """What the engine needs of the broker around it: the metadata topic, and partition
    state (ISR, waking waiters)."""


class ActiveTiered:
    def __init__(self, store: ObjectStore, *, node_id: int, az: str, key_prefix: str,
                 upload_interval_ms: int, upload_max_bytes: int, upload_timeout_ms: int,
                 download_timeout_ms: int) -> None:
        self.metrics = ActiveTieredMetrics()
        self.downloader = WalDownloader(store, self.metrics, download_timeout_ms)
        self.uploader = WalUploader(store, fast_bucket(az),
                                    f"{key_prefix}wal/{az}/broker-{node_id}/",
                                    upload_interval_ms, upload_max_bytes, self.metrics,
                                    upload_timeout_ms)
        self.schemes = make_schemes(self.metrics, download_timeout_ms / 1000)
        self._states: dict[tuple[str, int], TieredPartitionState] = {}
        self._link: ReplicaLink | None = None

    def open_log(self, topic: str, partition: int, config: LogConfig, directory: Path, *,
                 clean_recovery_point: int | None = None) -> ActiveTieredLog:
        log_ = ActiveTieredLog(topic, partition, config, directory, self,
                               clean_recovery_point=clean_recovery_point)
        self._states[log_.state.key] = log_.state
        return log_

    def leadership_changed(self, state: TieredPartitionState, role: Leadership,
                           leader_epoch: int) -> None:
        """Became leader: the uploader uploads the partition from its log end on. Became
        follower: it does not, and the leader-side state is dropped. Stopped (also when the
        log is closed or deleted): the engine and its schemes forget the partition."""
        if role is Leadership.LEADER:
            state.became_leader(leader_epoch)
            self.uploader.track(state)
            return
        self.uploader.untrack(state)
        state.became_follower()
        if role is Leadership.STOPPED:
            if self._states.get(state.key) is state:
                del self._states[state.key]
            for scheme in self.schemes.values():
                scheme.stopped(state)

    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        return self._link.in_sync_followers(topic, partition) if self._link else []

    async def start(self, link: ReplicaLink) -> None:
        self._link = link
        for scheme in self.schemes.values():
            await scheme.start(link)
        self.uploader.start(self._publish, link)

    async def stop(self) -> None:
        await self.uploader.stop()
        for scheme in self.schemes.values():
            await scheme.stop()

    async def _publish(self, refs: list[WalRef]) -> None:
        """Hand each scheme the refs of its partitions; one scheme failing (the metadata
        topic unavailable) must not hold back the others."""
        by_scheme: dict[str, list[WalRef]] = defaultdict(list)
        for ref in refs:
            state = self._states.get((ref.topic, ref.partition))
            if state is not None:
                by_scheme[state.log.config.wal_metadata_scheme].append(ref)
        results = await asyncio.gather(*(
            self.schemes[name].publish(scheme_refs, self._states)
            for name, scheme_refs in by_scheme.items()), return_exceptions=True)
        for name, result in zip(by_scheme, results):
            if isinstance(result, Exception):
                log.warning(
                    "publishing WAL metadata (%s scheme) failed: %s", name, result)
