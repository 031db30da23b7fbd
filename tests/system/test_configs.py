"""Changing configs on a live cluster, in every storage mode, with real admin clients:
IncrementalAlterConfigs (confluent-kafka), AlterConfigs (kafka-python), DescribeConfigs with
sources and synonyms; dynamic broker configs, cluster-wide and per broker; validate_only; the
error codes of bad changes; configs kept across a restart. A changed compression.type applies
to the batches produced after it (the earlier ones keep their codec). A share group's
``share.auto.offset.reset`` (a KIP-932 group config) decides where that group starts."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigSource, ResourceType
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.compression import CODECS
from support.clients import consume_all
from support.configs import alter, describe
from support.raw import call, connect, entity, fetch_codecs
from support.share_groups import ShareMember, wait_for
from support.topics import create_topic
from support.wait import wait_until

pytestmark = pytest.mark.timeout(240)


def error_code(call) -> int:
    with pytest.raises(KafkaException) as refused:
        call()
    return refused.value.args[0].code()


def produce(bootstrap: str, topic: str, value: bytes, count: int = 1,
            codec: str = "none") -> list[KafkaError | None]:
    """Produce ``count`` records, each in its own batch; the delivery error of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all",
                         "compression.type": codec})
    outcomes: list[KafkaError | None] = []
    for _ in range(count):
        producer.produce(topic, value, on_delivery=lambda error, _: outcomes.append(error))
        producer.flush(30)
    return outcomes


def log_start(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "configs-watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        consumer.close()


def test_a_lowered_retention_ms_shrinks_a_live_log(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor,
                 config={"segment.bytes": "1024"})
    assert produce(bootstrap, topic_name, b"r" * 300, count=20) == [None] * 20
    assert log_start(bootstrap, topic_name) == 0
    time.sleep(1.5)
    alter(bootstrap, ResourceType.TOPIC, topic_name, retention_ms=(AlterConfigOpType.SET, "1000"))

    entry = describe(bootstrap, ResourceType.TOPIC, topic_name)["retention.ms"]
    assert (entry.value, entry.source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # Deleted at the next retention check (every 2 s in tests: support.processes).
    wait_until(lambda: log_start(bootstrap, topic_name) > 0, timeout=30, interval=0.5)


def test_max_message_bytes_changes_what_produce_accepts_at_once(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        def set_max(value: str) -> None:
            # Legacy AlterConfigs: the request's configs replace the topic's.
            result = admin.alter_configs([KpConfigResource(
                ConfigResourceType.TOPIC, topic_name, configs={"max.message.bytes": value})],
                incremental=False)
            assert result == {"topic": {topic_name: "OK"}}

        set_max("2000")
        [refused] = produce(bootstrap, topic_name, b"m" * 5000)
        assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE
        set_max("100000")
        assert produce(bootstrap, topic_name, b"m" * 5000) == [None]
    finally:
        admin.close()


def test_a_changed_compression_type_applies_to_later_batches(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    value = b"compressible " * 40
    assert produce(bootstrap, topic_name, value, count=3, codec="lz4") == [None] * 3
    alter(bootstrap, ResourceType.TOPIC, topic_name,
          compression_type=(AlterConfigOpType.SET, "zstd"))
    assert produce(bootstrap, topic_name, value, count=3, codec="lz4") == [None] * 3
    # The batches stored before the change keep the producer's codec.
    assert fetch_codecs(bootstrap, topic_name) == [CODECS["lz4"]] * 3 + [CODECS["zstd"]] * 3
    assert consume_all(bootstrap, topic_name, 6) == [value] * 6


def test_cleanup_policy_and_validate_only(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    alter(bootstrap, ResourceType.TOPIC, topic_name, validate_only=True,
          cleanup_policy=(AlterConfigOpType.SET, "compact"))
    assert describe(bootstrap, ResourceType.TOPIC, topic_name)["cleanup.policy"].value == "delete"
    alter(bootstrap, ResourceType.TOPIC, topic_name,
          cleanup_policy=(AlterConfigOpType.APPEND, "compact"))
    entry = describe(bootstrap, ResourceType.TOPIC, topic_name)["cleanup.policy"]
    assert (entry.value, entry.source) == ("delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_bad_changes_answer_kafkas_error_codes(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    assert error_code(lambda: alter(bootstrap, ResourceType.TOPIC, topic_name,
                                    no_such_config=(AlterConfigOpType.SET, "1"))) \
        == KafkaError.INVALID_CONFIG
    assert error_code(lambda: alter(bootstrap, ResourceType.TOPIC, topic_name,
                                    retention_ms=(AlterConfigOpType.SET, "soon"))) \
        == KafkaError.INVALID_CONFIG
    assert error_code(lambda: alter(bootstrap, ResourceType.TOPIC, topic_name,
                                    kipper_storage_mode=(AlterConfigOpType.SET, "other"))) \
        == KafkaError.INVALID_CONFIG
    assert error_code(lambda: alter(bootstrap, ResourceType.TOPIC, f"{topic_name}-missing",
                                    retention_ms=(AlterConfigOpType.SET, "1"))) \
        == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert error_code(lambda: alter(bootstrap, ResourceType.BROKER, "0",
                                    broker_id=(AlterConfigOpType.SET, "9"))) \
        == KafkaError.INVALID_CONFIG


def test_a_share_group_config_sets_where_that_group_starts(storage_mode, topic_name):
    """``share.auto.offset.reset=earliest`` set on one share group (IncrementalAlterConfigs
    of a GROUP, which need not exist yet): its member reads the records produced before it
    joined; a group without the config starts at the log end (the broker's ``latest``)."""
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    early, late = f"{topic_name}-early", f"{topic_name}-late"
    reset = "share.auto.offset.reset"
    for bad in ({"share_auto_offset_reset": (AlterConfigOpType.SET, "middle")},
                {"share_bananas": (AlterConfigOpType.SET, "1")}):
        assert error_code(lambda: alter(bootstrap, ResourceType.GROUP, early, **bad)) \
            == KafkaError.INVALID_CONFIG
    alter(bootstrap, ResourceType.GROUP, early,
          share_auto_offset_reset=(AlterConfigOpType.SET, "earliest"))
    described = describe(bootstrap, ResourceType.GROUP, early)[reset]
    assert (described.value, described.source) == ("earliest", ConfigSource.GROUP_CONFIG.value)
    described = describe(bootstrap, ResourceType.GROUP, late)[reset]
    assert (described.value, described.source) == ("latest", ConfigSource.DEFAULT_CONFIG.value)

    old = [None] * 5
    assert produce(bootstrap, topic_name, b"old", count=len(old)) == old
    members = [ShareMember(bootstrap, group, topic_name, group).start()
               for group in (early, late)]
    try:
        assert wait_for(lambda: members[0].values().count(b"old") == len(old), 30)
        # The late group starts where the log ends when it first fetches: it gets the
        # records produced from then on, never the old ones.
        def late_gets_a_new_record() -> bool:
            produce(bootstrap, topic_name, b"new")
            return bool(members[1].values())
        assert wait_for(late_gets_a_new_record, 30, interval=0.5)
        assert b"old" not in members[1].values()
    finally:
        for member in members:
            member.close()
    # DELETE restores the default.
    alter(bootstrap, ResourceType.GROUP, early,
          share_auto_offset_reset=(AlterConfigOpType.DELETE, None))
    described = describe(bootstrap, ResourceType.GROUP, early)[reset]
    assert (described.value, described.source) == ("latest", ConfigSource.DEFAULT_CONFIG.value)


def test_dynamic_broker_configs_cluster_wide_then_per_broker(broker_factory, topic_name):
    """Topic defaults from dynamic broker configs, with DescribeConfigs' sources and
    synonyms, kept across a restart (replayed from the metadata log)."""
    broker = broker_factory()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    # librdkafka and kafka-python refuse the cluster-wide resource (""): sent as Kafka's
    # tools send it.
    with connect(broker) as sock:
        response = call(sock, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, entity(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "IncrementalAlterConfigsRequest",
            validate_only=False, resources=(entity(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource", resource_type=4,
                resource_name="", configs=(entity(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig",
                    name="log.retention.ms", config_operation=0, value="7200000"),)),)))
    assert [r.error_code for r in response.responses] == [ErrorCode.none]

    retention = describe(bootstrap, ResourceType.TOPIC, topic_name)["retention.ms"]
    assert (retention.value, retention.source) == (
        "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert [(s.name, s.value, s.source) for s in retention.synonyms.values()][:1] == [
        ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)]

    alter(bootstrap, ResourceType.BROKER, "0",
          log_retention_hours=(AlterConfigOpType.SET, "3"),
          log_cleaner_io_max_bytes_per_second=(AlterConfigOpType.SET, "2000000"))
    broker.stop()
    broker.start()

    retention = describe(bootstrap, ResourceType.TOPIC, topic_name)["retention.ms"]
    assert (retention.value, retention.source) == (
        str(3 * 3600 * 1000), ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    own = describe(bootstrap, ResourceType.BROKER, "0")
    cleaner_io = own["log.cleaner.io.max.bytes.per.second"]
    assert (cleaner_io.value, cleaner_io.source) == ("2000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not cleaner_io.is_read_only and own["log.cleaner.threads"].is_read_only
    assert own["broker.id"].is_read_only and own["broker.id"].source == \
        ConfigSource.STATIC_BROKER_CONFIG.value
    assert own["kipper.cluster.secret"].is_sensitive and own["kipper.cluster.secret"].value is None

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)  # kafka-python sees the same
    try:
        described = admin.describe_configs(
            [KpConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        assert "log.cleaner.io.max.bytes.per.second" in str(described), described
    finally:
        admin.close()
