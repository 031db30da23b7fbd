"""Automatic preferred-leader rebalancing (auto.leader.rebalance.enable): a broker killed
-9 and brought back leads its preferred partitions again once it is back in their ISRs,
within the check interval."""

from __future__ import annotations

import time

from kafka.admin import KafkaAdminClient, NewTopic

from support.clients import ConfluentWriter
from support.processes import Cluster
from support.topics import partition_metadata
from support.wait import wait_until

CHECK_INTERVAL_S = 1


def test_leadership_returns_to_the_preferred_replicas(tmp_path, topic_name):
    cluster = Cluster(tmp_path, broker_env={
        "KIPPER_AUTO_LEADER_REBALANCE_ENABLE": "true",
        "KIPPER_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": str(CHECK_INTERVAL_S)}).start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        preferred = {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]}
        admin.create_topics([NewTopic(topic_name, replica_assignments=preferred)])
        admin.close()

        def leaders() -> list[int] | None:
            infos = [partition_metadata(cluster.bootstrap, topic_name, p) for p in preferred]
            return [i.leader for i in infos] if all(infos) else None

        wait_until(lambda: leaders() == [0, 1, 2], 30, interval=0.2)
        writer = ConfluentWriter(cluster.bootstrap)
        writer.send(topic_name, *(b"x" * 100 for _ in range(1000)))
        assert writer.flush() == 0

        cluster.brokers[0].kill()
        wait_until(lambda: leaders() == [1, 1, 2], 30, interval=0.2)
        cluster.brokers[0].start()
        back = time.monotonic()
        wait_until(lambda: leaders() == [0, 1, 2], 30, interval=0.2)
        # Rejoining the ISR takes a fetch or two; the move back at most one interval more.
        print(f"leadership back on broker 0 {time.monotonic() - back:.1f} s after its restart")
    finally:
        cluster.stop()
