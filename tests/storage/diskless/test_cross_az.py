"""KIP-1181 / KIP-392 routing and the AZ bytes of diskless traffic.

A producer in az1 and a consumer in az2 (``az=<zone>`` in client.id, client.rack) each get
Metadata naming a broker in their own AZ for the diskless partition, so no produced or
consumed byte crosses an AZ: the data travels through object storage instead (the az2
broker reads it from S3). What still crosses AZs is the batch-coordinator traffic (commit
calls and the replication of __diskless-metadata), reported here, not asserted.

A consumer that sets only client.rack (no token in its client id) is sent to a broker of
its AZ by its first Fetch (a preferred read replica), with confluent-kafka and kafka-python
alike; client.rack wins over an ``az=`` token naming another AZ.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from support.clients import consume_all
from support.metrics import az_locality
from support.topics import create_topic

RECORDS = 2000
RECORD_SIZE = 2048
PAYLOAD = RECORDS * RECORD_SIZE


def traffic(cluster) -> tuple[Counter, Counter]:
    """(network bytes by (class, same/cross AZ), object-store bytes by operation), summed
    over the brokers."""
    network: Counter = Counter()
    objects: Counter = Counter()
    for broker in cluster.brokers:
        counters = broker.metrics_json()
        for row in counters["network"]["server"]:
            network[row["class"], az_locality(row)] += row["bytes"]
        for row in counters["objectstore"]["requests"]:
            objects[row["operation"]] += row["bytes"]
    return network, objects


def test_producer_and_consumer_stay_in_their_az(diskless_cluster, topic_name):
    create_topic(diskless_cluster.bootstrap, topic_name)
    network_before, objects_before = traffic(diskless_cluster)
    merged_before = diskless_cluster.merged_objects()

    producer = Producer({"bootstrap.servers": diskless_cluster.bootstrap,
                         "client.id": "producer az=az1", "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic_name, i.to_bytes(4, "big") * (RECORD_SIZE // 4), partition=0)
    assert producer.flush(60) == 0
    values = consume_all(diskless_cluster.bootstrap, topic_name, RECORDS,
                         config={"client.id": "consumer az=az2", "client.rack": "az2"})
    assert len(values) == RECORDS

    network_after, objects_after = traffic(diskless_cluster)
    network = network_after - network_before
    objects = objects_after - objects_before
    # A merge of small WAL objects that ran meanwhile read and wrote its objects' bytes
    # once more (read again once its record reached the first broker's state).
    time.sleep(1)
    merged = sum(size for key, size in diskless_cluster.merged_objects().items()
                 if key not in merged_before)
    print(f"diskless cross-AZ figures for {PAYLOAD} B produced: network {dict(network)}, "
          f"object store {dict(objects)}, merged meanwhile {merged} B")
    assert PAYLOAD <= network["produce", "same"] <= 1.05 * PAYLOAD
    assert network["produce", "cross"] == 0
    assert PAYLOAD <= network["fetch-consumer", "same"] <= 1.1 * PAYLOAD
    assert network["fetch-consumer", "cross"] < 0.01 * PAYLOAD
    assert network["replication", "cross"] < 0.01 * PAYLOAD
    # The bytes went through object storage: uploaded once, read once by the az2 broker
    # (and once more by a merge, if one ran).
    assert PAYLOAD <= objects["PutObject"] <= 1.05 * PAYLOAD + merged
    assert PAYLOAD <= objects["GetObject"] <= 1.05 * PAYLOAD + merged


def fetched_by_az(cluster) -> Counter:
    """Consumer fetch bytes served, by the serving broker's AZ."""
    served: Counter = Counter()
    for broker in cluster.brokers:
        for row in broker.metrics_json()["network"]["server"]:
            if row["class"] == "fetch-consumer":
                served[row["local_az"]] += row["bytes"]
    return served


def consume_with_kafka_python(bootstrap: str, topic: str, expected: int, client_id: str,
                              rack: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, client_rack=rack,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([KafkaTopicPartition(topic, 0)])
    try:
        return [message.value for message, _ in zip(consumer, range(expected))]
    finally:
        consumer.close()


def consume_with_confluent(bootstrap: str, topic: str, expected: int, client_id: str,
                           rack: str) -> list[bytes]:
    return consume_all(bootstrap, topic, expected,
                       config={"client.id": client_id, "client.rack": rack})


@pytest.mark.parametrize("consume", [consume_with_confluent, consume_with_kafka_python],
                         ids=["confluent-kafka", "kafka-python"])
@pytest.mark.parametrize("client_id", ["reader", "reader az=az1"],
                         ids=["rack-only", "rack-over-az-token"])
def test_a_consumer_is_served_in_its_client_rack(diskless_cluster, topic_name, consume,
                                                 client_id):
    records, size = 500, 2048
    create_topic(diskless_cluster.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": diskless_cluster.bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic_name, i.to_bytes(4, "big") * (size // 4), partition=0)
    assert producer.flush(60) == 0

    before = fetched_by_az(diskless_cluster)
    assert len(consume(diskless_cluster.bootstrap, topic_name, records, client_id, "az2")) == records
    served = fetched_by_az(diskless_cluster) - before
    print(f"consumer fetch bytes by serving AZ ({client_id!r}, client.rack=az2): {dict(served)}")
    assert served["az2"] >= records * size
    # At most the first Fetch, which named the preferred replica, elsewhere.
    assert sum(served.values()) - served["az2"] < 0.01 * records * size
