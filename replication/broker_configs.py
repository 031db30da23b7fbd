"""Broker configs by Kafka's names: which may change at runtime (KIP-226 dynamic broker
configs), their defaults, types, and the topic config each one is the broker-wide default of
(Kafka's ServerTopicConfigSynonyms).

The controller validates dynamic changes against this table, DynamicConfigs
(replication.dynamic_config) resolves the effective values from it, and DescribeConfigs
describes from it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from storage.config import LONG_MAX, TOPIC_CONFIGS, InvalidConfig

HOUR_MS = 3600 * 1000
MINUTE_MS = 60 * 1000


class ConfigSource(enum.IntEnum):
    """Where a described value comes from (DescribeConfigs ``config_source``)."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


@dataclass(frozen=True)
class BrokerConfigDef:
    name: str
    # Kafka's default; None when unset by default (a lower synonym gives the value, as
    # log.retention.hours does for log.retention.ms).
    default: str | None
    kind: str
    doc: str
    dynamic: bool = False
    # The topic config this broker config is the default of, and what one unit of this
    # config is in the topic config's unit (log.retention.hours -> retention.ms: 3600000).
    topic_config: str | None = None
    unit: int = 1

    @property
    def sensitive(self) -> bool:
        return self.kind == "password"

    def parse(self, raw: str) -> object:
        """The typed value; raises InvalidConfig naming the bad value."""
        if self.topic_config is not None:
            return TOPIC_CONFIGS[self.topic_config].parse(self.to_topic_value(raw))
        return parse_kind(self.kind, raw)

    def to_topic_value(self, raw: str) -> str:
        if self.unit == 1:
            return raw
        try:
            return str(int(raw) * self.unit)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not an integer") from None


def parse_kind(kind: str, raw: str) -> object:
    if kind in ("int", "short", "long"):
        try:
            return int(raw)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not an integer") from None
    if kind == "double":
        try:
            value = float(raw)
        except ValueError:
            raise InvalidConfig(f"{raw!r} is not a number") from None
        if math.isnan(value) or value < 0:
            raise InvalidConfig(f"{raw!r} is not a positive number")
        return value
    if kind == "boolean":
        if raw.lower() not in ("true", "false"):
            raise InvalidConfig(f"{raw!r} is not true or false")
        return raw.lower() == "true"
    return raw


def _topic_default(broker_name: str, topic_name: str, unit: int = 1,
                   unset: bool = False) -> BrokerConfigDef:
    """The broker-wide default of a topic config, documented and typed as the topic config."""
    topic = TOPIC_CONFIGS[topic_name]
    default = None if unset else str(int(topic.default) // unit) if unit != 1 else topic.default
    unit_note = "" if unit == 1 else f" (in {'hours' if unit == HOUR_MS else 'minutes'})"
    kind = "int" if unit != 1 else topic.kind
    return BrokerConfigDef(broker_name, default, kind,
                           f"Default of the topic config {topic_name}{unit_note}: {topic.doc}",
                           dynamic=True, topic_config=topic_name, unit=unit)


def _static(name: str, kind: str, doc: str) -> BrokerConfigDef:
    """A read-only broker config: its value is the node's setting (broker.static_configs)."""
    return BrokerConfigDef(name, None, kind, doc)


BROKER_CONFIGS: dict[str, BrokerConfigDef] = {d.name: d for d in (
    # The topic config defaults; a list of synonyms is in precedence order (log.retention.ms
    # before .minutes before .hours), as Kafka reads them.
    _topic_default("log.cleanup.policy", "cleanup.policy"),
    _topic_default("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio"),
    _topic_default("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    _topic_default("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    _topic_default("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    _topic_default("compression.type", "compression.type"),
    _topic_default("compression.gzip.level", "compression.gzip.level"),
    _topic_default("compression.lz4.level", "compression.lz4.level"),
    _topic_default("compression.zstd.level", "compression.zstd.level"),
    _topic_default("log.retention.ms", "retention.ms", unset=True),
    _topic_default("log.retention.minutes", "retention.ms", MINUTE_MS, unset=True),
    _topic_default("log.retention.hours", "retention.ms", HOUR_MS),
    _topic_default("log.retention.bytes", "retention.bytes"),
    _topic_default("log.segment.bytes", "segment.bytes"),
    _topic_default("log.roll.ms", "segment.ms", unset=True),
    _topic_default("log.roll.hours", "segment.ms", HOUR_MS),
    _topic_default("log.index.size.max.bytes", "segment.index.bytes"),
    _topic_default("log.index.interval.bytes", "index.interval.bytes"),
    _topic_default("log.message.timestamp.type", "message.timestamp.type"),
    _topic_default("message.max.bytes", "max.message.bytes"),
    _topic_default("min.insync.replicas", "min.insync.replicas"),
    _topic_default("log.flush.interval.messages", "flush.messages"),
    _topic_default("log.flush.interval.ms", "flush.ms"),
    _topic_default("unclean.leader.election.enable", "unclean.leader.election.enable"),
    _topic_default("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    # Fixed at startup (a topic's storage mode is fixed at its creation).
    BrokerConfigDef("kipper.default.storage.mode", "classic", "string",
                    "kipper.storage.mode of topics created without one",
                    topic_config="kipper.storage.mode"),
    # Broker-level dynamic configs other parts read (DynamicConfigs.broker_value).
    BrokerConfigDef("log.cleaner.io.max.bytes.per.second", repr(1.7976931348623157e308),
                    "double", "Bytes per second the log cleaner reads and writes at most",
                    dynamic=True),
    BrokerConfigDef("leader.replication.throttled.rate", str(LONG_MAX), "long",
                    "Bytes per second a leader sends at most to the throttled replicas of "
                    "leader.replication.throttled.replicas", dynamic=True),
    BrokerConfigDef("follower.replication.throttled.rate", str(LONG_MAX), "long",
                    "Bytes per second a follower fetches at most for the throttled replicas "
                    "of follower.replication.throttled.replicas", dynamic=True),
    # Read-only: the node's settings (broker/config.py), under Kafka's names.
    _static("broker.id", "int", "Id of this node"),
    _static("broker.rack", "string", "Availability zone of this node"),
    _static("log.dirs", "string", "Directory of this node's logs"),
    _static("auto.create.topics.enable", "boolean", "Create unknown topics named in Metadata"),
    _static("num.partitions", "int", "Partition count of topics created without one"),
    _static("default.replication.factor", "int",
            "Replication factor of topics created without one"),
    _static("socket.request.max.bytes", "int", "Largest request frame accepted"),
    _static("connections.max.idle.ms", "long", "Idle client connections are closed after this"),
    _static("fetch.max.bytes", "int", "Most record bytes of one Fetch response"),
    _static("replica.lag.time.max.ms", "long",
            "A follower not caught up for this long leaves the ISR"),
    _static("log.retention.check.interval.ms", "long",
            "How often retention.ms and retention.bytes are applied"),
    _static("transaction.max.timeout.ms", "int", "Longest transaction timeout allowed"),
    # Fixed at startup in kipper (Kafka updates producer.id.expiration.ms cluster-wide).
    _static("producer.id.expiration.ms", "int",
            "An idempotent producer idle this long without an open transaction is forgotten"),
    _static("producer.id.expiration.check.interval.ms", "int",
            "How often producer state is checked for expired producers"),
    _static("kipper.cluster.secret", "password",
            "Secret every node of the cluster proves it holds"),
    _static("kipper.s3.secret.key", "password", "Secret key of the object store"),
    # Fixed at startup in kipper (Kafka resizes its cleaner threads live).
    _static("log.cleaner.threads", "int", "Threads of the log cleaner"),
    _static("log.cleaner.dedupe.buffer.size", "long", "Memory of the cleaner's key maps"),
    _static("log.cleaner.backoff.ms", "long", "Sleep of a cleaner with no log to clean"),
    _static("auto.leader.rebalance.enable", "boolean",
            "Move leaderships back to preferred replicas"),
    _static("leader.imbalance.per.broker.percentage", "int",
            "Share of a broker's preferred leaderships elsewhere that triggers rebalancing"),
    _static("leader.imbalance.check.interval.seconds", "long",
            "How often the leader imbalance is checked"),
    _static("listeners", "list", "Named endpoints this node listens on"),
    _static("advertised.listeners", "list", "Endpoints clients are told, per listener name"),
    _static("listener.security.protocol.map", "list", "Security protocol of each listener"),
    _static("inter.broker.listener.name", "string", "The listener nodes connect to each other on"),
    _static("ssl.keystore.location", "string", "PEM key and certificate of TLS listeners"),
    _static("ssl.key.password", "password", "Password of the TLS private key"),
    _static("ssl.truststore.location", "string", "PEM CA certificates trusted for clients"),
    _static("ssl.client.auth", "string", "Whether TLS clients must present a certificate"),
    _static("ssl.enabled.protocols", "list", "TLS versions accepted"),
    _static("ssl.principal.mapping.rules", "string",
            "How a client certificate's subject becomes a principal"),
    _static("sasl.enabled.mechanisms", "list", "SASL mechanisms offered"),
    _static("sasl.mechanism.inter.broker.protocol", "string",
            "SASL mechanism nodes log in to each other with"),
    _static("kipper.inter.broker.sasl.password", "password",
            "Password nodes log in to each other with"),
    _static("connections.max.reauth.ms", "long",
            "Longest session before a SASL client must re-authenticate (0: never)"),
    _static("authorizer.class.name", "class", "The authorizer (empty: none, all allowed)"),
    _static("super.users", "list", "Principals allowed everything"),
    _static("allow.everyone.if.no.acl.found", "boolean",
            "Allow an operation on a resource no ACL names"),
)}


def topic_synonyms() -> dict[str, list[BrokerConfigDef]]:
    """Each topic config's broker synonyms, highest precedence first."""
    synonyms: dict[str, list[BrokerConfigDef]] = {}
    for definition in BROKER_CONFIGS.values():
        if definition.topic_config is not None:
            synonyms.setdefault(definition.topic_config, []).append(definition)
    return synonyms


TOPIC_SYNONYMS = topic_synonyms()


def synonym_chain(name: str) -> list[str]:
    """``name`` and the lower-precedence names that stand in for it (log.retention.ms:
    .minutes, .hours), as Kafka lists a broker config's synonyms."""
    definition = BROKER_CONFIGS.get(name)
    if definition is None or definition.topic_config is None:
        return [name]
    chain = [d.name for d in TOPIC_SYNONYMS[definition.topic_config]]
    return chain[chain.index(name):]


def validate_broker_configs(configs: dict[str, str | None]) -> None:
    """Raise InvalidConfig unless every entry is a known dynamic broker config with a valid
    value (what a BROKER resource may be set to); a None value checks the name only."""
    unknown = sorted(name for name in configs if name not in BROKER_CONFIGS)
    if unknown:
        raise InvalidConfig(f"Unknown broker config name: {', '.join(unknown)}")
    static = sorted(name for name in configs if not BROKER_CONFIGS[name].dynamic)
    if static:
        raise InvalidConfig(f"Cannot update these configs dynamically: {', '.join(static)}")
    for name, raw in configs.items():
        if raw is None:
            continue
        try:
            BROKER_CONFIGS[name].parse(raw)
        except InvalidConfig as e:
            raise InvalidConfig(f"Invalid value {raw!r} for configuration {name}: {e}") from None
