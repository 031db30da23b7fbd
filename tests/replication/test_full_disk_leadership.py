"""A leader whose disk fills up hands its leaderships to in-sync replicas elsewhere and takes
them back as a follower once space is freed (Kafka moves the leaders of a failed log dir).

Broker 0's data directory is a 64 MB tmpfs of the test's own; a ballast file fills it past
the broker's reserve. An acks=all producer (confluent-kafka) to the partitions broker 0 led
keeps going: its first appends are refused (KAFKA_STORAGE_ERROR, retried), broker 0's next
heartbeat reports its log dir offline, and the controller moves the leaderships.
"""

from __future__ import annotations

import time

from confluent_kafka import Producer

from support.clients import consume_all
from support.disks import free_bytes, tmpfs
from support.processes import Cluster
from support.topics import create_topic, partition_metadata
from support.wait import wait_until

PARTITIONS = 3


def test_a_leader_whose_disk_fills_hands_its_leaderships_over(tmp_path, topic_name):
    root = tmp_path / "cluster"
    with tmpfs(root / "broker-0", 64) as disk:
        cluster = Cluster(root).start()
        try:
            create_topic(cluster.bootstrap, topic_name, PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": "2"}, in_sync=True)
            led_by_0 = [p for p in range(PARTITIONS)
                        if partition_metadata(cluster.bootstrap, topic_name, p).leader == 0]
            assert led_by_0, "the controller places one leader on each broker"

            # Leave broker 0 less free space than its reserve (5 % of the disk).
            with open(disk / "ballast", "wb") as ballast:
                ballast.write(b"\0" * (free_bytes(disk) - (1 << 20)))

            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "message.timeout.ms": 30000})
            values = [f"value-{i}".encode() for i in range(200)]
            started = time.monotonic()
            for value in values:
                producer.produce(topic_name, value, partition=led_by_0[0])
            assert producer.flush(60) == 0
            moved_after = time.monotonic() - started
            leaders = {p: partition_metadata(cluster.bootstrap, topic_name, p).leader
                       for p in led_by_0}
            assert 0 not in leaders.values(), leaders
            assert 0 not in partition_metadata(cluster.bootstrap, topic_name, led_by_0[0]).isrs
            print(f"every record acknowledged {moved_after:.1f} s after the disk filled; "
                  f"new leaders {leaders}")
            assert consume_all(cluster.bootstrap, topic_name, len(values)) == values

            # Space is back: broker 0 catches up as a follower and rejoins the ISR.
            (disk / "ballast").unlink()
            wait_until(lambda: 0 in partition_metadata(cluster.bootstrap, topic_name,
                                                       led_by_0[0]).isrs, 30, 0.5)
        finally:
            cluster.stop()
