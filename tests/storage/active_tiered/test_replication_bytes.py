"""KIP-1176's claim, measured: with RF=3 over three AZs, replication moves through each AZ's
fast bucket, so the cross-AZ replication bytes the brokers count are about zero, while the
object store carries the data (one PUT of every byte, one GET per follower). Each metadata
scheme runs end to end here, and its metadata volume is reported."""

from __future__ import annotations

import os

from confluent_kafka import Producer

from support.clients import consume_all

from support.tiered import PATIENT_DOWNLOADS, create_tiered_topic

RECORDS = 2000
RECORD_SIZE = 2048
PAYLOAD = RECORDS * RECORD_SIZE


def fast_bucket_bytes(objectstore, operation: str) -> int:
    return sum(n for (what, op, bucket), n in objectstore.items()
               if what == "bytes" and op == operation and bucket.startswith("kipper-fast-"))


def test_replication_goes_through_object_storage(make_cluster, topic_name):
    cluster = make_cluster(**PATIENT_DOWNLOADS)
    print(f"\npayload {PAYLOAD} B per scheme")
    for scheme in ("topic", "fetch", "memory"):
        topic = f"{topic_name}-{scheme}"
        create_tiered_topic(cluster, topic, **{"active.tiered.metadata.scheme": scheme})
        network, store, tiered = cluster.network(), cluster.objectstore(), cluster.tiered_counters()

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "linger.ms": 20})
        values = [os.urandom(RECORD_SIZE) for _ in range(RECORDS)]
        for value in values:
            producer.produce(topic, value, partition=0)
            producer.poll(0)
        assert producer.flush(60) == 0
        assert consume_all(cluster.bootstrap, topic, RECORDS) == values

        network = cluster.network() - network
        store = cluster.objectstore() - store
        tiered = cluster.tiered_counters() - tiered
        cross_replication = network["replication", "cross"]
        put, get = fast_bucket_bytes(store, "PutObject"), fast_bucket_bytes(store, "GetObject")
        print(f"{scheme:6}: cross-AZ replication {cross_replication} B "
              f"({cross_replication / PAYLOAD:.2%}), metadata-class network "
              f"{network['metadata', 'cross'] + network['metadata', 'same']} B; "
              f"fast-bucket PUT {put} B, GET {get} B; uploads {tiered['uploads']}, "
              f"downloads {tiered['downloads']}; WAL metadata {tiered['metadata_bytes', scheme]} B "
              f"in {tiered['metadata_records', scheme]} records; "
              f"fallback {tiered['fallback_bytes']} B")
        assert cross_replication < 0.01 * PAYLOAD
        assert PAYLOAD <= put < 1.05 * PAYLOAD  # record and batch framing on top of values
        assert 2 * PAYLOAD <= get < 2.1 * PAYLOAD  # each follower downloads once
        assert tiered["fallback_bytes"] == 0
        assert tiered["metadata_records", scheme] > 0 and tiered["metadata_bytes", scheme] > 0
