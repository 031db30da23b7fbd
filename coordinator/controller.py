"""The controller: a quorum of one that owns topics, configs and partition assignment.

Every change is validated, written to the metadata log (fsync) and only then applied to
the image and announced to listeners, so a restart replays exactly what was acknowledged.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Callable

from kio.schema.errors import ErrorCode

from storage.config import InvalidConfig, validate_topic_configs

from .metadata import MetadataImage, MetadataLog, TopicInfo

MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


class ControllerError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name is empty")
    if name in (".", ".."):
        raise ControllerError(ErrorCode.invalid_topic_exception,
                              f"Topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME:
        raise ControllerError(ErrorCode.invalid_topic_exception,
                              f"Topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")


class Controller:
    """Single-voter controller persisted in ``<metadata_dir>/metadata.log``."""

    def __init__(self, metadata_dir: Path, default_partitions: int = 1,
                 default_replication_factor: int = 1) -> None:
        self.log = MetadataLog(metadata_dir / "metadata.log")
        self.image = MetadataImage()
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.listeners: list[Callable[[dict], None]] = []
        for record in self.log.load():
            self.image.apply(record)

    def _commit(self, records: list[dict]) -> None:
        self.log.append(records)
        for record in records:
            self.image.apply(record)
            for listener in self.listeners:
                listener(record)

    def register_broker(self, node_id: int, host: str, port: int, rack: str | None) -> None:
        known = self.image.brokers.get(node_id)
        if known and (known.host, known.port, known.rack) == (host, port, rack):
            return
        self._commit([{"type": "broker", "node_id": node_id, "host": host, "port": port,
                       "rack": rack}])

    def _assign(self, partitions: range, replication_factor: int) -> dict[int, list[int]]:
        brokers = sorted(self.image.brokers)
        if replication_factor > len(brokers):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(brokers)}.")
        return {p: [brokers[(p + i) % len(brokers)] for i in range(replication_factor)]
                for p in partitions}

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     configs: dict[str, str | None], validate_only: bool = False) -> TopicInfo | None:
        validate_topic_name(name)
        if name in self.image.topics:
            raise ControllerError(ErrorCode.topic_already_exists,
                                  f"Topic '{name}' already exists.")
        if num_partitions == -1:
            num_partitions = self.default_partitions
        if replication_factor == -1:
            replication_factor = self.default_replication_factor
        if num_partitions <= 0:
            raise ControllerError(ErrorCode.invalid_partitions,
                                  "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise ControllerError(ErrorCode.invalid_replication_factor,
                                  "Replication factor must be larger than 0.")
        try:
            clean_configs = validate_topic_configs(configs)
        except InvalidConfig as e:
            raise ControllerError(ErrorCode.invalid_config, str(e)) from None
        assignment = self._assign(range(num_partitions), replication_factor)
        if validate_only:
            return None
        topic_id = uuid.uuid4()
        records: list[dict] = [{"type": "topic", "name": name, "id": str(topic_id),
                                "configs": clean_configs}]
        records += [self._partition_record(name, p, replicas) for p, replicas in assignment.items()]
        self._commit(records)
        return self.image.topics[name]

    @staticmethod
    def _partition_record(topic: str, partition: int, replicas: list[int]) -> dict:
        return {"type": "partition", "topic": topic, "partition": partition,
                "replicas": replicas, "isr": list(replicas), "leader": replicas[0],
                "leader_epoch": 0}

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self.image.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                  "This server does not host this topic-partition.")
        self._commit([{"type": "remove_topic", "name": name}])
        return topic

    def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.image.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                  f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count <= current:
            raise ControllerError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than or equal "
                f"to the requested {count}.")
        replication_factor = len(topic.partitions[0].replicas)
        assignment = self._assign(range(current, count), replication_factor)
        if validate_only:
            return
        self._commit([self._partition_record(name, p, replicas)
                      for p, replicas in assignment.items()])
