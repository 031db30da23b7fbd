"""Effective configs: per-broker dynamic > cluster-wide dynamic > static > Kafka's default,
with Kafka's synonyms (log.retention.hours for retention.ms) and listeners told of changes."""

from __future__ import annotations

import uuid

from replication.broker_configs import ConfigSource
from replication.cluster_metadata import MetadataImage, TopicInfo
from replication.dynamic_config import ConfigSynonym, DynamicConfigs

# A dynamic broker config read live (by the log cleaner).
CLEANER_IO = "log.cleaner.io.max.bytes.per.second"
NODE = 1


def view(static: dict[str, str] | None = None) -> tuple[DynamicConfigs, MetadataImage]:
    image = MetadataImage()
    return DynamicConfigs(NODE, image, static or {}, {"active.tiered.ack.on.upload": "true"}), image


def set_dynamic(image: MetadataImage, configs: DynamicConfigs, resource: str,
                values: dict[str, str]) -> None:
    record = {"type": "broker_config", "resource": resource, "configs": values}
    image.apply(image.next_offset, record)
    configs.on_metadata_record(record)


def test_defaults_come_from_kafkas_synonyms_in_precedence_order():
    configs, image = view({"log.segment.bytes": "2000"})
    defaults = configs.topic_defaults()
    assert defaults["retention.ms"] == str(168 * 3600 * 1000)  # log.retention.hours
    assert defaults["segment.bytes"] == "2000"
    assert defaults["active.tiered.ack.on.upload"] == "true"
    changes = []
    configs.listeners.append(lambda: changes.append(1))

    set_dynamic(image, configs, "", {"log.retention.hours": "2", "log.segment.bytes": "3000"})
    assert configs.topic_defaults()["retention.ms"] == str(2 * 3600 * 1000)
    set_dynamic(image, configs, str(NODE), {"log.retention.minutes": "1"})
    assert configs.topic_defaults()["retention.ms"] == "60000"
    assert configs.topic_defaults()["segment.bytes"] == "3000"
    set_dynamic(image, configs, "7", {"log.retention.ms": "5"})  # another broker's
    assert configs.topic_defaults()["retention.ms"] == "60000"
    assert len(changes) == 2

    topic = TopicInfo("t", uuid.uuid4(), {"retention.ms": "10"})
    assert configs.log_config(topic).retention_ms == 10
    assert configs.log_config(topic).segment_bytes == 3000


def test_describe_reports_sources_and_synonyms_highest_first():
    configs, image = view({"log.retention.ms": "90000", "kipper.cluster.secret": "s"})
    set_dynamic(image, configs, "", {"log.retention.ms": "70000"})
    set_dynamic(image, configs, str(NODE), {CLEANER_IO: "3"})
    topic = TopicInfo("t", uuid.uuid4(), {"cleanup.policy": "compact"})
    described = {c.name: c for c in configs.describe_topic(topic)}
    retention = described["retention.ms"]
    assert (retention.value, retention.source) == ("70000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert retention.synonyms == (
        ConfigSynonym("log.retention.ms", "70000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ConfigSynonym("log.retention.ms", "90000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG))
    assert described["cleanup.policy"].source == ConfigSource.TOPIC_CONFIG
    assert described["cleanup.policy"].kind == "list"

    broker = {c.name: c for c in configs.describe_broker()}
    assert broker[CLEANER_IO].source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert not broker[CLEANER_IO].read_only
    assert broker["broker.id"].read_only
    assert broker["kipper.cluster.secret"].sensitive
    assert broker["kipper.cluster.secret"].value is None
    assert configs.broker_number(CLEANER_IO) == 3
    assert [c.name for c in configs.describe_cluster_default()] == ["log.retention.ms"]
