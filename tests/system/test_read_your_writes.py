"""Read-your-writes across brokers on a diskless topic (issue 13, section 2).

Kafka promises that once a produce or a DeleteRecords is acknowledged, every broker answers
ListOffsets, the fetch high watermark and DeleteRecords with state at least that new. Any
broker serves a diskless partition from its own copy of the batch coordinator's state, so
each test writes through broker A and immediately reads through broker B, where A and B are
the two brokers that do not lead the coordinator's log (their copies trail it). Clients
reach a chosen broker through the ``az=`` token of their client.id (KIP-1181 routing).
Before the fix, every one of these rounds was stale (bench/read_your_writes.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from bench.read_your_writes import Uncounted, fetch_high_watermark
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC
from protocol.internal import ClusterCredentials
from replication.node_client import NodeConnection
from support.processes import CLUSTER_SECRET, BrokerProcess
from support.topics import create_topic, partition_metadata

ROUNDS = 50
TEST_NODE_ID = 900  # the raw Fetch's connection, which is no broker
RECORDS = 10


@dataclass
class Route:
    """A diskless topic, the broker writes go through and the broker reads go through."""

    topic: str
    writer: BrokerProcess
    reader: BrokerProcess

    def client_id(self, broker: BrokerProcess, role: str) -> str:
        return f"ryw-{role} az=az{broker.node_id + 1}"  # the cluster's broker i is in az(i+1)


@pytest.fixture
def route(diskless_cluster, topic_name) -> Route:
    create_topic(diskless_cluster.bootstrap, topic_name)
    # The first diskless commit creates the coordinator's log: only then has it a leader.
    _acknowledged(Producer({"bootstrap.servers": diskless_cluster.bootstrap, "acks": "all"}),
                  topic_name, 1)
    coordinator = partition_metadata(diskless_cluster.bootstrap, DISKLESS_METADATA_TOPIC).leader
    writer, reader = [b for b in diskless_cluster.brokers if b.node_id != coordinator][:2]
    return Route(topic_name, writer, reader)


def _acknowledged(producer: Producer, topic: str, count: int) -> None:
    for i in range(count):
        producer.produce(topic, f"record-{i}".encode(), partition=0)
    assert producer.flush(30) == 0, "the records were not acknowledged"


def _stale_rounds(route: Route, read: Callable[[int], tuple | None]) -> list[tuple]:
    """ROUNDS times: produce RECORDS with acks=all through the writer, then ``read(end)``
    (``end``: the acknowledged log end) says what it found stale, or None."""
    producer = Producer({"bootstrap.servers": route.writer.bootstrap, "acks": "all",
                         "linger.ms": 0, "client.id": route.client_id(route.writer, "writer")})
    end = 1  # the fixture's first record
    stale = []
    for i in range(ROUNDS):
        _acknowledged(producer, route.topic, RECORDS)
        end += RECORDS
        found = read(end)
        if found is not None:
            stale.append((i, *found))
    return stale


def test_latest_offset_through_another_broker(route):
    confluent = Consumer({"bootstrap.servers": route.reader.bootstrap, "group.id": "ryw",
                          "client.id": route.client_id(route.reader, "confluent")})
    kafka_python = KafkaConsumer(bootstrap_servers=route.reader.bootstrap,
                                 client_id=route.client_id(route.reader, "kafka-python"))
    partition = KafkaTopicPartition(route.topic, 0)

    def latest(end: int) -> tuple | None:
        """Alternately through confluent-kafka and kafka-python."""
        if end // RECORDS % 2:
            found = kafka_python.end_offsets([partition])[partition]
        else:
            found = confluent.get_watermark_offsets(TopicPartition(route.topic, 0), timeout=30,
                                                    cached=False)[1]
        return None if found == end else (found, end)
    try:
        stale = _stale_rounds(route, latest)
    finally:
        confluent.close()
        kafka_python.close()
    assert stale == [], f"{len(stale)} of {ROUNDS} LATEST answers were not the acknowledged end"


def test_delete_records_right_after_produce_and_earliest_elsewhere(route):
    """DeleteRecords through B right after a produce through A (it failed with
    OFFSET_OUT_OF_RANGE), then EARLIEST through A (it answered the old log start)."""
    admin = AdminClient({"bootstrap.servers": route.reader.bootstrap,
                         "client.id": route.client_id(route.reader, "admin")})
    earliest_at_writer = Consumer({"bootstrap.servers": route.writer.bootstrap,
                                   "group.id": "ryw", "client.id": route.client_id(
                                       route.writer, "confluent")})

    def delete_then_earliest(end: int) -> tuple | None:
        wanted = end - 2
        deleted = admin.delete_records([TopicPartition(route.topic, 0, wanted)])
        low_watermark = next(iter(deleted.values())).result(30).low_watermark
        earliest = earliest_at_writer.get_watermark_offsets(
            TopicPartition(route.topic, 0), timeout=30, cached=False)[0]
        return None if low_watermark == earliest == wanted else (low_watermark, earliest, wanted)
    try:
        stale = _stale_rounds(route, delete_then_earliest)
    finally:
        earliest_at_writer.close()
    assert stale == [], f"{len(stale)} of {ROUNDS} rounds: (round, low watermark, EARLIEST, wanted)"


def test_fetch_high_watermark_through_another_broker(route):
    """A consumer's Fetch through B (max_wait 0: answered at once) carries a high watermark
    that includes what was just acknowledged through A. (The Fetch is the bench's raw
    request: a client library answers a stale broker's empty fetch by fetching again, which
    hides the stale high watermark the test looks for.)"""
    loop = asyncio.new_event_loop()
    # NodeConnection proves cluster membership first, though a consumer Fetch needs none.
    connection = NodeConnection("127.0.0.1", route.reader.port, "ryw-fetch",
                                ClusterCredentials(TEST_NODE_ID, CLUSTER_SECRET), Uncounted())

    def high_watermark(end: int) -> tuple | None:
        found = loop.run_until_complete(fetch_high_watermark(connection, route.topic, end))
        return None if found == end else (found, end)
    try:
        stale = _stale_rounds(route, high_watermark)
    finally:
        loop.run_until_complete(connection.close())
        loop.close()
    assert stale == [], f"{len(stale)} of {ROUNDS} fetch high watermarks were stale"
