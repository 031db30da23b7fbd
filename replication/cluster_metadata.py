"""Cluster metadata as every node sees it: the records the controller writes and the image
they are replayed into.

As in KRaft, the state is a log of small records replayed into an in-memory image; the
controller (coordinator.controller) appends them to ``__cluster_metadata-0`` and every broker
applies the same records (broker.metadata_follower). The replica layer reads the image to
learn which partitions it leads or follows, so the image lives here, below the coordinators.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from .acls import (ACL_RECORD, REMOVE_ACL_RECORD, Authorizer, binding_from_record,
                   remove_acl_record)
from storage.shared import SHARED_STREAM_RECORD, SharedStreams

from .loop_slice import LoopSlice
from .scram_credentials import ScramCredentials, ScramMechanism, credential_from_record

METADATA_TOPIC = "__cluster_metadata"
# The diskless batch coordinator's log (KIP-1164), a replicated classic topic.
DISKLESS_METADATA_TOPIC = "__diskless-metadata"
NO_LEADER = -1


@dataclass(frozen=True)
class StorageSpan:
    """From ``base_offset`` on (up to the next span's base), a partition's records are kept
    by the engine of ``mode`` (a live storage-mode switch, docs/mode-switch.md)."""

    mode: str
    base_offset: int


@dataclass
class PartitionInfo:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # A reassignment under way (KRaft's PartitionRecord): ``replicas`` holds the old and
    # the new replicas; these are the ones being added and those to remove once they
    # have caught up.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    # Live storage-mode switches (docs/mode-switch.md). ``spans``: the partition's chain of
    # storage spans, oldest first; empty for a partition never switched (one span, of the
    # topic's kipper.storage.mode, from offset 0). ``switch_to``: the mode a switch under way
    # moves it to; while set, the partition takes no appends (it is sealed) until its leader
    # has the boundary offset recorded as the base of a new span.
    spans: list[StorageSpan] = field(default_factory=list)
    switch_to: str | None = None

    def write_mode(self, topic_mode: str) -> str:
        """The storage mode appends go to: the newest span's (``topic_mode`` if none)."""
        return self.spans[-1].mode if self.spans else topic_mode

    def span_chain(self, topic_mode: str) -> list[StorageSpan]:
        return self.spans or [StorageSpan(topic_mode, 0)]

    def served_anywhere(self, topic_mode: str) -> bool:
        """Whether every broker can serve all of the partition (diskless, and no span of a
        leader-based mode left from a live switch): else clients are sent to its leader."""
        if not self.spans:  # (asked for each of thousands of partitions per Metadata)
            return topic_mode == "diskless"
        return all(span.mode == "diskless" for span in self.spans)


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str] = field(default_factory=dict)
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    # Changes applied to it (a partition record, its configs): what was worked out from it
    # (Metadata answers' entries, broker.metadata_entries) holds while this is unchanged.
    version: int = field(default=0, compare=False)


@dataclass
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    fenced: bool = False
    # Its data directory refuses appends (full): it leads nothing while another can.
    log_dir_offline: bool = False
    # Every advertised listener, name -> (host, port): a client is told the brokers'
    # endpoints of the listener it connected to. ``host``/``port`` are the inter-broker
    # listener's. Empty in records of kipper before listeners had names.
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)

    def endpoint(self, listener_name: str | None) -> tuple[str, int] | None:
        """Where a client of ``listener_name`` reaches this broker; None when the broker
        does not advertise that listener (Kafka leaves such a broker out of Metadata)."""
        if not self.listeners or listener_name is None:
            return self.host, self.port
        return self.listeners.get(listener_name)


@dataclass
class ImageSnapshot:
    """An image's state at one offset, taken at once and turned into records later, a slice
    of time at a time: a controller's image of 15,000 partitions took 15-185 ms to turn
    into records in one go. The partitions' entries are kept, not copied, as applying a
    record replaces an entry rather than changing it."""

    first: list[dict]
    topics: list[tuple[dict, list[PartitionInfo]]]  # each topic's record and partitions
    last: list[dict]

    def _records(self) -> Iterator[dict]:
        yield from self.first
        for topic, partitions in self.topics:
            yield topic
            yield from map(partition_record, partitions)
        yield from self.last

    def records(self) -> list[dict]:
        return list(self._records())

    async def records_in_turns(self, slice_s: float) -> list[dict]:
        """``records``, yielding to the event loop every ``slice_s``."""
        turns = LoopSlice(slice_s)
        records = []
        for record in self._records():
            records.append(record)
            await turns.pause()
        return records


class MetadataImage:
    """Topics, brokers and ACLs as of the last applied record."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        # Dynamic broker configs (IncrementalAlterConfigs/AlterConfigs of a BROKER
        # resource) by resource name, as Kafka names them: "" for the cluster-wide
        # default, "<node id>" for one broker.
        self.broker_configs: dict[str, dict[str, str]] = {}
        # Group configs (KIP-848/KIP-932; IncrementalAlterConfigs of a GROUP resource) by
        # group id: what is set on each group, which need not exist (as in Kafka).
        self.group_configs: dict[str, dict[str, str]] = {}
        # Users' SCRAM credentials (AlterUserScramCredentials), what SCRAM logins check.
        self.scram_credentials = ScramCredentials()
        # The ACLs (CreateAcls/DeleteAcls); the node's settings (super users, the answer
        # when no ACL names a resource) are set on it once by whoever serves requests.
        self.acls = Authorizer()
        # Shared partitions' streams (KIP-1183): which object holds which of their offsets.
        self.shared_streams = SharedStreams()
        # The first producer id the controller has not handed out (AllocateProducerIds).
        self.next_producer_id = 0
        # Offset of the next record to apply.
        self.next_offset = 0

    def snapshot(self) -> ImageSnapshot:
        """The image as of now, to be turned into a snapshot's records (later, if need be)."""
        first: list[dict] = []
        for broker in self.brokers.values():
            first.append(broker_record(broker))
            if broker.log_dir_offline:
                first.append({"type": "broker_log_dir", "node_id": broker.node_id,
                              "offline": True})
        for resource, configs in self.broker_configs.items():
            first.append({"type": "broker_config", "resource": resource, "configs": configs})
        for group, configs in self.group_configs.items():
            first.append(group_config_record(group, configs))
        first += [{"type": "scram_credential", **record}
                  for record in self.scram_credentials.to_records()]
        topics = [({"type": "topic", "name": topic.name, "id": str(topic.topic_id),
                    "configs": topic.configs}, list(topic.partitions.values()))
                  for topic in self.topics.values()]
        last = self.shared_streams.snapshot_records()
        if self.next_producer_id:
            last.append(producer_ids_record(self.next_producer_id))
        return ImageSnapshot(first, topics, last + self.acls.snapshot_records())

    def snapshot_records(self) -> list[dict]:
        """Records that rebuild this image in an empty one (a KIP-630 snapshot's content):
        what loading applies instead of the log up to ``next_offset``."""
        return self.snapshot().records()

    def checksum(self) -> str:
        """A digest of the state (not of how it was reached: a voter that loaded a snapshot
        and one that replayed the log agree), to compare voters' images."""
        lines = sorted(json.dumps(record, sort_keys=True) for record in self.snapshot_records())
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]

    def snapshot_delta(self, records: list[dict]) -> list[dict]:
        """What turns this image into the one ``records`` (snapshot_records) rebuild: the
        topics, group configs, SCRAM credentials and ACLs it no longer has are removed first (a
        lagging broker's image)."""
        kept = {record["name"] for record in records if record["type"] == "topic"}
        kept_groups = {record["group"] for record in records
                       if record["type"] == GROUP_CONFIG_RECORD}
        kept_credentials = {(record["name"], record["mechanism"]) for record in records
                            if record["type"] == "scram_credential"}
        kept_acls = {binding_from_record(record) for record in records
                     if record["type"] == ACL_RECORD}
        return ([{"type": "remove_topic", "name": name}
                 for name in self.topics if name not in kept]
                + [group_config_record(group, {}) for group in self.group_configs
                   if group not in kept_groups]
                + [{"type": "remove_scram_credential", "name": record["name"],
                    "mechanism": record["mechanism"]}
                   for record in self.scram_credentials.to_records()
                   if (record["name"], record["mechanism"]) not in kept_credentials]
                + [remove_acl_record(binding) for binding in self.acls.acls()
                   if binding not in kept_acls]
                + records)

    def live_brokers(self) -> list[BrokerInfo]:
        return sorted((b for b in self.brokers.values() if not b.fenced), key=lambda b: b.node_id)

    def apply(self, offset: int, record: dict) -> None:
        """Apply the record at ``offset`` of the metadata log (coordinator.state_machine)."""
        self._apply(record)
        self.next_offset = offset + 1

    def _apply(self, record: dict) -> None:
        kind = record["type"]
        if kind == "topic":
            topic = TopicInfo(record["name"], uuid.UUID(record["id"]), dict(record["configs"]))
            self.topics[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
        elif kind == "partition":
            topic = self.topics[record["topic"]]
            topic.version += 1
            topic.partitions[record["partition"]] = PartitionInfo(
                record["topic"], record["partition"], list(record["replicas"]),
                list(record["isr"]), record["leader"], record["leader_epoch"],
                record["partition_epoch"], list(record.get("adding_replicas", ())),
                list(record.get("removing_replicas", ())),
                [StorageSpan(mode, base) for mode, base in record.get("spans", ())],
                record.get("switch_to"))
        elif kind == "config":
            topic = self.topics[record["topic"]]
            topic.version += 1
            topic.configs = dict(record["configs"])
        elif kind == "broker_config":
            if record["configs"]:
                self.broker_configs[record["resource"]] = dict(record["configs"])
            else:
                self.broker_configs.pop(record["resource"], None)
        elif kind == GROUP_CONFIG_RECORD:
            if record["configs"]:
                self.group_configs[record["group"]] = dict(record["configs"])
            else:
                self.group_configs.pop(record["group"], None)
        elif kind == "remove_topic":
            topic = self.topics.pop(record["name"])
            self.topics_by_id.pop(topic.topic_id, None)
            self.shared_streams.remove_topic(topic.name)
        elif kind == "broker":
            self.brokers[record["node_id"]] = BrokerInfo(
                record["node_id"], record["host"], record["port"], record.get("rack"),
                # Registered brokers start fenced (older logs: unfenced at once).
                record["epoch"], fenced=record.get("fenced", False),
                listeners={name: (host, port)
                           for name, host, port in record.get("listeners", ())})
        elif kind == "fence_broker":
            self.brokers[record["node_id"]].fenced = True
        elif kind == "unfence_broker":
            self.brokers[record["node_id"]].fenced = False
        elif kind == "scram_credential":
            self.scram_credentials.upsert(*credential_from_record(record))
        elif kind == "remove_scram_credential":
            self.scram_credentials.delete(record["name"],
                                          ScramMechanism.from_type_id(record["mechanism"]))
        elif kind == "broker_log_dir":
            self.brokers[record["node_id"]].log_dir_offline = record["offline"]
        elif kind in (ACL_RECORD, REMOVE_ACL_RECORD):
            self.acls.apply(record)
        elif kind == SHARED_STREAM_RECORD:
            self.shared_streams.apply(record)
        elif kind == PRODUCER_IDS_RECORD:
            self.next_producer_id = record["next_producer_id"]
        elif kind == "leader_change":
            pass  # the quorum's (replication.raft): a new leader's first record
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")


GROUP_CONFIG_RECORD = "group_config"
# Kafka's ProducerIdsRecord: the controller handed out the producer ids below
# ``next_producer_id`` (the last block to the broker it names, when it names one).
PRODUCER_IDS_RECORD = "producer_ids"


def producer_ids_record(next_producer_id: int, broker_id: int | None = None,
                        broker_epoch: int | None = None) -> dict:
    record = {"type": PRODUCER_IDS_RECORD, "next_producer_id": next_producer_id}
    if broker_id is not None:
        record |= {"broker_id": broker_id, "broker_epoch": broker_epoch}
    return record


def group_config_record(group: str, configs: dict[str, str]) -> dict:
    """All the configs set on a group (Kafka's ConfigRecord of resource type GROUP, one per
    config); none: the group has no configs left."""
    return {"type": GROUP_CONFIG_RECORD, "group": group, "configs": configs}


def broker_record(broker: BrokerInfo) -> dict:
    """A broker's registration as the metadata log holds it."""
    record = {"type": "broker", "node_id": broker.node_id, "host": broker.host,
              "port": broker.port, "rack": broker.rack, "epoch": broker.epoch,
              "fenced": broker.fenced}
    if broker.listeners:  # older logs have none
        record["listeners"] = [[name, host, port]
                               for name, (host, port) in broker.listeners.items()]
    return record


def partition_record(info: PartitionInfo) -> dict:
    record = {"type": "partition", "topic": info.topic, "partition": info.partition,
              "replicas": info.replicas, "isr": info.isr, "leader": info.leader,
              "leader_epoch": info.leader_epoch, "partition_epoch": info.partition_epoch}
    if info.adding_replicas or info.removing_replicas:  # older logs have neither
        record["adding_replicas"] = info.adding_replicas
        record["removing_replicas"] = info.removing_replicas
    if info.spans:  # a partition never switched has none
        record["spans"] = [[span.mode, span.base_offset] for span in info.spans]
    if info.switch_to is not None:
        record["switch_to"] = info.switch_to
    return record
