"""/metrics while real clients work (confluent-kafka produces, a kafka-python group consumes),
in every storage mode: the families are the catalogued ones (broker/metric_catalog.py,
docs/metrics.md), and the values follow what the clients did; on a classic RF=3 topic the
partition-health gauges follow followers being killed."""

from __future__ import annotations

import pytest

from broker import metric_catalog as catalog
from support.metrics import scrape, total
from support.processes import Cluster
from support.topics import create_topic
from support.wait import wait_until

PARTITIONS = 2
RECORDS = 200
MORE_RECORDS = 10
# The catalogue's "where" of the families each mode's brokers must export.
EXPORTED_WHERE = {
    "classic": {catalog.EVERY_NODE, catalog.BROKER, catalog.GROUP_COORDINATOR},
    "diskless": {catalog.EVERY_NODE, catalog.BROKER, catalog.GROUP_COORDINATOR,
                 catalog.OBJECT_STORE, catalog.DISKLESS},
    "active-tiered": {catalog.EVERY_NODE, catalog.BROKER, catalog.GROUP_COORDINATOR,
                      catalog.OBJECT_STORE, catalog.DISKLESS, catalog.ACTIVE_TIERED},
    # Brokers with an object store; no active-tiered topic has uploaded anything.
    "shared": {catalog.EVERY_NODE, catalog.BROKER, catalog.GROUP_COORDINATOR,
               catalog.OBJECT_STORE, catalog.DISKLESS},
}


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, b"v" * 100, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, n: int) -> None:
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=30_000)
    try:
        received = 0
        for _ in consumer:
            received += 1
            if received == n:
                break
        assert received == n
        consumer.commit()
    finally:
        consumer.close()


def assert_catalogued(scrapes: list[dict], mode: str) -> None:
    """Every family exported is in the catalogue with its type, and every family the
    catalogue promises for this mode is exported."""
    exported = {name: family.type for families in scrapes for name, family in families.items()}
    for name, kind in exported.items():
        spec = catalog.spec_of(name)
        assert spec is not None, f"{name} is exported but not in broker/metric_catalog.py"
        assert spec.is_prefix or spec.kind == kind, (name, kind, spec.kind)
    promised = {spec.name for spec in catalog.CATALOG
                if not spec.is_prefix and spec.where in EXPORTED_WHERE[mode]}
    assert promised <= exported.keys(), sorted(promised - exported.keys())


def test_metrics_follow_a_produce_and_a_consumer_group(storage_mode, topic_name):
    storage_mode.watch(topic_name)
    create_topic(storage_mode.bootstrap, topic_name, PARTITIONS, storage_mode.replication_factor)
    group = f"group-{topic_name}"
    produce(storage_mode.bootstrap, topic_name, RECORDS)
    consume_and_commit(storage_mode.bootstrap, topic_name, group, RECORDS)

    def scrapes() -> list[dict]:
        return [scrape(url) for url in storage_mode.metrics_urls]

    def lag() -> tuple[float, float]:
        now = scrapes()
        return (total(now, "kipper_consumer_group_lag", group=group),
                total(now, "kipper_consumer_group_committed_offset", group=group))

    # Committed at the end of both partitions: no lag, on both partitions.
    wait_until(lambda: lag() == (0, RECORDS), timeout=30, interval=0.5)
    produce(storage_mode.bootstrap, topic_name, MORE_RECORDS)
    wait_until(lambda: lag() == (MORE_RECORDS, RECORDS), timeout=30, interval=0.5)

    now = scrapes()
    assert_catalogued(now, storage_mode.name)
    assert total(now, "kipper_topic_records_in_total", topic=topic_name) >= RECORDS + MORE_RECORDS
    assert total(now, "kipper_topic_bytes_in_total", topic=topic_name) > 100 * RECORDS
    assert total(now, "kipper_topic_bytes_out_total", topic=topic_name) > 100 * RECORDS
    for api in ("PRODUCE", "FETCH", "OFFSET_COMMIT", "JOIN_GROUP"):
        assert total(now, "kipper_request_seconds_count", api=api) > 0, api
    assert total(now, "kipper_request_seconds_bucket", api="PRODUCE", le="+Inf") == total(
        now, "kipper_request_seconds_count", api="PRODUCE")
    assert total(now, "kipper_under_replicated_partitions") == 0
    assert total(now, "kipper_under_min_isr_partitions") == 0
    # Sampled every 0.1 s: a broker started for this test may not have sampled yet.
    wait_until(lambda: total(scrapes(), "kipper_event_loop_lag_seconds_count") > 0, timeout=10)
    for process_sample in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_open_fds"):
        assert total(now, process_sample) > 0, process_sample
    if storage_mode.name == "diskless":
        assert total(now, "kipper_diskless_wal_upload_seconds_count") > 0
        assert total(now, "kipper_diskless_wal_commit_seconds_count") > 0
        assert (total(now, "kipper_diskless_read_cache_hits_total")
                + total(now, "kipper_diskless_read_cache_misses_total")) > 0
    if storage_mode.name == "active-tiered":
        assert total(now, "kipper_active_tiered_step_seconds_count", step="put") > 0
        assert total(now, "kipper_active_tiered_step_seconds_count", step="download") > 0
        assert total(now, "kipper_replication_bytes_out_total") > 0
    if storage_mode.name == "classic":  # a single node: it runs the controller
        assert total(now, "kipper_active_controller") == 1
        assert total(now, "kipper_leader_partitions") >= PARTITIONS


@pytest.fixture
def classic_cluster(tmp_path):
    cluster = Cluster(tmp_path, brokers=3, broker_args=["--metrics-listener", "127.0.0.1:0"])
    cluster.controller.extra_args += ["--metrics-listener", "127.0.0.1:0"]
    yield cluster.start()
    cluster.stop()


def test_partition_health_follows_followers_dying(classic_cluster, topic_name):
    """RF=3, min.insync.replicas=2: one follower killed makes the partition under-replicated
    (and at min ISR) on its leader, the second makes it under min ISR; the controller counts
    it offline once its leader is gone too."""
    create_topic(classic_cluster.bootstrap, topic_name, 1, 3, {"min.insync.replicas": "2"},
                 in_sync=True)
    produce(classic_cluster.bootstrap, topic_name, 10)
    leader = classic_cluster.leader_of(topic_name)
    followers = [b for b in classic_cluster.brokers if b.node_id != leader]

    def scrapes() -> list[dict]:
        nodes = [classic_cluster.controller, *classic_cluster.brokers]
        return [scrape(node.metrics_url) for node in nodes if node.alive()]

    def gauges() -> dict[str, float]:
        now = scrapes()
        return {name: total(now, f"kipper_{name}") for name in (
            "under_replicated_partitions", "at_min_isr_partitions", "under_min_isr_partitions",
            "offline_partitions", "active_controller", "isr_shrinks_total")}

    healthy = gauges()
    assert healthy == {**healthy, "under_replicated_partitions": 0, "under_min_isr_partitions": 0,
                       "at_min_isr_partitions": 0, "offline_partitions": 0,
                       "active_controller": 1}, healthy
    followers[0].kill()
    wait_until(lambda: gauges()["under_replicated_partitions"] == 1, timeout=30, interval=0.5)
    degraded = gauges()
    assert degraded["at_min_isr_partitions"] == 1 and degraded["under_min_isr_partitions"] == 0
    assert degraded["isr_shrinks_total"] >= 1
    followers[1].kill()
    wait_until(lambda: gauges()["under_min_isr_partitions"] == 1, timeout=30, interval=0.5)
    next(b for b in classic_cluster.brokers if b.node_id == leader).kill()
    wait_until(lambda: gauges()["offline_partitions"] >= 1, timeout=30, interval=0.5)
