"""KIP-848 vs the classic group protocol: the longest pause in consumption while members
join and leave, and where a rack-aware consumer group's fetch bytes go.

1. Pause: one broker (`kipper cluster up --brokers 1`), a 6-partition topic fed at a steady
   rate; three confluent-kafka consumers, a fourth joins, then one leaves. For each phase,
   each partition's longest interval without a record consumed from it, for
   ``group.protocol=classic`` (eager rebalances, librdkafka's default range,roundrobin) and
   ``group.protocol=consumer`` (the broker assigns, incrementally), on the same scenario,
   ``--runs`` times each, alternating: per run the longest over the partitions, their mean
   and how many paused over a second; then the medians of the longest and their ratio.
   (The group as a whole hardly ever stops in either: members that have not yet heard of an
   eager rebalance keep consuming.)
2. AZ bytes: three brokers in az1..az3, a diskless topic, three ``group.protocol=consumer``
   members with ``client.rack`` az1..az3: the consumer fetch bytes the brokers counted, same-AZ
   and cross-AZ (broker/traffic.py's counters).

    python -m bench.consumer_protocol_bench [--records-per-second 500 --phase-seconds 12
                                             --runs 3 --heartbeat-interval-ms 5000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.local_cluster import LocalCluster

PARTITIONS = 6
PROTOCOLS = ("classic", "consumer")


class Member(threading.Thread):
    """A consumer in a thread of its own, noting when it consumed a record of which
    partition."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str,
                 consumed: list[tuple[float, int]], rack: str | None = None) -> None:
        super().__init__(daemon=True)
        config = {"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "group.protocol": protocol}
        if rack is not None:
            config |= {"client.rack": rack, "client.id": f"bench,az={rack}"}
        self.consumer = Consumer(config)
        self.consumer.subscribe([topic])
        self.consumed = consumed
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            message = self.consumer.poll(0.05)
            if message is not None and message.error() is None:
                self.consumed.append((time.monotonic(), message.partition()))
        self.consumer.close()

    def stop(self) -> None:
        self.stopping = True
        self.join()


def feed(bootstrap: str, topic: str, rate: int, until: list[bool]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = 0
    start = time.monotonic()
    while not until[0]:
        producer.produce(topic, b"x" * 100, partition=sent % PARTITIONS)
        sent += 1
        producer.poll(0)
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush()


def create_topic(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer
    admin.create_topics([topic])[topic.topic].result()


def partition_pauses(bootstrap: str, protocol: str, rate: int, phase: float
                     ) -> dict[str, list[float]]:
    """Each partition's longest interval without a record consumed, while a fourth member
    joins ("join") and then while one leaves ("leave")."""
    topic = group = f"pause-{protocol}-{time.time_ns()}"
    create_topic(bootstrap, NewTopic(topic, PARTITIONS, 1))
    stop = [False]
    producer = threading.Thread(target=feed, args=(bootstrap, topic, rate, stop), daemon=True)
    producer.start()
    consumed: list[tuple[float, int]] = []
    members = [Member(bootstrap, topic, group, protocol, consumed) for _ in range(3)]
    for m in members:
        m.start()
    time.sleep(phase)
    joins = time.monotonic()
    fourth = Member(bootstrap, topic, group, protocol, consumed)
    fourth.start()
    time.sleep(phase)
    leaves = time.monotonic()
    members[1].stop()
    time.sleep(phase)
    end = time.monotonic()
    for m in (members[0], members[2], fourth):
        m.stop()
    stop[0] = True
    producer.join()
    return {"join": _longest_gaps(consumed, joins, leaves),
            "leave": _longest_gaps(consumed, leaves, end)}


def _longest_gaps(consumed: list[tuple[float, int]], start: float, end: float) -> list[float]:
    gaps = []
    for partition in range(PARTITIONS):
        times = [start] + sorted(t for t, p in consumed
                                 if p == partition and start <= t <= end) + [end]
        gaps.append(max(b - a for a, b in zip(times, times[1:])))
    return gaps


def az_fetch_bytes(root: Path, rate: int, phase: float) -> Counter:
    cluster = LocalCluster(root, brokers=3, metrics=True).start()
    try:
        bootstrap = cluster.bootstrap
        topic = "az-diskless"
        create_topic(bootstrap, NewTopic(topic, PARTITIONS, 1,
                                         config={"kipper.storage.mode": "diskless"}))
        before = fetch_bytes(cluster)
        stop = [False]
        producer = threading.Thread(target=feed, args=(bootstrap, topic, rate, stop),
                                    daemon=True)
        producer.start()
        consumed: list[tuple[float, int]] = []
        members = [Member(bootstrap, topic, "az-group", "consumer", consumed, f"az{i + 1}")
                   for i in range(3)]
        for m in members:
            m.start()
        time.sleep(2 * phase)
        stop[0] = True
        producer.join()
        time.sleep(2)
        for m in members:
            m.stop()
        after = fetch_bytes(cluster)
        return Counter({k: after[k] - before[k] for k in after}) | Counter(
            {"records": len(consumed)})
    finally:
        cluster.stop()


def fetch_bytes(cluster: LocalCluster) -> Counter:
    totals: Counter = Counter()
    for node in range(3):
        for row in cluster.metrics_json(node)["network"]["server"]:
            if row["class"] == "fetch-consumer":
                locality = ("unknown-az" if row["peer_az"] == "unknown" else "same-az"
                            if row["peer_az"] == row["local_az"] else "cross-az")
                totals[locality] += row["bytes"]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-per-second", type=int, default=500)
    parser.add_argument("--phase-seconds", type=float, default=12.0)
    parser.add_argument("--runs", type=int, default=3,
                        help="scenarios per protocol, alternating (pauses vary with where "
                        "each member's heartbeat timer stands)")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=None,
                        help="the broker's group_consumer_heartbeat_interval_ms (default: "
                        "kipper's, Kafka's 5000): a member learns of partitions freed by a "
                        "leaving member at its next heartbeat")
    args = parser.parse_args()
    if args.heartbeat_interval_ms is not None:
        # The launcher's nodes inherit the environment (KIPPER_* settings).
        os.environ["KIPPER_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS"] = str(
            args.heartbeat_interval_ms)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "pause", brokers=1).start()
        longest: dict[tuple[str, str], list[float]] = {}
        try:
            for run in range(args.runs):
                for protocol in PROTOCOLS:
                    pauses = partition_pauses(cluster.bootstrap, protocol,
                                              args.records_per_second, args.phase_seconds)
                    for phase, gaps in pauses.items():
                        longest.setdefault((protocol, phase), []).append(max(gaps))
                        print(f"run {run + 1} group.protocol={protocol:8} {phase:5}: longest "
                              f"partition pause {max(gaps):.2f} s, mean "
                              f"{statistics.mean(gaps):.2f} s, paused over 1 s: "
                              f"{sum(g > 1 for g in gaps)}/{PARTITIONS}")
        finally:
            cluster.stop()
        for phase in ("join", "leave"):
            classic = statistics.median(longest["classic", phase])
            consumer = statistics.median(longest["consumer", phase])
            print(f"{phase}: median of the longest partition pause, classic {classic:.2f} s, "
                  f"consumer {consumer:.2f} s, classic / consumer {classic / consumer:.1f}x")
        az = az_fetch_bytes(Path(tmp) / "az", args.records_per_second, args.phase_seconds)
        total = az["same-az"] + az["cross-az"]
        print(f"diskless, 3 members in az1..az3 ({az['records']} records consumed): consumer "
              f"fetch bytes same-AZ {az['same-az']}, cross-AZ {az['cross-az']} "
              f"({az['cross-az'] / max(total, 1):.1%}), AZ unknown {az['unknown-az']}")


if __name__ == "__main__":
    main()
