"""Log compaction seen by real clients, in every storage mode: a changelog topic of KEYS keys
x VERSIONS versions, the last version of 10 % of the keys a tombstone, produced by
confluent-kafka. Once cleaned, a consumer from the beginning (confluent-kafka, kafka-python)
sees exactly the latest value of each live key, at the offset it was written at; the
tombstones are gone after delete.retention.ms; a consumer group that committed mid-log
resumes unaffected; the partition's files shrink. In classic mode the broker is also killed
with SIGKILL while it cleans, and restarted.

CI size: KIPPER_COMPACTION_KEYS (default 500) x KIPPER_COMPACTION_VERSIONS (default 8). The
issue's full run:

    KIPPER_COMPACTION_KEYS=10000 KIPPER_COMPACTION_VERSIONS=20 pytest tests/system/test_compaction.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from support.topics import create_topic
from support.wait import wait_until

KEYS = int(os.environ.get("KIPPER_COMPACTION_KEYS", "500"))
VERSIONS = int(os.environ.get("KIPPER_COMPACTION_VERSIONS", "8"))
TOMBSTONE_EVERY = 10  # the last version of every 10th key is a tombstone
SEGMENT_MS = 1000
DELETE_RETENTION_MS = 2000
ROLL_KEY = b"~roll"  # written to roll the active segment, so the rest can be cleaned
pytestmark = [pytest.mark.system, pytest.mark.timeout(120 + KEYS * VERSIONS / 200)]

TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(64 << 10),
                "segment.ms": str(SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01",
                # The roll after the tombstones' horizon is too small for the dirty ratio.
                "max.compaction.lag.ms": "1000",
                "delete.retention.ms": str(DELETE_RETENTION_MS)}
CLEANER_ENV = {"KIPPER_LOG_CLEANER_BACKOFF_MS": "200",
               # Slow enough that the kill finds a cleaning under way.
               "KIPPER_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND": "400000"}


def key(k: int) -> bytes:
    return b"key-%06d" % k


def produce_changelog(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """Every version of every key; each value carries its offset (one partition, in order)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    latest: dict[bytes, bytes | None] = {}
    offset = 0
    for version in range(VERSIONS):
        for k in range(KEYS):
            last = version == VERSIONS - 1
            value = None if last and k % TOMBSTONE_EVERY == 0 else b"%d:%d" % (offset, version)
            producer.produce(topic, value, key(k), partition=0)
            latest[key(k)] = value
            offset += 1
        producer.flush(30)
    roll(producer, topic)
    return latest


def roll(producer: Producer, topic: str) -> None:
    """Roll the active segment (segment.ms) with a record of a key the checks ignore."""
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    producer.produce(topic, b"roll", ROLL_KEY, partition=0)
    producer.flush(30)


def read_confluent(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    out: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 60
    position = 0
    while position < end and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        out.append((message.offset(), message.key(), message.value()))
        position = message.offset() + 1
    consumer.close()
    return out


def read_kafka_python(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    from kafka import TopicPartition as KTopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    partition = KTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    out = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    return out


def compacted(records: list[tuple[int, bytes, bytes | None]], *, tombstones: bool
              ) -> dict[bytes, bytes | None] | None:
    """key -> value of a read of a fully compacted log (each key once, every value at the
    offset it names), None when the read is not that yet."""
    seen: dict[bytes, bytes | None] = {}
    for offset, k, value in records:
        if k == ROLL_KEY:
            continue
        if k in seen or (value is None and not tombstones):
            return None
        if value is not None:
            assert int(value.split(b":")[0]) == offset, "a record moved"
        seen[k] = value
    return seen


def partition_bytes(data_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-0").glob("*.log"))


def test_a_compacted_changelog_keeps_the_latest_value_of_each_key(
        storage_mode, broker_factory, s3_endpoint, monkeypatch, topic_name):
    for name, value in CLEANER_ENV.items():
        monkeypatch.setenv(name, value)
    broker = broker_factory(*storage_mode.single_broker_args(s3_endpoint))
    create_topic(broker.bootstrap, topic_name, config=TOPIC_CONFIG)
    latest = produce_changelog(broker.bootstrap, topic_name)
    live = {k: v for k, v in latest.items() if v is not None}
    local = storage_mode.name != "diskless"
    written = partition_bytes(broker.data_dir, topic_name) if local else 0

    # A group that committed mid-log before any cleaning.
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-g",
                      "enable.auto.commit": False})
    middle = KEYS * VERSIONS // 2
    group.commit(offsets=[TopicPartition(topic_name, 0, middle)], asynchronous=False)
    group.close()

    if storage_mode.name == "classic":
        partition_dir = broker.data_dir / f"{topic_name}-0"
        wait_until(lambda: list(partition_dir.glob("*.cleaned")), timeout=30, interval=0.005)
        broker.kill()
        broker.start()

    # Cleaned: each key once, at its offset, tombstones (not past their horizon yet) kept.
    view = wait_until(lambda: compacted(read_confluent(broker.bootstrap, topic_name),
                                        tombstones=True), timeout=60, interval=0.5)
    assert view == latest
    if local:
        assert partition_bytes(broker.data_dir, topic_name) < written / 2

    # Past delete.retention.ms, a later cleaning drops the tombstones.
    time.sleep(DELETE_RETENTION_MS / 1000)
    roll(Producer({"bootstrap.servers": broker.bootstrap}), topic_name)
    view = wait_until(lambda: compacted(read_confluent(broker.bootstrap, topic_name),
                                        tombstones=False), timeout=60, interval=0.5)
    assert view == live
    assert compacted(read_kafka_python(broker.bootstrap, topic_name), tombstones=False) == live

    # The group resumes where it committed and reads the rest of the (compacted) log.
    group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic_name}-g",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    group.subscribe([topic_name])
    first = wait_until(lambda: _first_message(group), timeout=30)
    group.close()
    assert first.offset() >= middle
    assert first.key() == ROLL_KEY or int(first.value().split(b":")[0]) == first.offset()


def _first_message(consumer: Consumer):
    message = consumer.poll(1.0)
    return message if message is not None and not message.error() else None
