"""KIP-1176's lagging-follower fallback, digest §6 claim 16: the bytes a follower gets as raw
records from the leader when it comes back below the objects (they were deleted while it was
down), and the cross-AZ replication bytes that costs, against the same produce with every
follower in sync.

One `kipper cluster up` (3 brokers in az1..az3, embedded S3, metrics on) and an RF=3
active-tiered topic of one partition (`memory` metadata scheme, `active.tiered.wal.retention.ms`
1 s, so objects go soon after their upload). Two phases, each --mb MiB of 1 KiB records with
acks=1 through the partition's leader; the leader's /metrics.json counters are read before
and after (`active_tiered.fallback_bytes`, network bytes of class replication to another AZ):

1. in sync: every follower up; they fetch pointers and download the objects.
2. behind the objects: one follower is killed (kill -9) first; once the leader has deleted
   every object it uploaded, the follower is started again (`kipper cluster start-broker`)
   and catches up (the catch-up time is measured). What it missed is the leader's log bytes
   less its own (the segment files) when it was started again.

Each phase ends once every replica is in the ISR and holds the same log bytes.

    python -m bench.tiered_fallback_bench                    # ~1 minute
    python -m bench.tiered_fallback_bench --mb 64 --json docs/findings/tiered-fallback.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.controller_failover_bench import start_broker, wait_for
from bench.diskless_bench import create_topic
from bench.local_cluster import LocalCluster
from bench.run_json import write_run
from bench.tiered_bench import broker_counters

TOPIC = "fallback"
MIB = 1 << 20


@dataclass(frozen=True)
class Phase:
    name: str
    produced_bytes: int
    # Log bytes the stopped follower lacked when it started again (0: none was stopped).
    missed_bytes: int
    # On the leader, over the phase: raw records sent to followers, and replication bytes
    # its network counters saw cross an AZ (raw records and pointer batches).
    fallback_bytes: int
    cross_az_replication_bytes: int
    # Of those, to the AZ of the follower stopped in the phase (all of them if none was).
    to_follower_az_bytes: int
    uploads: int
    deleted_objects: int
    catch_up_s: float | None = None  # the restarted follower, until the ISR was full again

    def as_dict(self) -> dict:
        return {**asdict(self),
                "fallback_per_missed": self.fallback_bytes / self.missed_bytes
                if self.missed_bytes else None,
                "to_follower_per_missed": self.to_follower_az_bytes / self.missed_bytes
                if self.missed_bytes else None,
                "cross_az_per_produced": self.cross_az_replication_bytes / self.produced_bytes}


def per_bucket_total(counters: Counter, name: str) -> int:
    """A per-bucket counter of broker_counters (keyed (name, bucket)) over all buckets."""
    return sum(n for key, n in counters.items()
               if isinstance(key, tuple) and len(key) == 2 and key[0] == name)


def replication_bytes_to(cluster: LocalCluster, leader: int, az: str) -> int:
    """Replication bytes the leader's network counters saw go to clients in ``az``."""
    return sum(row["bytes"] for row in cluster.metrics_json(leader)["network"]["server"]
               if row["class"] == "replication" and row["peer_az"] == az)


def log_bytes(cluster: LocalCluster, node: int) -> int:
    """Bytes of the partition's log segments in broker ``node``'s data directory."""
    directory = cluster.root / "data" / f"broker-{node}" / f"{TOPIC}-0"
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def caught_up(cluster: LocalCluster, nodes: list[int]) -> bool:
    """Every replica in the ISR and holding the same log bytes."""
    return (len(partition_view(cluster.bootstrap)[2]) == len(nodes)
            and len({log_bytes(cluster, node) for node in nodes}) == 1)


def partition_view(bootstrap: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, ISR) of the topic's partition."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    partition = metadata.topics[TOPIC].partitions[0]
    return partition.leader, list(partition.replicas), list(partition.isrs)


def produce(bootstrap: str, mb: float) -> int:
    """``mb`` MiB of 1 KiB records with acks=1; the bytes produced."""
    record = os.urandom(1024)
    count = int(mb * MIB / len(record))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, record, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records not acknowledged within 120 s")
    return count * len(record)


def phase(cluster: LocalCluster, name: str, leader: int, replicas: list[int],
          produce_mb: float, follower: int | None = None) -> Phase:
    """Produce, then wait until every replica holds the same log; with ``follower``, that
    follower is down during the produce and started again once the leader deleted every
    object."""
    before = broker_counters(cluster, [leader])
    follower_az = None if follower is None else cluster.broker(follower)["rack"]
    before_to_follower = 0 if follower_az is None else replication_bytes_to(
        cluster, leader, follower_az)
    if follower is not None:
        cluster.kill_broker(follower)
    produced = produce(cluster.bootstrap, produce_mb)
    catch_up_s, missed = None, 0
    if follower is not None:
        def objects_gone() -> bool:
            grown = broker_counters(cluster, [leader]) - before
            uploads = per_bucket_total(grown, "uploads")
            return uploads > 0 and per_bucket_total(grown, "deleted_objects") >= uploads
        wait_for(objects_gone, 120, "the leader deleted its objects")
        missed = log_bytes(cluster, leader) - log_bytes(cluster, follower)
        started = time.monotonic()
        start_broker(cluster, follower)
    wait_for(lambda: caught_up(cluster, replicas), 180, "every replica caught up")
    if follower is not None:
        catch_up_s = time.monotonic() - started
    grown = broker_counters(cluster, [leader]) - before
    cross = grown["network", "replication", "cross"]
    to_follower = cross if follower_az is None else (
        replication_bytes_to(cluster, leader, follower_az) - before_to_follower)
    return Phase(name, produced, missed, grown["fallback_bytes"], cross, to_follower,
                 per_bucket_total(grown, "uploads"),
                 per_bucket_total(grown, "deleted_objects"), catch_up_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tiered_fallback_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=32, help="MiB produced per phase (default 32)")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-tiered-fallback-") as tmp:
        cluster = LocalCluster(Path(tmp), brokers=3, metrics=True).start()
        try:
            create_topic(cluster.bootstrap, TOPIC, 1, 3, {
                "kipper.storage.mode": "active-tiered",
                "active.tiered.metadata.scheme": "memory",
                "active.tiered.wal.retention.ms": "1000"})
            wait_for(lambda: len(partition_view(cluster.bootstrap)[2]) == 3, 60, "a full ISR")
            leader, replicas, _ = partition_view(cluster.bootstrap)
            follower = next(node for node in replicas if node != leader)
            phases = [phase(cluster, "in sync", leader, replicas, args.mb),
                      phase(cluster, "behind the objects", leader, replicas, args.mb, follower)]
        finally:
            cluster.stop()
    wall_s = time.perf_counter() - started
    print(f"{wall_s:.0f} s; {args.mb:g} MiB per phase, leader broker {leader}, follower "
          f"{follower} stopped in the second\n")
    print("| phase | produced MiB | missed MiB | fallback MiB | cross-AZ replication MiB (to "
          "the stopped follower's AZ) | uploads / deleted | catch-up s |")
    print("|---|---|---|---|---|---|---|")
    for ph in phases:
        catch_up = "-" if ph.catch_up_s is None else f"{ph.catch_up_s:.1f}"
        print(f"| {ph.name} | {ph.produced_bytes / MIB:.1f} | {ph.missed_bytes / MIB:.2f} "
              f"| {ph.fallback_bytes / MIB:.2f} | {ph.cross_az_replication_bytes / MIB:.2f} "
              f"({ph.to_follower_az_bytes / MIB:.2f}) "
              f"| {ph.uploads} / {ph.deleted_objects} | {catch_up} |")
    if args.json:
        write_run(args.json, args, wall_s, phases=[ph.as_dict() for ph in phases])
    return 0


if __name__ == "__main__":
    sys.exit(main())
