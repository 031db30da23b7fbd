"""Topic-level log configuration: the names, defaults and validation Kafka users know.

One table serves CreateTopics validation, DescribeConfigs, the engines, and the topic-config
tables of the docs (python -m broker.config_docs --write).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

STORAGE_MODES = ("classic", "active-tiered", "diskless")
WAL_METADATA_SCHEMES = ("topic", "fetch", "memory")


class InvalidConfig(ValueError):
    """A topic config value Kafka would reject with INVALID_CONFIG."""


def _int(lo: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not an integer") from None
        if lo is not None and value < lo:
            raise InvalidConfig(f"{value} is below the minimum {lo}")
        return value
    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in allowed:
            raise InvalidConfig(f"{raw!r} is not one of {', '.join(allowed)}")
        return raw
    return parse


def _cleanup_policy(raw: str) -> str:
    if raw != "delete":
        raise InvalidConfig(
            f"cleanup.policy={raw!r} is not supported by kipper yet: only 'delete' "
            "(log compaction is not implemented)"
        )
    return raw


@dataclass(frozen=True)
class ConfigDef:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str


TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("kipper.storage.mode", "classic", _choice(*STORAGE_MODES),
              "Storage engine of the topic: classic, active-tiered or diskless (the last two need "
              "brokers with an S3 endpoint); fixed at creation"),
    ConfigDef("cleanup.policy", "delete", _cleanup_policy,
              "Only delete: log compaction is not implemented"),
    ConfigDef("retention.ms", str(7 * 24 * 3600 * 1000), _int(-1),
              "Batches older than this are deleted; -1 = forever"),
    ConfigDef("retention.bytes", "-1", _int(-1),
              "Oldest batches are deleted while a partition holds more; -1 = unbounded"),
    ConfigDef("segment.bytes", str(1 << 30), _int(14),
              "A segment this large is closed and a new one started"),
    ConfigDef("segment.ms", str(7 * 24 * 3600 * 1000), _int(1),
              "A segment this old is closed and a new one started"),
    ConfigDef("segment.index.bytes", str(10 << 20), _int(8),
              "Largest offset or time index file of a segment"),
    ConfigDef("index.interval.bytes", "4096", _int(0),
              "Bytes of log between two offset index entries"),
    ConfigDef("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append"),
    ConfigDef("max.message.bytes", str(1048588), _int(0), "Largest record batch accepted"),
    ConfigDef("min.insync.replicas", "1", _int(1),
              "In-sync replicas needed to accept acks=all produce"),
    ConfigDef("flush.messages", str(2**63 - 1), _int(1),
              "Messages appended between two fsyncs of a local log"),
    ConfigDef("flush.ms", str(2**63 - 1), _int(0),
              "Milliseconds between two fsyncs of a local log"),
    ConfigDef("unclean.leader.election.enable", "false", _choice("true", "false"),
              "Elect an out-of-sync replica when no in-sync one is alive (may lose acked data)"),
    ConfigDef("file.delete.delay.ms", "60000", _int(0),
              "Delay between removing a segment from the log and deleting its files"),
    ConfigDef("active.tiered.metadata.scheme", "topic", _choice(*WAL_METADATA_SCHEMES),
              "Active-tiered: how followers learn of uploaded WAL objects: topic (the "
              "`__remote_wal_log_metadata` topic), fetch (the leader's fetch responses, refs "
              "kept in a file) or memory (likewise, refs kept in the leader's memory only)"),
    ConfigDef("active.tiered.ack.on.upload", "false", _choice("true", "false"),
              "Active-tiered: acks=all completes once the data is uploaded, before followers have "
              "it (weaker: a single-AZ bucket outage plus a leader loss loses acked data)"),
    ConfigDef("active.tiered.wal.retention.ms", str(5 * 60 * 1000), _int(0),
              "Active-tiered: WAL objects not yet held by every in-sync replica are deleted "
              "once this old"),
)}


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Return the explicit configs, normalised; raise InvalidConfig naming the bad key."""
    clean: dict[str, str] = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if raw is None:
            continue
        try:
            definition.parse(raw)
        except InvalidConfig as e:
            raise InvalidConfig(f"Invalid value {raw!r} for configuration {name}: {e}") from None
        clean[name] = raw
    return clean


@dataclass(frozen=True)
class LogConfig:
    """Typed view of a topic's effective configs, as the engines use them."""

    storage_mode: str = "classic"
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 << 20
    index_interval_bytes: int = 4096
    log_append_time: bool = False
    max_message_bytes: int = 1048588
    min_insync_replicas: int = 1
    flush_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    unclean_leader_election: bool = False
    file_delete_delay_ms: int = 60000
    wal_metadata_scheme: str = "topic"
    ack_on_upload: bool = False
    wal_retention_ms: int = 5 * 60 * 1000
    explicit: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_topic_configs(cls, explicit: dict[str, str],
                           broker_defaults: dict[str, str] | None = None) -> "LogConfig":
        merged = {name: d.default for name, d in TOPIC_CONFIGS.items()}
        merged.update(broker_defaults or {})
        merged.update(explicit)
        value = {name: TOPIC_CONFIGS[name].parse(raw) for name, raw in merged.items()}
        return cls(
            storage_mode=value["kipper.storage.mode"],
            retention_ms=value["retention.ms"],
            retention_bytes=value["retention.bytes"],
            segment_bytes=value["segment.bytes"],
            segment_ms=value["segment.ms"],
            segment_index_bytes=value["segment.index.bytes"],
            index_interval_bytes=value["index.interval.bytes"],
            log_append_time=value["message.timestamp.type"] == "LogAppendTime",
            max_message_bytes=value["max.message.bytes"],
            min_insync_replicas=value["min.insync.replicas"],
            flush_messages=value["flush.messages"],
            flush_ms=value["flush.ms"],
            unclean_leader_election=value["unclean.leader.election.enable"] == "true",
            file_delete_delay_ms=value["file.delete.delay.ms"],
            wal_metadata_scheme=value["active.tiered.metadata.scheme"],
            ack_on_upload=value["active.tiered.ack.on.upload"] == "true",
            wal_retention_ms=value["active.tiered.wal.retention.ms"],
            explicit=dict(explicit),
        )
