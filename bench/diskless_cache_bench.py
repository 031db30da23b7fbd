"""Claim 11 (digest §6): object-store GETs of N consumer groups reading a diskless topic,
with and without the broker's read cache.

For each case a fresh `kipper cluster up` (3 brokers in az1..az3, embedded S3, profile
none): ``diskless_read_cache_max_bytes`` at its default (256 MiB, "read cache") or 0 (every
read goes to S3, "no cache"). One confluent-kafka producer in az1 writes --mb MB of 1 KiB
records to a --partitions diskless topic (acks=all). Then --groups consumer groups, one after
the other, each one member in az2 (``client.rack``; Metadata names az2's broker, which never
held the data: the writer's broker caches what it uploads), read every record from the
start. Per group: the GetObject requests az2's broker sent meanwhile (its /metrics.json
object_store) and the time the read took. Every record read is checked against what was
acknowledged.

Local materialisation (building local segments from the WAL objects, KIP-1163's option) is
not built in kipper, so that third design is not measured.

    python -m bench.diskless_cache_bench                       # ~3 minutes
    python -m bench.diskless_cache_bench --json docs/findings/diskless-cache.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.diskless_bench import DISKLESS, RACKS, create_topic
from bench.diskless_merge_bench import get_requests, record_value
from bench.local_cluster import LocalCluster
from bench.run_json import write_run

WRITER, READER = 0, 1  # az1's broker takes the produce; az2's serves every group
CASES = (("read cache", None), ("no cache", 0))  # (name, diskless_read_cache_max_bytes)


@dataclass
class GroupRead:
    group: int
    records: int
    wrong: int
    get_requests: int
    seconds: float


@dataclass
class CacheCase:
    name: str
    cache_max_bytes: int | None  # None: the broker's default
    partitions: int
    produced_mb: float
    records: int
    groups: list[GroupRead] = field(default_factory=list)

    @property
    def gets_per_mb(self) -> list[float]:
        return [g.get_requests / self.produced_mb for g in self.groups]

    def to_json(self) -> dict:
        return {**asdict(self), "gets_per_mb": self.gets_per_mb}


def produce(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    """``records`` records round-robin over the partitions, record i of a partition holding
    its sequence number; raises unless every one is acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"cache-bench az={RACKS[WRITER]}",
                         "acks": "all", "linger.ms": 20, "batch.size": 256 * 1024,
                         "compression.type": "none", "message.timeout.ms": 120_000})
    failed = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            failed.append(err)

    for i in range(records):
        partition = i % partitions
        while True:
            try:
                producer.produce(topic, record_value(partition, i // partitions, size),
                                 partition=partition, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce failed: {len(failed)} errors, first {failed[:1]}")


def read_group(cluster: LocalCluster, topic: str, partitions: int, records: int, size: int,
               group: int) -> GroupRead:
    rack = RACKS[READER]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap,
                         "group.id": f"cache-bench-{group}",
                         "client.id": f"cache-bench-reader az={rack}", "client.rack": rack,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    before = get_requests(cluster, READER)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    next_sequence = [0] * partitions
    read = wrong = 0
    deadline = time.monotonic() + 300
    while read < records and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error() is not None:
            continue
        partition = message.partition()
        if message.value() != record_value(partition, next_sequence[partition], size):
            wrong += 1
        next_sequence[partition] += 1
        read += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return GroupRead(group, read, wrong + records - read,
                     get_requests(cluster, READER) - before, seconds)


def run(root: Path, name: str, cache_max_bytes: int | None,
        args: argparse.Namespace) -> CacheCase:
    env = ({} if cache_max_bytes is None
           else {"KIPPER_DISKLESS_READ_CACHE_MAX_BYTES": str(cache_max_bytes)})
    records = int(args.mb * 1e6 / args.record_size)
    cluster = LocalCluster(root / name.replace(" ", "-"), brokers=len(RACKS), metrics=True,
                           env=env).start()
    try:
        topic = "cache-bench"
        create_topic(cluster.bootstrap, topic, args.partitions, 3, DISKLESS)
        produce(cluster.bootstrap, topic, args.partitions, records, args.record_size)
        case = CacheCase(name, cache_max_bytes, args.partitions,
                         records * args.record_size / 1e6, records)
        for group in range(1, args.groups + 1):
            read = read_group(cluster, topic, args.partitions, records, args.record_size, group)
            case.groups.append(read)
            print(f"  {name}, group {group}: {read.records} records ({read.wrong} wrong), "
                  f"{read.get_requests} GETs, {read.seconds:.1f} s", flush=True)
    finally:
        cluster.stop()
    return case


def table(cases: list[CacheCase]) -> str:
    groups = max(len(case.groups) for case in cases)
    rows = ["| case | " + " | ".join(f"group {g}: GETs (per MB), s" for g in range(1, groups + 1))
            + " | all groups: GETs |",
            "|---|" + "---|" * (groups + 1)]
    for case in cases:
        cells = [f"{g.get_requests} ({per_mb:.2f}), {g.seconds:.1f}"
                 for g, per_mb in zip(case.groups, case.gets_per_mb)]
        rows.append(f"| {case.name} | " + " | ".join(cells)
                    + f" | {sum(g.get_requests for g in case.groups)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="diskless_cache_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=20.0, help="MB produced (default 20)")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--groups", type=int, default=3, help="consumer groups, one after the other")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-cache-bench-") as tmp:
        cases = [run(Path(tmp), name, cache, args) for name, cache in CASES]
    wall_s = time.perf_counter() - started
    print(f"\n{wall_s:.0f} s; {args.mb:g} MB in {args.partitions} diskless partitions, "
          f"{args.groups} groups reading through az2's broker\n")
    print(table(cases))
    wrong = sum(g.wrong for case in cases for g in case.groups)
    if args.json:
        write_run(args.json, args, wall_s, cases=[case.to_json() for case in cases])
    print("every record read back as acknowledged" if not wrong else
          f"{wrong} records missing or wrong")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
