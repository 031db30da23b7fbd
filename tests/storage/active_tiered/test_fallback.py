"""Lagging-follower fallback (the thread's objection 6): a follower that was down while the
objects holding its missing offsets were deleted gets raw records from the leader, and the
broker counts those bytes both as fallback and as cross-AZ replication."""

from __future__ import annotations

import os

from confluent_kafka import Producer

from support.dataset import segment_batches
from support.wait import wait_until

from support.tiered import create_tiered_topic

RECORDS = 1000
RECORD_SIZE = 2048
PAYLOAD = RECORDS * RECORD_SIZE


def test_follower_behind_the_objects_falls_back_to_records(make_cluster, topic_name):
    cluster = make_cluster()
    create_tiered_topic(cluster, topic_name, **{"active.tiered.metadata.scheme": "memory",
                                                "active.tiered.wal.retention.ms": "1000"})
    leader = cluster.leader_of(topic_name)
    follower = next(b for b in cluster.brokers if b.node_id != leader)
    follower.kill()

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20})
    for _ in range(RECORDS):
        producer.produce(topic_name, os.urandom(RECORD_SIZE), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0

    # The objects go once the live in-sync follower has them, or after the retention: the
    # leader then has no pointers for the offsets the stopped follower lacks.
    def all_objects_deleted() -> bool:
        counters = cluster.tiered_counters([leader])
        return counters["uploads"] > 0 and counters["deleted_objects"] == counters["uploads"]
    wait_until(all_objects_deleted, timeout=30, interval=0.2)
    before_tiered = cluster.tiered_counters([leader])
    before_network = cluster.network(nodes=[leader])

    follower.start()
    wait_until(lambda: len(cluster.isr_of(topic_name)) == 3, timeout=60, interval=0.2)
    stored = sum(count for _, count, _ in segment_batches(follower.data_dir, topic_name))
    assert stored == RECORDS

    fallback = (cluster.tiered_counters([leader]) - before_tiered)["fallback_bytes"]
    cross = (cluster.network(nodes=[leader]) - before_network)["replication", "cross"]
    print(f"\nfallback: {fallback} B of records sent raw to the restarted follower; "
          f"the leader's cross-AZ replication bytes grew by {cross} B")
    assert PAYLOAD <= fallback < 1.05 * PAYLOAD
    assert cross >= fallback
