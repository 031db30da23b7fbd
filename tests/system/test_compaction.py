"""Log compaction seen by real clients, in every storage mode: a changelog topic of KEYS keys
x VERSIONS versions, the last version of 10 % of the keys a tombstone, produced by
confluent-kafka to a topic created with cleanup.policy=delete, then switched to compact live
(IncrementalAlterConfigs). Once cleaned, a consumer from the beginning (confluent-kafka,
kafka-python) sees exactly the latest value of each live key, at the offset it was written at; the
tombstones are gone after delete.retention.ms; a consumer group that committed mid-log
resumes unaffected; the partition's files shrink, and /metrics counts the cleaner's work
(the log cleaner's families, or diskless housekeeping's compaction counters). In classic mode the broker is also killed
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
from confluent_kafka.admin import AlterConfigOpType, ResourceType
from kafka import KafkaConsumer
from support.configs import alter
from support.metrics import scrape, total
from support.topics import create_topic
from support.wait import wait_until

from coordinator.group_config import GroupConfig

KEYS = int(os.environ.get("KIPPER_COMPACTION_KEYS", "500"))
VERSIONS = int(os.environ.get("KIPPER_COMPACTION_VERSIONS", "8"))
TOMBSTONE_EVERY = 10  # the last version of every 10th key is a tombstone
SEGMENT_MS = 1000
DELETE_RETENTION_MS = 2000
ROLL_KEY = b"~roll"  # written to roll the active segment, so the rest can be cleaned
pytestmark = [pytest.mark.system, pytest.mark.timeout(120 + KEYS * VERSIONS / 200)]

# Created with cleanup.policy=delete: the test switches it to compact once filled.
TOPIC_CONFIG = {"cleanup.policy": "delete", "segment.bytes": str(64 << 10),
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
    # A produce request's batches must fit one segment (64 KiB here), as in Kafka: else
    # RECORD_LIST_TOO_LARGE (librdkafka's batches grow to 1 MB under load).
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 32 << 10})
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
    broker = broker_factory(*storage_mode.single_broker_args(s3_endpoint),
                            "--metrics-listener", "127.0.0.1:0")
    create_topic(broker.bootstrap, topic_name, config=TOPIC_CONFIG)
    latest = produce_changelog(broker.bootstrap, topic_name)
    # Nothing is compacted while the policy is delete (and the segments are closed).
    assert len(read_confluent(broker.bootstrap, topic_name)) == KEYS * VERSIONS + 1
    alter(broker.bootstrap, ResourceType.TOPIC, topic_name,
          cleanup_policy=(AlterConfigOpType.SET, "compact"))
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
    assert_cleaner_metrics(scrape(broker.metrics_url), local)


def assert_cleaner_metrics(families: dict, local: bool) -> None:
    """The cleanings since the broker (re)started, as /metrics counts them."""
    def counted(name: str) -> float:
        return total([families], name)
    if local:
        assert counted("kipper_log_cleaner_cleanings_total") >= 1
        assert counted("kipper_log_cleaner_records_removed_total") >= 1
        assert 0 < counted("kipper_log_cleaner_bytes_written_total") \
            < counted("kipper_log_cleaner_bytes_read_total")
        assert counted("kipper_log_cleaner_failures_total") == 0
        assert 0 < counted("kipper_log_cleaner_buffer_utilization_ratio") <= 1
    else:
        assert counted("kipper_diskless_housekeeping_compactions_total") >= 1
        assert counted("kipper_diskless_housekeeping_compaction_bytes_after_total") \
            < counted("kipper_diskless_housekeeping_compaction_bytes_before_total")


def _first_message(consumer: Consumer):
    message = consumer.poll(1.0)
    return message if message is not None and not message.error() else None


INTERNAL_SEGMENT_BYTES = 16 << 10
COMMITS = int(os.environ.get("KIPPER_COMPACTION_COMMITS", "5000"))
TRANSACTIONS = int(os.environ.get("KIPPER_COMPACTION_TRANSACTIONS", "300"))


def internal_topic_bytes(data_dir: Path, topic: str) -> int:
    return sum(p.stat().st_size for p in data_dir.glob(f"{topic}-*/*.log"))


def offsets_topic_end(bootstrap: str) -> int:
    """The records ever appended to ``__consumer_offsets`` (its partitions' end offsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-topic-reader"})
    ends = [consumer.get_watermark_offsets(TopicPartition("__consumer_offsets", p),
                                           timeout=10)[1]
            for p in range(GroupConfig().offsets_topic_num_partitions)]
    consumer.close()
    return sum(ends)


def test_the_internal_topics_stay_bounded_and_replay_after_a_restart(
        broker_factory, monkeypatch, topic_name):
    """One group commits its offsets COMMITS times, one transactional id runs TRANSACTIONS
    transactions (confluent-kafka): with small segments, the cleaner keeps
    ``__consumer_offsets`` and ``__transaction_state`` to a few segments, and a restarted
    broker's coordinators replay the compacted logs into the same state."""
    monkeypatch.setenv("KIPPER_LOG_CLEANER_BACKOFF_MS", "200")
    for setting in ("OFFSETS_TOPIC_SEGMENT_BYTES", "TRANSACTION_STATE_LOG_SEGMENT_BYTES"):
        monkeypatch.setenv(f"KIPPER_{setting}", str(INTERNAL_SEGMENT_BYTES))
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, 2)
    group = f"{topic_name}-g"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    for i in range(1, COMMITS + 1):
        consumer.commit(offsets=[TopicPartition(topic_name, 0, i),
                                 TopicPartition(topic_name, 1, 2 * i)], asynchronous=False)
    consumer.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"{topic_name}-txn"})
    producer.init_transactions(30)
    for i in range(TRANSACTIONS):
        producer.begin_transaction()
        producer.produce(topic_name, b"%d" % i, b"k", partition=0)
        producer.commit_transaction(30)
    producer.flush(30)

    # Every commit was appended (two records, tens of segments of them) ...
    assert offsets_topic_end(broker.bootstrap) >= 2 * COMMITS
    # ... and the cleaner keeps a few segments of them.
    bound = 4 * INTERNAL_SEGMENT_BYTES
    wait_until(lambda: all(internal_topic_bytes(broker.data_dir, topic) < bound
                           for topic in ("__consumer_offsets", "__transaction_state")),
               timeout=60, interval=0.5)

    broker.stop()
    broker.start()
    # The group coordinator replays the compacted log: the last commit of each partition.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    committed = consumer.committed([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)],
                                   timeout=30)
    consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, COMMITS), (1, 2 * COMMITS)]
    # The transaction coordinator replays it: the id is known and its next transaction
    # (a new epoch fencing the old producer) commits.
    fresh = Producer({"bootstrap.servers": broker.bootstrap,
                      "transactional.id": f"{topic_name}-txn"})
    fresh.init_transactions(30)
    fresh.begin_transaction()
    fresh.produce(topic_name, b"after", b"k", partition=0)
    fresh.commit_transaction(30)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{group}-reader",
                       "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(topic_name, 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < TRANSACTIONS + 1 and time.monotonic() < deadline:
        message = reader.poll(1.0)
        if message is not None and not message.error():
            values.append(message.value())
    reader.close()
    assert values == [b"%d" % i for i in range(TRANSACTIONS)] + [b"after"]
