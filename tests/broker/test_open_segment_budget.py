"""A broker with more segments than its open-file limit allows keeps every partition
working: it keeps a budget of segment files open and reopens an idle one on next use
(storage/classic/open_files.py). Without the budget, 1,500 segments under a limit of 1,280
left the partitions past the limit offline and the broker short of sockets."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from storage.classic.open_files import capacity_for_limit
from support.processes import BrokerProcess
from support.topics import create_topic

LIMIT = 1280
BUDGET = capacity_for_limit(LIMIT)  # 256
PARTITIONS = 1500
RECORDS_PER_PARTITION = 3


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", extra_args=["--metrics-listener", "127.0.0.1:0"],
                         open_file_limit=LIMIT).start()
    yield proc
    proc.stop()


def produce_round(bootstrap: str, topic: str, round_: int) -> None:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 60_000})
    for partition in range(PARTITIONS):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, f"{round_}-{partition}-{i}".encode(), partition=partition,
                             on_delivery=lambda err, _msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(90) == 0
    assert errors == []


def expected(rounds: int) -> dict[int, list[bytes]]:
    return {p: [f"{r}-{p}-{i}".encode() for r in range(rounds)
                for i in range(RECORDS_PER_PARTITION)] for p in range(PARTITIONS)}


def consume_every_partition(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    received = 0
    try:
        for _ in range(120):
            if received >= count:
                break
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None, message.error()
                found[message.partition()].append(message.value())
                received += 1
    finally:
        consumer.close()
    return found


def test_partitions_past_the_open_file_budget_keep_their_data(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    produce_round(broker.bootstrap, topic_name, 0)
    assert consume_every_partition(broker.bootstrap, topic_name,
                                   PARTITIONS * RECORDS_PER_PARTITION) == expected(1)
    metrics = broker.metrics_json()["broker"]
    assert 0 < metrics["log_open_segment_files"] <= BUDGET
    assert metrics["log_segment_files_closed_idle"] > 0
    assert len(os.listdir(f"/proc/{broker.proc.pid}/fd")) < LIMIT - 512

    # Appends through reopened files survive kill -9 and the recovery after it.
    produce_round(broker.bootstrap, topic_name, 1)
    broker.kill()
    broker.start()
    assert consume_every_partition(broker.bootstrap, topic_name,
                                   2 * PARTITIONS * RECORDS_PER_PARTITION) == expected(2)
    assert broker.metrics_json()["broker"]["log_open_segment_files"] <= BUDGET
