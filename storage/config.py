"""Topic-level log configuration: the names, defaults and validation Kafka users know.

One table serves CreateTopics validation, DescribeConfigs, the engines, and the topic-config
tables of the docs (python -m broker.config_docs --write).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

STORAGE_MODES = ("classic", "active-tiered", "diskless", "shared")
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


def _double(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not a number") from None
        if not lo <= value <= hi:
            raise InvalidConfig(f"{value} is not in [{lo}, {hi}]")
        return value
    return parse


def _cleanup_policy(raw: str) -> frozenset[str]:
    """Kafka's list: ``delete``, ``compact`` or both (``compact,delete``); empty = neither."""
    policies = frozenset(p.strip() for p in raw.split(",") if p.strip())
    unknown = policies - {"delete", "compact"}
    if unknown:
        raise InvalidConfig(f"{', '.join(sorted(unknown))} is not one of delete, compact")
    return policies


def _replica_list(raw: str) -> str:
    """Kafka's throttled-replicas list: ``*``, empty, or ``partition:broker`` pairs."""
    if raw.strip() in ("", "*"):
        return raw.strip()
    for item in raw.split(","):
        partition, _, broker = item.strip().partition(":")
        if not (partition.isdigit() and broker.isdigit()):
            raise InvalidConfig(f"{item.strip()!r} is not partition:broker")
    return raw


COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConfigDef:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str
    # Kafka's ConfigDef type, as DescribeConfigs reports it: boolean, string, int, short,
    # long, double, list, class or password.
    kind: str = "string"


TOPIC_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("kipper.storage.mode", "classic", _choice(*STORAGE_MODES),
              "Storage engine of the topic: classic, active-tiered, diskless or shared (the last "
              "three need brokers with an S3 endpoint); a live topic switches between classic "
              "and diskless (docs/mode-switch.md)"),
    ConfigDef("cleanup.policy", "delete", _cleanup_policy,
              "delete: old segments are deleted by retention; compact: the log cleaner keeps "
              "the latest record of each key; compact,delete: both", "list"),
    ConfigDef("min.cleanable.dirty.ratio", "0.5", _double(0, 1),
              "Compacted topics: the cleaner cleans a log once this share of it is uncleaned",
              "double"),
    ConfigDef("min.compaction.lag.ms", "0", _int(0),
              "Compacted topics: a record stays uncompacted at least this long", "long"),
    ConfigDef("max.compaction.lag.ms", str(LONG_MAX), _int(1),
              "Compacted topics: a record is eligible for compaction at most this long after "
              "it was written, whatever the dirty ratio", "long"),
    ConfigDef("delete.retention.ms", str(24 * 3600 * 1000), _int(0),
              "Compacted topics: tombstones (null values) are kept this long after the "
              "cleaner reached them, so consumers see deletes", "long"),
    ConfigDef("compression.type", "producer", _choice(*COMPRESSION_TYPES),
              "Codec the broker stores batches with: producer keeps the producer's; "
              "uncompressed, gzip, snappy, lz4 or zstd recompress batches that differ"),
    ConfigDef("compression.gzip.level", "-1", _int(-1),
              "gzip level when compression.type=gzip (1-9; -1 = the codec's default)", "int"),
    ConfigDef("compression.lz4.level", "9", _int(1),
              "lz4 level when compression.type=lz4 (1-17)", "int"),
    ConfigDef("compression.zstd.level", "3", _int(-131072),
              "zstd level when compression.type=zstd (-131072 to 22)", "int"),
    ConfigDef("retention.ms", str(7 * 24 * 3600 * 1000), _int(-1),
              "Batches older than this are deleted; -1 = forever", "long"),
    ConfigDef("retention.bytes", "-1", _int(-1),
              "Oldest batches are deleted while a partition holds more; -1 = unbounded",
              "long"),
    ConfigDef("segment.bytes", str(1 << 30), _int(14),
              "A segment this large is closed and a new one started", "int"),
    ConfigDef("segment.ms", str(7 * 24 * 3600 * 1000), _int(1),
              "A segment this old is closed and a new one started", "long"),
    ConfigDef("segment.index.bytes", str(10 << 20), _int(8),
              "Largest offset or time index file of a segment", "int"),
    ConfigDef("index.interval.bytes", "4096", _int(0),
              "Bytes of log between two offset index entries", "int"),
    ConfigDef("message.timestamp.type", "CreateTime", _choice("CreateTime", "LogAppendTime"),
              "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append"),
    ConfigDef("max.message.bytes", str(1048588), _int(0), "Largest record batch accepted",
              "int"),
    ConfigDef("min.insync.replicas", "1", _int(1),
              "In-sync replicas needed to accept acks=all produce", "int"),
    ConfigDef("flush.messages", str(LONG_MAX), _int(1),
              "Messages appended between two fsyncs of a local log", "long"),
    ConfigDef("flush.ms", str(LONG_MAX), _int(0),
              "Milliseconds between two fsyncs of a local log", "long"),
    ConfigDef("unclean.leader.election.enable", "false", _choice("true", "false"),
              "Elect an out-of-sync replica when no in-sync one is alive (may lose acked data)",
              "boolean"),
    ConfigDef("file.delete.delay.ms", "60000", _int(0),
              "Delay between removing a segment from the log and deleting its files", "long"),
    ConfigDef("leader.replication.throttled.replicas", "", _replica_list,
              "Replicas (partition:broker, or *) whose leader-side replication is throttled "
              "by the broker's leader.replication.throttled.rate (set during reassignment)",
              "list"),
    ConfigDef("follower.replication.throttled.replicas", "", _replica_list,
              "Replicas (partition:broker, or *) whose follower-side replication is "
              "throttled by the broker's follower.replication.throttled.rate", "list"),
    ConfigDef("active.tiered.metadata.scheme", "topic", _choice(*WAL_METADATA_SCHEMES),
              "Active-tiered: how followers learn of uploaded WAL objects: topic (the "
              "`__remote_wal_log_metadata` topic), fetch (the leader's fetch responses, refs "
              "kept in a file) or memory (likewise, refs kept in the leader's memory only)"),
    ConfigDef("active.tiered.ack.on.upload", "false", _choice("true", "false"),
              "Active-tiered: acks=all completes once the data is uploaded, before followers have "
              "it (weaker: a single-AZ bucket outage plus a leader loss loses acked data)",
              "boolean"),
    ConfigDef("active.tiered.wal.retention.ms", str(5 * 60 * 1000), _int(0),
              "Active-tiered: WAL objects not yet held by every in-sync replica are deleted "
              "once this old", "long"),
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
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX  # never: the default, as in Kafka
    unclean_leader_election: bool = False
    file_delete_delay_ms: int = 60000
    wal_metadata_scheme: str = "topic"
    ack_on_upload: bool = False
    wal_retention_ms: int = 5 * 60 * 1000
    # cleanup.policy: retention deletes old data (delete) and/or the cleaner keeps the
    # latest record per key (compact).
    delete_policy: bool = True
    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 24 * 3600 * 1000
    # compression.type and the level of the codec it names (None: the codec's default).
    compression_type: str = "producer"
    compression_level: int | None = None
    leader_throttled_replicas: str = ""
    follower_throttled_replicas: str = ""
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
            delete_policy="delete" in value["cleanup.policy"],
            compact="compact" in value["cleanup.policy"],
            min_cleanable_dirty_ratio=value["min.cleanable.dirty.ratio"],
            min_compaction_lag_ms=value["min.compaction.lag.ms"],
            max_compaction_lag_ms=value["max.compaction.lag.ms"],
            delete_retention_ms=value["delete.retention.ms"],
            compression_type=value["compression.type"],
            compression_level=_compression_level(value),
            leader_throttled_replicas=value["leader.replication.throttled.replicas"],
            follower_throttled_replicas=value["follower.replication.throttled.replicas"],
            explicit=dict(explicit),
        )


def _compression_level(value: dict[str, object]) -> int | None:
    codec = value["compression.type"]
    level = value.get(f"compression.{codec}.level")
    return None if level is None or level == -1 else int(level)
