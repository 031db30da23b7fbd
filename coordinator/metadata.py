"""Cluster metadata: the records the controller writes and the image every node builds.

As in KRaft, the state is a log of small records replayed into an in-memory image. The
log is the classic partition ``__cluster_metadata-0`` (one JSON record per batch): the
controller appends and fsyncs, brokers fetch it with ordinary Fetch requests and apply
the same records.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kio.records.readers import read_batch

from protocol.records import build_batch, iter_batches
from storage.classic import ClassicLog
from storage.config import LogConfig

METADATA_TOPIC = "__cluster_metadata"
# The diskless batch coordinator's log (KIP-1164), a replicated classic topic.
DISKLESS_METADATA_TOPIC = "__diskless-metadata"
NO_LEADER = -1


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
    epoch: int = -1
    fenced: bool = False


class MetadataImage:
    """Topics and brokers as of the last applied record."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        # Offset of the next record to apply.
        self.next_offset = 0

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted((b for b in self.brokers.values() if not b.fenced), key=lambda b: b.node_id)

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
                record["partition_epoch"])
        elif kind == "config":
            self.topics[record["topic"]].configs = dict(record["configs"])
        elif kind == "remove_topic":
            topic = self.topics.pop(record["name"])
            self.topics_by_id.pop(topic.topic_id, None)
        elif kind == "broker":
            self.brokers[record["node_id"]] = BrokerInfo(
                record["node_id"], record["host"], record["port"], record.get("rack"),
                record["epoch"], fenced=False)
        elif kind == "fence_broker":
            self.brokers[record["node_id"]].fenced = True
        elif kind == "unfence_broker":
            self.brokers[record["node_id"]].fenced = False
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")


def partition_record(info: PartitionInfo) -> dict:
    return {"type": "partition", "topic": info.topic, "partition": info.partition,
            "replicas": info.replicas, "isr": info.isr, "leader": info.leader,
            "leader_epoch": info.leader_epoch, "partition_epoch": info.partition_epoch}


def encode_records(records: list[dict]) -> bytearray:
    return build_batch([(None, json.dumps(r, sort_keys=True).encode()) for r in records],
                       int(time.time() * 1000))


def decode_records(data: bytes) -> list[tuple[int, dict]]:
    """(offset, record) for every record in whole uncompressed batches of ``data``."""
    out = []
    for header in iter_batches(data, allow_partial_tail=True):
        batch, _ = read_batch(data, header.position)
        out += [(record.offset, json.loads(record.value)) for record in batch.records]
    return out


class MetadataLog:
    """The controller's copy of ``__cluster_metadata-0``."""

    def __init__(self, directory: Path) -> None:
        config = LogConfig(retention_ms=-1, segment_bytes=64 << 20)
        self.log = ClassicLog(METADATA_TOPIC, 0, config, directory / f"{METADATA_TOPIC}-0")

    async def load(self) -> list[tuple[int, dict]]:
        records = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            chunk = await self.log.read(offset, 1 << 20)
            decoded = decode_records(chunk.records)
            records += [(o, r) for o, r in decoded if o >= offset]
            offset = decoded[-1][0] + 1
        return records

    async def append(self, records: list[dict], leader_epoch: int = 0) -> int:
        """Append and fsync; return the offset of the first record."""
        data = encode_records(records)
        batches = list(iter_batches(data))
        result = await self.log.append(data, batches, leader_epoch)
        await self.log.flush()
        return result.base_offset
