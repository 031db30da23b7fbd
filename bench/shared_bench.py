"""Shared storage (KIP-1183) failover: kill -9 of partition leaders under an idempotent
acks=all producer, and how long a new leader takes to reopen partitions from object storage.

Failover cycles (`--cycles`, on a `kipper cluster up` of 3 brokers, all controller voters):
each cycle kills the leader of the next partition of a 6-partition shared topic (whether or
not it is the active controller), waits until every partition takes writes again, starts
the broker again and waits until every live replica is back in the ISRs. At the end every
acknowledged record is read back: none may be missing or appear twice. Printed: the write
stop of the partitions the killed broker led, and the reopen figures the new leaders log.

Produce latency (`--latency-profiles`, a cluster per S3 latency profile): acks=all P50/P99
of the shared mode next to the other three, each on a 3-partition RF=3 topic of its mode,
with bench/diskless_bench.py's paced producers (one per AZ, 1 KiB records, linger.ms=0).

Reopen (`--reopen-partitions`, on a cluster of its own): a shared topic of N partitions, all
led by one broker that is not the active controller, each partition written
`--records-per-partition` records of 1 KiB; once they are in data objects the broker is
killed, and the broker that takes them over logs how long reopening them took (all at once:
the wave; and per partition). Run with `--reopen-partitions 1` for one partition alone.

    python -m bench.shared_bench [--cycles 20] [--reopen-partitions 1,1000]
                                 [--records-per-partition 20]
                                 [--latency-profiles s3-standard,s3-express]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.controller_failover_bench import (
    PARTITIONS,
    Producing,
    active_controller,
    fully_replicated,
    read_back,
    start_broker,
    wait_for,
)
from bench.diskless_bench import LatencyResult, latency_case, start_cluster
from bench.local_cluster import LocalCluster

BROKERS = 3
MODES = ("classic", "active-tiered", "diskless", "shared")
CLUSTER_ENV = {"KIPPER_BROKER_SESSION_TIMEOUT_MS": "3000",
               "KIPPER_REPLICA_LAG_TIME_MAX_MS": "4000",
               "KIPPER_SHARED_DATA_OBJECT_INTERVAL_MS": "1000"}
SHARED = {"kipper.storage.mode": "shared"}
# The line the engine logs once a wave of new leaderships is reopened (storage.shared).
_REOPEN_LINE = re.compile(
    r"^\[broker-(\d+)\] \S+ \S+ INFO storage\.shared: reopened (\d+) partition\(s\) from object "
    r"storage in ([\d.]+) s \(per partition: median ([\d.]+) s, max ([\d.]+) s\)")


@dataclass(frozen=True)
class Reopen:
    node: int
    partitions: int
    wave_s: float
    median_s: float
    max_s: float


def reopens_in(text: str) -> list[Reopen]:
    return [Reopen(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5]))
            for line in text.splitlines() if (m := _REOPEN_LINE.match(line))]


def _admin(cluster: LocalCluster):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create_shared_topic(cluster: LocalCluster, topic: str, partitions: int,
                        assignment: list[list[int]] | None = None) -> None:
    """``assignment``: the replicas of each partition, the first its leader (through
    kafka-python: confluent-kafka refuses a replica assignment without a partition count)."""
    if assignment is None:
        from confluent_kafka.admin import NewTopic
        admin = _admin(cluster)  # kept alive until the answer: its futures die with it
        for future in admin.create_topics([NewTopic(topic, partitions, BROKERS, config=SHARED)],
                                          operation_timeout=60).values():
            future.result(120)
        return
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as AssignedTopic
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=120_000)
    try:
        admin.create_topics([AssignedTopic(topic, -1, -1, dict(enumerate(assignment)), SHARED)],
                            timeout_ms=120_000)
    finally:
        admin.close()


def leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    metadata = _admin(cluster).list_topics(topic, timeout=10).topics[topic]
    return {p: info.leader for p, info in metadata.partitions.items()}


# --- failover cycles ---------------------------------------------------------------------

@dataclass
class FailoverResult:
    acked: int
    lost: int
    duplicated: int
    write_stops: list[float]
    reopens: list[Reopen]
    producer_errors: dict[str, int]


def run_failover(cluster: LocalCluster, cycles: int, topic: str = "shared-failover"
                 ) -> FailoverResult:
    create_shared_topic(cluster, topic, PARTITIONS)
    wait_for(lambda: fully_replicated(cluster.bootstrap, topic), 60, "topic ready")
    producing = Producing(cluster.bootstrap, topic).start()
    alive = set(range(BROKERS))
    stops: list[float] = []
    reopens: list[Reopen] = []
    try:
        time.sleep(1.0)
        for cycle in range(cycles):
            active_controller(cluster, alive)
            led = leaders(cluster, topic)
            node = led[cycle % PARTITIONS]
            position = cluster.log_size()
            killed_at = time.monotonic()
            cluster.kill_broker(node)
            alive.discard(node)
            wait_for(lambda: producing.all_acked_since(killed_at), 60, "writes resumed")
            stops.append(producing.write_stop_around(
                killed_at, partitions={p for p, leader in led.items() if leader == node}))
            start_broker(cluster, node)
            alive.add(node)
            wait_for(lambda: fully_replicated(cluster.bootstrap, topic), 90, "ISR back")
            reopens += reopens_in(cluster.log_since(position))
            time.sleep(0.5)
    finally:
        producing.stop()
    seen = read_back(cluster.bootstrap, topic)
    return FailoverResult(len(producing.acked),
                          sum(1 for value in producing.acked if seen[value] == 0),
                          sum(1 for count in seen.values() if count > 1), stops, reopens,
                          dict(producing.errors))


# --- reopening many partitions at once ---------------------------------------------------

def run_reopen(cluster: LocalCluster, partitions: int, records_per_partition: int
               ) -> list[Reopen]:
    """Kill the leader of ``partitions`` partitions; the waves of reopens its successor
    logged."""
    from confluent_kafka import Producer
    controller = active_controller(cluster, set(range(BROKERS))).leader_id
    victim, heir = [n for n in range(BROKERS) if n != controller][:2]
    topic = f"shared-reopen-{partitions}"
    create_shared_topic(cluster, topic, partitions, [[victim, heir]] * partitions)
    wait_for(lambda: all(leader == victim for leader in leaders(cluster, topic).values())
             and len(leaders(cluster, topic)) == partitions, 120, "partitions led")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 1024
    for i in range(records_per_partition):
        for partition in range(partitions):
            while True:
                try:
                    producer.produce(topic, value, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0, "records not acknowledged"
    time.sleep(3.0)  # data objects replace the WAL ranges (1 s interval)
    position = cluster.log_size()
    cluster.kill_broker(victim)
    found: list[Reopen] = []

    def all_reopened() -> bool:
        found[:] = [r for r in reopens_in(cluster.log_since(position)) if r.node == heir]
        return sum(r.partitions for r in found) >= partitions

    wait_for(all_reopened, 300, f"{partitions} partitions reopened")
    start_broker(cluster, victim)
    return found


# --- produce latency per mode ------------------------------------------------------------

def run_latency(root: Path, profiles: list[str], args: argparse.Namespace) -> list[LatencyResult]:
    results = []
    for profile in profiles:
        cluster = start_cluster(root, profile)
        try:
            for mode in MODES:
                results.append(latency_case(cluster, f"{mode} RF=3", profile,
                                            {"kipper.storage.mode": mode}, args))
        finally:
            cluster.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shared_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=20, help="leader kills (default 20)")
    parser.add_argument("--reopen-partitions", default="1,1000",
                        help="partition counts reopened at once (default 1,1000)")
    parser.add_argument("--records-per-partition", type=int, default=20)
    parser.add_argument("--latency-profiles", default="s3-standard,s3-express",
                        help="S3 latency profiles of the produce latency runs ('' for none)")
    parser.add_argument("--records", type=int, default=3000,
                        help="measured records per latency case, over 3 producers")
    parser.add_argument("--rate", type=float, default=150, help="records/s per latency case")
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--record-size", type=int, default=1024)
    args = parser.parse_args(argv)
    failed = False
    if args.cycles:
        with tempfile.TemporaryDirectory(prefix="shared-bench-") as root:
            cluster = LocalCluster(Path(root), brokers=BROKERS, env=CLUSTER_ENV).start()
            try:
                result = run_failover(cluster, args.cycles)
            finally:
                cluster.stop()
        stops = sorted(result.write_stops)
        print(f"failover: {args.cycles} leader kills, {result.acked} acknowledged, "
              f"{result.lost} lost, {result.duplicated} duplicated, producer errors "
              f"{result.producer_errors}")
        print(f"  write stop of the killed leader's partitions: median "
              f"{stops[len(stops) // 2]:.2f} s, max {stops[-1]:.2f} s (session timeout 3 s)")
        if result.reopens:
            print(f"  reopen waves: {len(result.reopens)}, per partition median of medians "
                  f"{sorted(r.median_s for r in result.reopens)[len(result.reopens) // 2]:.3f}"
                  f" s, slowest partition {max(r.max_s for r in result.reopens):.3f} s")
        failed |= bool(result.lost or result.duplicated)
    for partitions in [int(n) for n in args.reopen_partitions.split(",") if n]:
        with tempfile.TemporaryDirectory(prefix="shared-reopen-") as root:
            cluster = LocalCluster(Path(root), brokers=BROKERS, env=CLUSTER_ENV).start()
            try:
                waves = run_reopen(cluster, partitions, args.records_per_partition)
            finally:
                cluster.stop()
        total = sum(w.partitions for w in waves)
        print(f"reopen of {partitions} partition(s) x {args.records_per_partition} KiB: "
              f"{total} reopened in {len(waves)} wave(s) taking "
              f"{', '.join(f'{w.wave_s:.2f} s' for w in waves)}; per partition median "
              f"{max(w.median_s for w in waves):.3f} s, max {max(w.max_s for w in waves):.3f} s",
              flush=True)
    profiles = [p for p in args.latency_profiles.split(",") if p]
    if profiles:
        with tempfile.TemporaryDirectory(prefix="shared-latency-") as root:
            latencies = run_latency(Path(root), profiles, args)
        print("acks=all produce latency (ms):")
        for result in latencies:
            mean = statistics.fmean(result.latencies_ms) if result.latencies_ms else float("nan")
            print(f"  {result.profile:<12} {result.case:<20} P50 {result.quantile(0.5):6.0f}  "
                  f"P99 {result.quantile(0.99):6.0f}  mean {mean:6.0f}  "
                  f"errors {result.errors or 0}", flush=True)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
