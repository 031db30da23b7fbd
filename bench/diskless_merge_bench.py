"""Batch-coordinator metadata growth and cold-read cost, with and without merging (KIP-1165):
digest §6 claims 9 and 10.

Each case is a fresh `kipper cluster up` (3 brokers in az1..az3, the embedded S3 server,
metrics endpoints, ``--s3-latency-profile PROFILE``) with a short commit interval
(``KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS``), emptied objects deleted after 5 s, and
merging either off (``diskless_merge_min_objects`` beyond reach) or as by default (every 5 s
housekeeping round merges up to 64 small WAL objects at least 30 s old, once there are 8).
One confluent-kafka producer, through az1's broker only, writes --rate records/s
round-robin over the --partitions partitions of a diskless topic for --duration-s.
librdkafka sends each partition's batch in a produce request of its own, so the producer is not idempotent (which
allows 5 requests in flight) but pipelines up to 1,000 requests without retries: every WAL
object then holds batches of most partitions, Jun's case of one entry per partition per
commit. Every --sample-s the coordinator's counters are read from the
brokers' /metrics.json (`diskless.coordinator`: db_bytes, metadata_log_bytes, objects,
batches); the growth per second is their least-squares slope over the run.

Claim 9 against Jun's formula: 100 B of metadata per partition per commit interval (his
720 GB = 100 B x 100,000 partitions x 5 h / 250 ms), scaled to this run's partitions,
interval and duration, and kipper's measured bytes per batch extrapolated to Jun's scenario
(labelled so: it assumes the growth stays linear in batches).

Claim 10: after the produce (and, with merging, once merging has caught up), a consumer
with ``client.rack`` of a broker that never held the data (not the writer's, not the
coordinator's: its read cache is cold) reads --read-partitions partitions from offset 0,
one after the other. Per partition: GetObject requests that broker sent (its /metrics.json
object_store) and the wall time of the read. Every record read is checked against what was
acknowledged (same count, values in order): merged objects must serve the same data.

At the end the coordinator's SQLite file is measured per table (SQLite's dbstat), to show
where the bytes are.

    python -m bench.diskless_merge_bench                    # ~6 minutes
    python -m bench.diskless_merge_bench --duration-s 240 --partitions 200 \\
        --json docs/findings/diskless-merge.json
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.cost import object_store_snapshot
from bench.diskless_bench import DISKLESS, RACKS, create_topic
from bench.local_cluster import LocalCluster
from bench.run_json import write_run
from coordinator.diskless.housekeeping import HousekeepingSettings

# Jun's estimate (digest §3): metadata per partition per commit, and his scenario.
JUN_BYTES_PER_ENTRY = 100
JUN_PARTITIONS = 100_000
JUN_SECONDS = 5 * 3600
JUN_COMMIT_INTERVAL_S = 0.25
COUNTERS = ("db_bytes", "metadata_log_bytes", "objects", "batches")
NO_MERGING = 1 << 40  # diskless_merge_min_objects no run reaches


def jun_formula_bytes(partitions: int, seconds: float, commit_interval_s: float,
                      bytes_per_entry: float = JUN_BYTES_PER_ENTRY) -> float:
    """Jun's metadata estimate without merging: one entry per partition per commit."""
    return bytes_per_entry * partitions * seconds / commit_interval_s


def growth_per_s(samples: list[dict], counter: str) -> float:
    """Least-squares slope of ``counter`` over the samples' ``t`` (seconds)."""
    if len(samples) < 2:
        return 0.0
    return statistics.linear_regression([s["t"] for s in samples],
                                        [s[counter] for s in samples]).slope


@dataclass(frozen=True)
class ColdRead:
    partition: int
    records: int
    get_requests: int
    seconds: float


@dataclass
class MergeCase:
    merging: bool
    partitions: int
    commit_interval_ms: int
    produce_s: float
    acked: int
    errors: dict[str, int]
    samples: list[dict]  # t and COUNTERS of the coordinator, plus merges and WAL uploads
    wal_files: int
    merges: int
    merged_objects: int
    reader_node: int
    cold_reads: list[ColdRead]
    table_bytes: dict[str, int]  # the coordinator's SQLite file, per table and index
    wrong_records: int = 0  # read back different from what was acknowledged
    settle_s: float = 0.0  # after the produce, until merging caught up
    # The most WAL objects one merge takes (not a setting): merged objects are not merged
    # again, so a cold read costs at least one GET per this many WAL objects.
    merge_max_objects: int = HousekeepingSettings().merge_max_objects

    @property
    def name(self) -> str:
        return "merging" if self.merging else "no merging"

    @property
    def batches(self) -> int:
        return self.samples[-1]["batches"] - self.samples[0]["batches"]

    def growth(self, counter: str) -> float:
        return growth_per_s(self.samples, counter)

    @property
    def db_bytes_per_batch(self) -> float:
        batches_per_s = self.growth("batches")
        return self.growth("db_bytes") / batches_per_s if batches_per_s else 0.0

    @property
    def jun_scaled_bytes(self) -> float:
        """Jun's formula with this run's partitions, interval and produce time."""
        return jun_formula_bytes(self.partitions, self.produce_s, self.commit_interval_ms / 1000)

    @property
    def jun_scaled_entries(self) -> float:
        return self.jun_scaled_bytes / JUN_BYTES_PER_ENTRY

    @property
    def jun_extrapolated_bytes(self) -> float:
        """Extrapolated: this run's database bytes per batch, at one batch per partition per
        commit in Jun's scenario (100,000 partitions, 5 h, 250 ms)."""
        return self.db_bytes_per_batch * JUN_PARTITIONS * JUN_SECONDS / JUN_COMMIT_INTERVAL_S

    def cold_read_totals(self) -> tuple[int, int, float]:
        """(records, GETs, seconds) over the partitions read."""
        return (sum(r.records for r in self.cold_reads),
                sum(r.get_requests for r in self.cold_reads),
                sum(r.seconds for r in self.cold_reads))

    def as_dict(self) -> dict:
        records, gets, seconds = self.cold_read_totals()
        return {**asdict(self), "name": self.name, "batches": self.batches,
                "growth_per_s": {c: self.growth(c) for c in COUNTERS},
                "db_bytes_per_batch": self.db_bytes_per_batch,
                "jun_scaled_bytes": self.jun_scaled_bytes,
                "jun_scaled_entries": self.jun_scaled_entries,
                "jun_extrapolated_bytes": self.jun_extrapolated_bytes,
                "cold_read": {"records": records, "get_requests": gets, "seconds": seconds,
                              "gets_per_partition": gets / len(self.cold_reads)
                              if self.cold_reads else 0.0}}


def coordinator_sample(cluster: LocalCluster) -> tuple[int, dict]:
    """(node, its diskless metrics) of the broker running the writable coordinator, with the
    WAL uploads of every broker added up."""
    documents = [cluster.metrics_json(node)["diskless"] for node in range(len(RACKS))]
    node = next((n for n, d in enumerate(documents) if d["coordinator"]["is_coordinator"]), 0)
    coordinator = documents[node]
    return node, {**{c: coordinator["coordinator"][c] for c in COUNTERS},
                  "merges": coordinator["housekeeping"]["merges"],
                  "merged_objects": coordinator["housekeeping"]["merged_objects"],
                  "wal_uploads": sum(d["wal"]["uploads"] for d in documents)}


def get_requests(cluster: LocalCluster, node: int) -> int:
    snapshot = object_store_snapshot(cluster.metrics_json(node)) or {"requests": []}
    return sum(row["requests"] for row in snapshot["requests"]
               if row["operation"] == "GetObject")


def record_value(partition: int, sequence: int, size: int) -> bytes:
    return f"{partition}:{sequence}:".encode().ljust(size, b"x")


@dataclass
class Produced:
    acked: list[list[int]]  # per partition: the sequence numbers of acknowledged records
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def expected(self, partition: int) -> list[int]:
        """What a read of the partition must return: pipelined requests without retries
        keep their order."""
        return sorted(self.acked[partition])


def produce(bootstrap: str, topic: str, args: argparse.Namespace,
            on_tick) -> Produced:
    """--rate records/s round-robin over the partitions for --duration-s, through az1's
    broker; ``on_tick(elapsed)`` is called between records."""
    produced = Produced([[] for _ in range(args.partitions)])
    lock = threading.Lock()

    def on_delivery(sequence: int, err, msg) -> None:
        with lock:
            if err is not None:
                produced.errors[err.name()] = produced.errors.get(err.name(), 0) + 1
            else:
                produced.acked[msg.partition()].append(sequence)

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"merge-bench az={RACKS[0]}",
                         "acks": "all", "enable.idempotence": False, "retries": 0,
                         "max.in.flight.requests.per.connection": 1000,
                         "linger.ms": args.linger_ms, "compression.type": "none",
                         "message.timeout.ms": 120_000})
    sent = [0] * args.partitions
    started = time.perf_counter()
    i = 0
    while (elapsed := time.perf_counter() - started) < args.duration_s:
        due = i / args.rate
        if due > elapsed:
            producer.poll(due - elapsed)
            continue
        partition = i % args.partitions
        producer.produce(topic, record_value(partition, sent[partition], args.record_size),
                         partition=partition,
                         on_delivery=functools.partial(on_delivery, sent[partition]))
        sent[partition] += 1
        i += 1
        producer.poll(0)
        on_tick(elapsed)
    left = producer.flush(120)
    produced.seconds = time.perf_counter() - started
    if left:
        produced.errors["not_delivered"] = produced.errors.get("not_delivered", 0) + left
    return produced


def cold_read(cluster: LocalCluster, node: int, topic: str, partition: int,
              expected: list[int], record_size: int) -> tuple[ColdRead, int]:
    """Read one partition from offset 0 through broker ``node`` (the consumer's rack);
    the read and how many records differ from what was acknowledged."""
    rack = RACKS[node]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "merge-bench",
                         "client.id": f"merge-bench-reader az={rack}", "client.rack": rack,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    gets_before = get_requests(cluster, node)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    wrong, read = 0, 0
    deadline = time.monotonic() + 300
    while read < len(expected) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error() is not None:
            continue
        if message.value() != record_value(partition, expected[read], record_size):
            wrong += 1
        read += 1
    seconds = time.perf_counter() - started
    consumer.close()
    gets = get_requests(cluster, node) - gets_before
    return ColdRead(partition, read, gets, seconds), wrong + (len(expected) - read)


def database_bytes_by_table(path: Path) -> dict[str, int]:
    """Bytes of each table and index of a SQLite file (read-only, while the broker runs)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name "
                               "ORDER BY SUM(pgsize) DESC"))


def wait_for_merging(cluster: LocalCluster, quiet_s: float, timeout_s: float) -> float:
    """Until no merge happened for ``quiet_s`` (merging caught up); the seconds waited."""
    started = time.monotonic()
    last_merges, last_change = -1, started
    while time.monotonic() - started < timeout_s:
        merges = coordinator_sample(cluster)[1]["merges"]
        if merges != last_merges:
            last_merges, last_change = merges, time.monotonic()
        elif time.monotonic() - last_change >= quiet_s:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def run(root: Path, merging: bool, args: argparse.Namespace) -> MergeCase:
    name = "merging" if merging else "no-merging"
    env = {"KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS": str(args.commit_interval_ms),
           "KIPPER_DISKLESS_OBJECT_DELETE_DELAY_MS": "5000"}
    if not merging:
        env["KIPPER_DISKLESS_MERGE_MIN_OBJECTS"] = str(NO_MERGING)
    cluster = LocalCluster(root / name, brokers=len(RACKS), metrics=True, env=env,
                           extra_args=["--s3-latency-profile", args.profile]).start()
    try:
        topic = f"merge-{name}"
        create_topic(cluster.bootstrap, topic, args.partitions, 3, DISKLESS)
        samples: list[dict] = []
        next_sample = [0.0]

        def sample(elapsed: float) -> None:
            if elapsed >= next_sample[0]:
                samples.append({"t": round(elapsed, 2), **coordinator_sample(cluster)[1]})
                next_sample[0] += args.sample_s

        produced = produce(cluster.bootstrap, topic, args, sample)
        sample(produced.seconds)
        print(f"  {name}: {sum(map(len, produced.acked))} records acknowledged in "
              f"{produced.seconds:.0f} s, errors {produced.errors or 0}", flush=True)
        settle_s = wait_for_merging(cluster, quiet_s=12.0, timeout_s=120) if merging else 0.0
        coordinator, final = coordinator_sample(cluster)
        reader = next(n for n in range(1, len(RACKS)) if n != coordinator)
        reads, wrong = [], 0
        for partition in range(min(args.read_partitions, args.partitions)):
            read, bad = cold_read(cluster, reader, topic, partition,
                                  produced.expected(partition), args.record_size)
            reads.append(read)
            wrong += bad
            print(f"    cold read of partition {partition} through broker {reader}: "
                  f"{read.records} records, {read.get_requests} GETs, {read.seconds:.2f} s",
                  flush=True)
        tables = database_bytes_by_table(
            cluster.root / "data" / f"broker-{coordinator}" / "diskless-coordinator.sqlite")
    finally:
        cluster.stop()
    first = samples[0]
    return MergeCase(merging, args.partitions, args.commit_interval_ms, produced.seconds,
                     sum(map(len, produced.acked)), produced.errors, samples,
                     final["wal_uploads"] - first["wal_uploads"], final["merges"],
                     final["merged_objects"], reader, reads, tables, wrong, settle_s)


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB"


def table(cases: list[MergeCase]) -> str:
    rows = ["| case | WAL files | batches | objects at end | merges (objects merged) "
            "| DB growth | log growth | DB bytes per batch | cold read: GETs per partition "
            "| seconds per partition |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        records, gets, seconds = c.cold_read_totals()
        n = len(c.cold_reads) or 1
        rows.append(f"| {c.name} | {c.wal_files} | {c.batches} | {c.samples[-1]['objects']} "
                    f"| {c.merges} ({c.merged_objects}) "
                    f"| {c.growth('db_bytes') / 1e3:,.1f} kB/s "
                    f"| {c.growth('metadata_log_bytes') / 1e3:,.1f} kB/s "
                    f"| {c.db_bytes_per_batch:,.0f} | {gets / n:,.1f} | {seconds / n:.2f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="diskless_merge_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=100, help="diskless topic partitions")
    p.add_argument("--duration-s", type=float, default=120, help="produce time per case")
    p.add_argument("--rate", type=float, default=600, help="records/s (default 600)")
    p.add_argument("--record-size", type=int, default=200)
    p.add_argument("--linger-ms", type=int, default=50)
    p.add_argument("--commit-interval-ms", type=int, default=250,
                   help="diskless_append_commit_interval_ms (default 250, Jun's)")
    p.add_argument("--sample-s", type=float, default=5.0, help="between counter samples")
    p.add_argument("--read-partitions", type=int, default=3,
                   help="partitions read cold after the produce (default 3)")
    p.add_argument("--profile", default="s3-standard", help="--s3-latency-profile")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-merge-") as tmp:
        cases = [run(Path(tmp), merging, args) for merging in (False, True)]
    wall_s = time.perf_counter() - started
    print(f"\n{wall_s:.0f} s; {args.rate:g} records/s of {args.record_size} B round-robin over "
          f"{args.partitions} partitions through one broker, commit interval "
          f"{args.commit_interval_ms} ms, profile {args.profile}\n")
    print(table(cases))
    plain, merged = cases
    print(f"\nJun's formula scaled to this run ({args.partitions} partitions, "
          f"{plain.produce_s:.0f} s, {args.commit_interval_ms} ms): "
          f"{_mb(plain.jun_scaled_bytes)}; measured DB growth over the run: no merging "
          f"{_mb(plain.growth('db_bytes') * plain.produce_s)}, merging "
          f"{_mb(merged.growth('db_bytes') * merged.produce_s)}")
    print(f"extrapolated to Jun's scenario (100,000 partitions, 5 h, 250 ms; "
          f"measured bytes per batch): no merging {plain.jun_extrapolated_bytes / 1e9:,.0f} GB, "
          f"merging {merged.jun_extrapolated_bytes / 1e9:,.0f} GB (Jun: 720 GB)")
    for c in cases:
        top = ", ".join(f"{name} {_mb(size)}" for name, size in list(c.table_bytes.items())[:5])
        print(f"coordinator database, {c.name}: {top}")
    wrong = sum(c.wrong_records for c in cases)
    if wrong:
        print(f"\nWRONG DATA: {wrong} records read back differ from what was acknowledged")
    if args.json:
        write_run(args.json, args, wall_s, cases=[c.as_dict() for c in cases])
    return 0 if not wrong and all(not c.errors for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
