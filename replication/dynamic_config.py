"""The effective broker configs of this node and the topic defaults they make: the one place
the rest of the broker reads them from.

Precedence (KIP-226): this broker's dynamic configs (resource "<node id>") > the cluster-wide
dynamic default (resource "") > the node's static settings > Kafka's defaults. Dynamic configs
live in the metadata image (``MetadataImage.broker_configs``), so a change is seen by every
broker once it has applied the ``broker_config`` record, and replayed after a restart.

Within one level a lower-precedence synonym stands in for an unset config
(log.retention.hours for log.retention.ms); across levels the more specific level wins, so
what DescribeConfigs reports as a value's source is the synonym the value came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.config import TOPIC_CONFIGS, LogConfig

from .broker_configs import (
    BROKER_CONFIGS,
    TOPIC_SYNONYMS,
    ConfigSource,
    synonym_chain,
)
from .cluster_metadata import MetadataImage, TopicInfo

KAFKA_DEFAULTS = {name: d.default for name, d in BROKER_CONFIGS.items() if d.default is not None}


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class DescribedConfig:
    """One config as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    # Where the value could come from, highest precedence first (the first is the source).
    synonyms: tuple[ConfigSynonym, ...]
    read_only: bool
    sensitive: bool
    kind: str
    doc: str


class DynamicConfigs:
    def __init__(self, node_id: int, image: MetadataImage, static: dict[str, str],
                 static_topic_defaults: dict[str, str]) -> None:
        """``static``: the node's settings by Kafka broker config name; ``static_topic_
        defaults``: static defaults of topic configs that have no broker config name."""
        self.node_id = node_id
        self.image = image
        self.static = static
        self.static_topic_defaults = static_topic_defaults
        # Called after a dynamic broker config changed (effective values may differ).
        self.listeners: list[Callable[[], None]] = []
        # Computed once per change of the dynamic broker configs, not for every partition
        # of a topic created with thousands: topic_defaults(), and each topic's LogConfig
        # with the configs dict it was made from (a config record replaces that dict).
        self._topic_defaults: dict[str, str] | None = None
        self._log_configs: dict[str, tuple[dict[str, str], LogConfig]] = {}

    def on_metadata_record(self, record: dict) -> None:
        """Called after ``record`` was applied to the image."""
        if record["type"] == "broker_config" and record["resource"] in ("", str(self.node_id)):
            self._topic_defaults = None
            self._log_configs.clear()
            for listener in self.listeners:
                listener()
        elif record["type"] == "remove_topic":
            self._log_configs.pop(record["name"], None)

    # --- effective values ------------------------------------------------------------------

    def _levels(self) -> list[tuple[dict[str, str], ConfigSource]]:
        return [(self.image.broker_configs.get(str(self.node_id), {}),
                 ConfigSource.DYNAMIC_BROKER_CONFIG),
                (self.image.broker_configs.get("", {}), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                (self.static, ConfigSource.STATIC_BROKER_CONFIG),
                (KAFKA_DEFAULTS, ConfigSource.DEFAULT_CONFIG)]

    def synonyms(self, names: list[str]) -> list[ConfigSynonym]:
        """Every value given to one of ``names``, by level, then in the order of ``names``."""
        return [ConfigSynonym(name, values[name], source)
                for values, source in self._levels() for name in names if name in values]

    def broker_value(self, name: str) -> str | None:
        """The effective value of the broker config ``name`` (e.g. log.cleaner.threads)."""
        found = self.synonyms([name])
        return found[0].value if found else None

    def broker_number(self, name: str) -> float:
        """A numeric broker config, typed (log.cleaner.io.max.bytes.per.second,
        leader.replication.throttled.rate, ...)."""
        return BROKER_CONFIGS[name].parse(self.broker_value(name))

    def _topic_default(self, topic_config: str) -> ConfigSynonym | None:
        chain = TOPIC_SYNONYMS.get(topic_config)
        found = self.synonyms([d.name for d in chain]) if chain else []
        if found:
            return found[0]
        if topic_config in self.static_topic_defaults:
            return ConfigSynonym(topic_config, self.static_topic_defaults[topic_config],
                                 ConfigSource.STATIC_BROKER_CONFIG)
        return None

    def topic_defaults(self) -> dict[str, str]:
        """The effective default of every topic config on this node (shared: not to be
        changed)."""
        if self._topic_defaults is None:
            defaults = {}
            for name, definition in TOPIC_CONFIGS.items():
                synonym = self._topic_default(name)
                defaults[name] = (definition.default if synonym is None
                                  else self._as_topic_value(synonym))
            self._topic_defaults = defaults
        return self._topic_defaults

    @staticmethod
    def _as_topic_value(synonym: ConfigSynonym) -> str:
        definition = BROKER_CONFIGS.get(synonym.name)
        return synonym.value if definition is None else definition.to_topic_value(synonym.value)

    def log_config(self, topic: TopicInfo) -> LogConfig:
        """The effective configs of ``topic`` on this node."""
        cached = self._log_configs.get(topic.name)
        if cached is None or cached[0] is not topic.configs:
            cached = (topic.configs,
                      LogConfig.from_topic_configs(topic.configs, self.topic_defaults()))
            if self.image.topics.get(topic.name) is topic:  # not a deleted topic's, for good
                self._log_configs[topic.name] = cached
        return cached[1]

    # --- DescribeConfigs -------------------------------------------------------------------

    def describe_topic(self, topic: TopicInfo) -> list[DescribedConfig]:
        described = []
        defaults = self.topic_defaults()
        for name, definition in TOPIC_CONFIGS.items():
            chain = TOPIC_SYNONYMS.get(name)
            synonyms = self.synonyms([d.name for d in chain]) if chain else []
            if not synonyms and name in self.static_topic_defaults:
                synonyms = [self._topic_default(name)]
            if name in topic.configs:
                synonyms.insert(0, ConfigSynonym(name, topic.configs[name],
                                                 ConfigSource.TOPIC_CONFIG))
            sensitive = definition.kind == "password"
            value = topic.configs.get(name, defaults[name])
            described.append(DescribedConfig(
                name, None if sensitive else value,
                synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                _hidden(synonyms, sensitive), read_only=False, sensitive=sensitive,
                kind=definition.kind, doc=definition.doc))
        return described

    def describe_broker(self) -> list[DescribedConfig]:
        """This broker's configs (resource "<node id>"), each at its effective level."""
        return [self._describe_broker_config(name, self.synonyms(synonym_chain(name)))
                for name in BROKER_CONFIGS]

    def describe_cluster_default(self) -> list[DescribedConfig]:
        """The cluster-wide dynamic configs (resource ""): only those set."""
        described = []
        for name in self.image.broker_configs.get("", {}):
            synonyms = [s for s in self.synonyms(synonym_chain(name))
                        if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
            described.append(self._describe_broker_config(name, synonyms))
        return described

    @staticmethod
    def _describe_broker_config(name: str, synonyms: list[ConfigSynonym]) -> DescribedConfig:
        definition = BROKER_CONFIGS[name]
        own = [s for s in synonyms if s.name == name]
        value = own[0].value if own else None
        return DescribedConfig(
            name, None if definition.sensitive else value,
            own[0].source if own else ConfigSource.DEFAULT_CONFIG,
            _hidden(synonyms, definition.sensitive), read_only=not definition.dynamic,
            sensitive=definition.sensitive, kind=definition.kind, doc=definition.doc)


def _hidden(synonyms: list[ConfigSynonym], sensitive: bool) -> tuple[ConfigSynonym, ...]:
    """Synonyms as described: a sensitive config's values are never sent."""
    if not sensitive:
        return tuple(synonyms)
    return tuple(ConfigSynonym(s.name, None, s.source) for s in synonyms)
