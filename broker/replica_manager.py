"""Keeps this broker's Partitions in step with cluster metadata."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from coordinator.metadata import MetadataImage, PartitionInfo
from storage.config import LogConfig
from storage.manager import LogManager

from .partition import Partition, PartitionError

log = logging.getLogger(__name__)


class ReplicaManager:
    def __init__(self, node_id: int, image: MetadataImage, logs: LogManager,
                 topic_defaults: dict[str, str]) -> None:
        self.node_id = node_id
        self.image = image
        self.logs = logs
        self.topic_defaults = topic_defaults
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._pending_deletes: list[asyncio.Task] = []

    def log_config(self, topic: str) -> LogConfig:
        return LogConfig.from_topic_configs(self.image.topics[topic].configs, self.topic_defaults)

    def load_all(self) -> None:
        for topic in self.image.topics.values():
            for info in topic.partitions.values():
                self._ensure_partition(info)

    def on_metadata_record(self, record: dict) -> None:
        """Controller listener: called after ``record`` was applied to the image."""
        kind = record["type"]
        if kind == "partition":
            self._ensure_partition(self.image.topics[record["topic"]].partitions[record["partition"]])
        elif kind == "config":
            config = self.log_config(record["topic"])
            for (topic, _), partition in self.partitions.items():
                if topic == record["topic"]:
                    partition.log.reconfigure(config)
        elif kind == "remove_topic":
            for key in [k for k in self.partitions if k[0] == record["name"]]:
                partition = self.partitions.pop(key)
                partition.notify_waiters()
                self._pending_deletes.append(asyncio.ensure_future(self.logs.delete_partition(*key)))

    def _ensure_partition(self, info: PartitionInfo) -> None:
        key = (info.topic, info.partition)
        if self.node_id not in info.replicas:
            return
        existing = self.partitions.get(key)
        if existing is not None:
            existing.update_info(info)
            existing.maybe_advance_high_watermark()
            return
        log_ = self.logs.open(info.topic, info.partition, self.log_config(info.topic))
        self.partitions[key] = Partition(self.node_id, log_, info)

    def get(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is None:
            raise PartitionError(ErrorCode.unknown_topic_or_partition,
                                 "This server does not host this topic-partition.")
        return found

    async def close(self) -> None:
        if self._pending_deletes:
            await asyncio.gather(*self._pending_deletes, return_exceptions=True)
        await self.logs.close_all()
