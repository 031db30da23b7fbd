"""Cluster metadata: the records a controller writes and the image brokers build from them.

Like KRaft, the state is a log of small records (here JSON lines) replayed into an
in-memory image; the controller appends, every reader applies the same records.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataImage:
    """Topics and brokers as of the last applied record."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self.offset = -1

    def apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "topic":
            topic = TopicInfo(record["name"], uuid.UUID(record["id"]), dict(record["configs"]))
            self.topics[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
        elif kind == "partition":
            topic = self.topics[record["topic"]]
            topic.partitions[record["partition"]] = PartitionInfo(
                record["topic"], record["partition"], list(record["replicas"]),
                list(record["isr"]), record["leader"], record["leader_epoch"],
                record.get("partition_epoch", 0))
        elif kind == "config":
            topic = self.topics[record["topic"]]
            topic.configs = dict(record["configs"])
        elif kind == "remove_topic":
            topic = self.topics.pop(record["name"])
            self.topics_by_id.pop(topic.topic_id, None)
        elif kind == "broker":
            self.brokers[record["node_id"]] = BrokerInfo(
                record["node_id"], record["host"], record["port"], record.get("rack"))
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")
        self.offset += 1


class MetadataLog:
    """Append-only JSON-lines file of metadata records, fsynced on every append.

    A torn last line (crash mid-write) is dropped on load: the controller never
    acknowledged the change it carried.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def load(self) -> list[dict]:
        if not self.path.exists():
            return []
        records = []
        good_bytes = 0
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    break
                good_bytes += len(line)
        if good_bytes != self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good_bytes)
        return records

    def append(self, records: list[dict]) -> None:
        data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
