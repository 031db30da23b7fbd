"""Transactions: produce throughput against idempotence, commit latency, and the diskless WAL
bytes of aborted and fenced batches that garbage collection later reclaims.

One `kipper cluster up` (3 brokers in az1..az3, the embedded S3 server, metrics endpoints),
all on loopback, everything measured in one run so the ratios compare like with like:

1. Per storage mode (classic RF=3, active-tiered RF=3, diskless), a 1-partition topic per case,
   one confluent-kafka producer (acks=all, linger.ms 5, ``batch.num.messages`` = --batch-records
   so a batch holds that many records of --record-bytes random bytes):
   - idempotent: records produced without pause for --seconds, then flushed;
   - transactional with transactions of 1, 10 and 100 batches: begin, produce the transaction's
     records, flush (every batch acknowledged), commit; repeated for --seconds.
   Throughput is acknowledged records (and MB) per second over the case; the commit latency is
   the time of ``commit_transaction()`` after the flush: EndTxn, the coordinator's markers
   written to the partition, the answer. P50/P99 are nearest-rank.
2. Diskless reclaim: --reclaim-transactions aborted transactions of 10 batches, then
   --reclaim-zombies zombie producers, each fenced by a successor with its transactional id
   and then sending a batch that the batch coordinator refuses at commit. Reported: the WAL
   bytes in the object store and the coordinator's dead bytes after each step; then the
   aborted records are deleted (DeleteRecords to the end) and the run waits for garbage
   collection to delete the WAL objects nobody points to, and reports the bytes reclaimed.

    python -m bench.txn_bench                         # ~4 minutes
    python -m bench.txn_bench --seconds 30 --json out.json
    python -m bench.txn_bench --modes diskless --skip-reclaim
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import boto3
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.local_cluster import LocalCluster
from storage.objectstore import WAL_BUCKET
from storage.objectstore.embedded import ACCESS_KEY, SECRET_KEY

MODES = ("classic", "active-tiered", "diskless")
REPLICATION = {"classic": 3, "active-tiered": 3, "diskless": 1}
TRANSACTION_BATCHES = (1, 10, 100)
# Garbage collection within the run: objects nobody points to are deleted a second later;
# no merging, so that dead bytes are those of refused and deleted batches only (a merge
# leaves the objects it merged dead too).
HOUSEKEEPING = {"KIPPER_DISKLESS_HOUSEKEEPING_INTERVAL_MS": "500",
                "KIPPER_DISKLESS_ORPHAN_GRACE_MS": "3000",
                "KIPPER_DISKLESS_OBJECT_DELETE_DELAY_MS": "1000",
                "KIPPER_DISKLESS_MERGE_MIN_OBJECTS": "1000000"}


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class CaseResult:
    mode: str
    case: str  # "idempotent" or "txn-<batches>"
    records: int
    seconds: float
    record_bytes: int
    transactions: int = 0
    commit_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["commit_ms"]
        return {**data, "records_per_s": self.records_per_s,
                "mb_per_s": self.records_per_s * self.record_bytes / 1e6,
                "commit_p50_ms": nearest_rank(self.commit_ms, 0.50),
                "commit_p99_ms": nearest_rank(self.commit_ms, 0.99)}


def create(admin: AdminClient, topic: str, mode: str) -> None:
    admin.create_topics([NewTopic(topic, 1, REPLICATION[mode],
                                  config={"kipper.storage.mode": mode})])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
        if partitions and all(p.leader >= 0 and len(p.isrs) >= REPLICATION[mode]
                              for p in partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: no leader with a full ISR in 30 s")


def producer_config(args: argparse.Namespace, bootstrap: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "batch.num.messages": args.batch_records,
            "batch.size": 2 * args.batch_records * (args.record_bytes + 64),
            # At most a transaction of the largest size queued: the idempotent case measures
            # what the cluster acknowledges, not how fast librdkafka's queue fills.
            "queue.buffering.max.messages": max(TRANSACTION_BATCHES) * args.batch_records,
            **extra}


def produce(producer: Producer, topic: str, value: bytes, count: int) -> None:
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)


def run_idempotent(args: argparse.Namespace, bootstrap: str, mode: str, topic: str) -> CaseResult:
    producer = Producer(producer_config(args, bootstrap))
    value = os.urandom(args.record_bytes)
    started = time.monotonic()
    records = 0
    while time.monotonic() - started < args.seconds:
        produce(producer, topic, value, args.batch_records)
        records += args.batch_records
    assert producer.flush(120) == 0, "records left undelivered"
    return CaseResult(mode, "idempotent", records, time.monotonic() - started, args.record_bytes)


def run_transactional(args: argparse.Namespace, bootstrap: str, mode: str, topic: str,
                      batches: int) -> CaseResult:
    producer = Producer(producer_config(args, bootstrap,
                                        **{"transactional.id": f"bench-{topic}"}))
    producer.init_transactions(60)
    value = os.urandom(args.record_bytes)
    result = CaseResult(mode, f"txn-{batches}", 0, 0.0, args.record_bytes)
    started = time.monotonic()
    while time.monotonic() - started < args.seconds:
        producer.begin_transaction()
        produce(producer, topic, value, batches * args.batch_records)
        assert producer.flush(120) == 0, "records left undelivered"
        committing = time.monotonic()
        producer.commit_transaction(60)
        result.commit_ms.append((time.monotonic() - committing) * 1000)
        result.records += batches * args.batch_records
        result.transactions += 1
    result.seconds = time.monotonic() - started
    return result


# --------------------------------------------------------------------------- reclaim


@dataclass
class ReclaimResult:
    aborted_transactions: int
    fenced_producers: int
    fenced_errors: int  # zombies whose send was refused as fenced
    wal_bytes: dict[str, int] = field(default_factory=dict)  # after each step
    dead_bytes: dict[str, int] = field(default_factory=dict)
    reclaim_s: float | None = None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["reclaimed_bytes"] = (self.wal_bytes.get("written", 0)
                                   - self.wal_bytes.get("collected", 0))
        return data


class ClusterStorage:
    """The cluster's WAL objects in its embedded S3 server, and the coordinator's numbers."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.s3 = boto3.client("s3", endpoint_url=cluster.nodes["s3"]["endpoint"],
                               aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                               region_name="us-east-1")

    def wal_bytes(self) -> int:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=WAL_BUCKET)
        return sum(item["Size"] for page in pages for item in page.get("Contents", []))

    def dead_bytes(self) -> int:
        """The writable batch coordinator's dead bytes (objects' bytes no batch points to)."""
        for node in range(self.cluster.brokers):
            coordinator = self.cluster.metrics_json(node).get("diskless", {}).get(
                "coordinator", {})
            if coordinator.get("is_coordinator"):
                return int(coordinator["dead_bytes"])
        return 0


def run_reclaim(args: argparse.Namespace, cluster: LocalCluster, admin: AdminClient) -> ReclaimResult:
    storage = ClusterStorage(cluster)
    topic = f"reclaim-{uuid.uuid4().hex[:6]}"
    create(admin, topic, "diskless")
    result = ReclaimResult(args.reclaim_transactions, args.reclaim_zombies, 0)
    result.wal_bytes["before"], result.dead_bytes["before"] = storage.wal_bytes(), storage.dead_bytes()

    value = os.urandom(args.record_bytes)
    aborting = Producer(producer_config(args, cluster.bootstrap,
                                        **{"transactional.id": f"bench-abort-{topic}"}))
    aborting.init_transactions(60)
    for _ in range(args.reclaim_transactions):
        aborting.begin_transaction()
        produce(aborting, topic, value, 10 * args.batch_records)
        assert aborting.flush(120) == 0
        aborting.abort_transaction(60)
    result.wal_bytes["aborted"], result.dead_bytes["aborted"] = storage.wal_bytes(), storage.dead_bytes()

    for n in range(args.reclaim_zombies):
        config = producer_config(args, cluster.bootstrap,
                                 **{"transactional.id": f"bench-zombie-{topic}-{n}"})
        zombie = Producer(config)
        zombie.init_transactions(60)
        zombie.begin_transaction()
        zombie.produce(topic, value, partition=0)
        assert zombie.flush(60) == 0
        Producer(config).init_transactions(60)  # the successor fences the zombie
        try:
            produce(zombie, topic, value, args.batch_records)
            zombie.flush(60)
            zombie.commit_transaction(30)
        except KafkaException:
            result.fenced_errors += 1
    result.wal_bytes["fenced"], result.dead_bytes["fenced"] = storage.wal_bytes(), storage.dead_bytes()
    result.wal_bytes["written"] = result.wal_bytes["fenced"]

    # Retention's way out for the aborted records: delete everything up to the end.
    end = TopicPartition(topic, 0, _high_watermark(cluster.bootstrap, topic))
    admin.delete_records([end])[end].result(30)
    started = time.monotonic()
    target = result.wal_bytes["before"]
    while time.monotonic() - started < args.reclaim_timeout:
        if storage.wal_bytes() <= target:
            break
        time.sleep(0.5)
    result.reclaim_s = time.monotonic() - started
    result.wal_bytes["collected"], result.dead_bytes["collected"] = storage.wal_bytes(), storage.dead_bytes()
    return result


def _high_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


# --------------------------------------------------------------------------- main


def print_table(cases: list[CaseResult]) -> None:
    baseline = {c.mode: c.records_per_s for c in cases if c.case == "idempotent"}
    print(f"{'mode':<14}{'case':<12}{'records/s':>11}{'MB/s':>8}{'vs idem':>9}"
          f"{'txns':>6}{'commit P50 ms':>15}{'P99 ms':>9}")
    for c in cases:
        d = c.as_dict()
        ratio = c.records_per_s / baseline[c.mode] if baseline.get(c.mode) else float("nan")
        p50 = "" if d["commit_p50_ms"] is None else f"{d['commit_p50_ms']:.1f}"
        p99 = "" if d["commit_p99_ms"] is None else f"{d['commit_p99_ms']:.1f}"
        print(f"{c.mode:<14}{c.case:<12}{c.records_per_s:>11.0f}{d['mb_per_s']:>8.1f}"
              f"{ratio:>8.2f}x{c.transactions:>6}{p50:>15}{p99:>9}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txn_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seconds", type=float, default=12.0, help="per case")
    parser.add_argument("--batch-records", type=int, default=20)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--reclaim-transactions", type=int, default=10)
    parser.add_argument("--reclaim-zombies", type=int, default=5)
    parser.add_argument("--reclaim-timeout", type=float, default=60.0)
    parser.add_argument("--skip-reclaim", action="store_true")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)

    os.environ.update(HOUSEKEEPING)  # inherited by the cluster's brokers
    report: dict = {"settings": {k: v for k, v in vars(args).items() if k != "json"}}
    with tempfile.TemporaryDirectory(prefix="kipper-txn-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=3, metrics=True).start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            cases: list[CaseResult] = []
            for mode in args.modes.split(","):
                topic = f"bench-{mode}-idem-{uuid.uuid4().hex[:6]}"
                create(admin, topic, mode)
                cases.append(run_idempotent(args, cluster.bootstrap, mode, topic))
                for batches in TRANSACTION_BATCHES:
                    topic = f"bench-{mode}-txn{batches}-{uuid.uuid4().hex[:6]}"
                    create(admin, topic, mode)
                    cases.append(run_transactional(args, cluster.bootstrap, mode, topic, batches))
                print(f"{mode}: done", file=sys.stderr)
            print_table(cases)
            report["cases"] = [c.as_dict() for c in cases]
            if not args.skip_reclaim:
                reclaim = run_reclaim(args, cluster, admin)
                report["reclaim"] = reclaim.as_dict()
                print(json.dumps(report["reclaim"], indent=2))
        finally:
            cluster.stop()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
