"""Cross-AZ byte accounting, checked against a known workload of real clients.

Three brokers in az1..az3, one RF=3 partition. A producer in the leader's AZ writes
PAYLOAD bytes of record values; a consumer in another AZ, with client.rack set, reads them
back from the follower in its own AZ (KIP-392). The counters must show:

- produce: every byte same-AZ, about PAYLOAD;
- replication: every byte cross-AZ, about 2 x PAYLOAD (one copy to each follower);
- consumer fetches: about PAYLOAD same-AZ (from the follower), next to nothing cross-AZ.

Counters hold whole frames, so each figure is PAYLOAD plus framing: record overhead
(~10 bytes per 2 KiB record: length, deltas and lengths as varints), a 61-byte header per
batch, request/response headers, and the empty long polls followers and the consumer keep
sending (~100 bytes each, two per second per fetcher). With 2 KiB records and a few MiB in
total all of that stays well under the 5 % tolerance; the metadata log, heartbeats and
client Metadata requests have classes of their own and are not asserted here.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from confluent_kafka import Producer

from bench.local_cluster import LocalCluster
from support.clients import consume_all
from support.metrics import az_locality
from support.topics import create_topic, partition_metadata

RECORDS = 2000
RECORD_SIZE = 2048
PAYLOAD = RECORDS * RECORD_SIZE
TOLERANCE = 0.05
BROKERS = 3


@pytest.fixture
def cluster(tmp_path):
    cluster = LocalCluster(tmp_path, brokers=BROKERS, metrics=True).start()
    yield cluster
    cluster.stop()


def network_bytes(cluster: LocalCluster, side: str) -> Counter:
    """Bytes summed over all brokers and both directions, by (class, same/cross/unknown AZ)."""
    totals: Counter = Counter()
    for node in range(BROKERS):
        for row in cluster.metrics_json(node)["network"][side]:
            totals[row["class"], az_locality(row)] += row["bytes"]
    return totals


def fetch_bytes_by_broker(cluster: LocalCluster) -> dict[int, int]:
    return {node: sum(row["bytes"] for row in cluster.metrics_json(node)["network"]["server"]
                      if row["class"] == "fetch-consumer")
            for node in range(BROKERS)}


def assert_close(measured: int, expected: int) -> None:
    assert abs(measured - expected) <= TOLERANCE * expected, (measured, expected)


def test_bytes_by_class_and_az(cluster, topic_name):
    create_topic(cluster.bootstrap, topic_name, replication_factor=3, in_sync=True)
    leader = partition_metadata(cluster.bootstrap, topic_name).leader
    leader_az = cluster.broker(leader)["rack"]
    consumer_az = min(cluster.broker(n)["rack"] for n in range(BROKERS)
                      if cluster.broker(n)["rack"] != leader_az)
    consumer_broker = next(n for n in range(BROKERS) if cluster.broker(n)["rack"] == consumer_az)

    server_before = network_bytes(cluster, "server")
    client_before = network_bytes(cluster, "client")
    fetched_before = fetch_bytes_by_broker(cluster)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "client.id": f"prod,az={leader_az}", "linger.ms": 20})
    values = [os.urandom(RECORD_SIZE) for _ in range(RECORDS)]
    for value in values:
        producer.produce(topic_name, value)
        producer.poll(0)
    assert producer.flush(30) == 0

    received = consume_all(cluster.bootstrap, topic_name, RECORDS, timeout=60,
                           config={"client.id": f"cons;az={consumer_az}", "client.rack": consumer_az})
    assert received == values

    server = network_bytes(cluster, "server") - server_before
    client = network_bytes(cluster, "client") - client_before
    fetched = Counter(fetch_bytes_by_broker(cluster)) - Counter(fetched_before)
    print(f"\npayload {PAYLOAD} B; leader {leader} in {leader_az}, consumer in {consumer_az}")
    for (traffic_class, locality), nbytes in sorted(server.items()):
        print(f"server {traffic_class:15} {locality:8} {nbytes:>10} B")
    for (traffic_class, locality), nbytes in sorted(client.items()):
        print(f"client {traffic_class:15} {locality:8} {nbytes:>10} B")
    print(f"consumer fetch bytes by broker: {dict(fetched)}")

    # The producer names its AZ, and only the leader (in that AZ) takes produce requests.
    assert server["produce", "cross"] == server["produce", "unknown"] == 0
    assert_close(server["produce", "same"], PAYLOAD)
    # RF=3 over three AZs: each follower fetches one copy from another AZ.
    assert server["replication", "same"] == server["replication", "unknown"] == 0
    assert_close(server["replication", "cross"], 2 * PAYLOAD)
    # The followers' own counters (their side of the same connections) agree.
    assert_close(client["replication", "cross"], server["replication", "cross"])
    # KIP-392: the leader sends the consumer to the follower in its AZ, which serves it all.
    assert_close(server["fetch-consumer", "same"], PAYLOAD)
    assert server["fetch-consumer", "cross"] < TOLERANCE * PAYLOAD
    assert_close(fetched[consumer_broker], PAYLOAD)
