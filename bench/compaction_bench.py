"""Log compaction through a broker, per storage mode: the cleaner's throughput and what it
costs a producer running alongside.

One `kipper cluster up` (--brokers brokers, the embedded S3 server, metrics endpoints); for each
mode of --modes, with confluent-kafka:

1. a compacted changelog topic (--keys keys x --versions versions of --record-bytes values,
   --segment-bytes segments) is produced, every record stamped with the time production
   started, T; the topic's min.compaction.lag.ms is --hold-s, so nothing of it may be
   cleaned before T + hold (the release) and all of it may be then;
2. a producer on another topic of the same mode sends one record at a time (acks=all,
   flushed: a round trip each) from the end of the changelog's production until the
   changelog is cleaned; its latencies before the release are the idle P50/P99, those
   between the release and the end of the cleaning the P50/P99 while cleaning;
3. the cleaning ends when /metrics.json says so: the log cleaner's (classic, active-tiered:
   a cleaning more, max dirty ratio below the topic's) or the diskless housekeeping's (a
   compaction more). MB/s cleaned: the changelog's bytes (its kipper_topic_bytes_in) over
   the time from the release to that end, so the cleaner's backoff or housekeeping interval
   counts; for the log cleaner also its own read rate (bytes read over
   kipper_log_cleaner_last_clean_seconds).

Printed per mode, then the ratios of the P99s with and without cleaning.

    python -m bench.compaction_bench                       # ~2 min on 2 cores
    python -m bench.compaction_bench --modes classic --keys 10000 --versions 20 --hold-s 30
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.local_cluster import LocalCluster
from bench.txn_bench import nearest_rank

# Inherited by the cluster's brokers: the cleaner looks for work every 200 ms, diskless
# housekeeping runs every 500 ms; no merging of diskless objects, which would compete.
BROKER_ENV = {"KIPPER_LOG_CLEANER_BACKOFF_MS": "200",
              "KIPPER_DISKLESS_HOUSEKEEPING_INTERVAL_MS": "500",
              "KIPPER_DISKLESS_MERGE_MIN_OBJECTS": "1000000"}
MIN_CLEANABLE_DIRTY_RATIO = 0.5
POLL_S = 0.1


@dataclass
class Latencies:
    """(send time, seconds) of each round trip of the side producer."""

    samples: list[tuple[float, float]] = field(default_factory=list)

    def between(self, start: float, end: float) -> list[float]:
        return [latency for sent, latency in self.samples if start <= sent < end]


@dataclass
class ModeResult:
    mode: str
    log_bytes: int
    produce_s: float
    clean_s: float  # from the release to the end of the cleaning
    cleaner_read_mb_s: float | None  # the log cleaner's own rate (None: diskless)
    idle: list[float]
    cleaning: list[float]

    def lines(self) -> list[str]:
        mb = self.log_bytes / 1e6
        own = ("" if self.cleaner_read_mb_s is None
               else f"; the cleaner read {self.cleaner_read_mb_s:.1f} MB/s while it ran")
        out = [(f"{self.mode}: {mb:.1f} MB changelog produced in {self.produce_s:.1f} s, "
                f"cleaned {self.clean_s:.2f} s after its release: {mb / self.clean_s:.1f} "
                f"MB/s{own}")]
        for name, values in (("idle", self.idle), ("cleaning", self.cleaning)):
            out.append(f"  produce {name:8s} P50 {_ms(nearest_rank(values, 0.5))}  "
                       f"P99 {_ms(nearest_rank(values, 0.99))}  ({len(values)} sends)")
        return out

    def p99_ratio(self) -> str:
        idle, cleaning = nearest_rank(self.idle, 0.99), nearest_rank(self.cleaning, 0.99)
        return "n/a" if idle is None or cleaning is None else f"x{cleaning / idle:.2f}"


def _ms(seconds: float | None) -> str:
    return "   n/a   " if seconds is None else f"{seconds * 1e3:6.1f} ms"


def create(admin: AdminClient, topic: str, config: dict[str, str]) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
        if partitions and all(p.leader >= 0 for p in partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: no leader in 30 s")


def produce_changelog(bootstrap: str, topic: str, args: argparse.Namespace,
                      timestamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    value = os.urandom(args.record_bytes)
    for _ in range(args.versions):
        for k in range(args.keys):
            producer.produce(topic, value, b"key-%06d" % k, partition=0, timestamp=timestamp_ms)
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"{topic}: the changelog was not all delivered")


def side_producer(bootstrap: str, topic: str, stop: threading.Event, out: Latencies) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    value = b"x" * 100
    while not stop.is_set():
        sent = time.monotonic()
        producer.produce(topic, value, b"k", partition=0)
        if producer.flush(30):
            raise RuntimeError(f"{topic}: a send was not delivered in 30 s")
        out.samples.append((sent, time.monotonic() - sent))


def cleaned(snapshot: dict, mode: str, before: dict) -> bool:
    """Whether the changelog's cleaning has ended since the ``before`` snapshot."""
    if mode == "diskless":
        return (snapshot["diskless"]["housekeeping"]["compactions"]
                > before["diskless"]["housekeeping"]["compactions"])
    cleaner = snapshot["log_cleaner"]
    return (cleaner["cleanings"] > before["log_cleaner"]["cleanings"]
            and cleaner["max_dirty_ratio"] < MIN_CLEANABLE_DIRTY_RATIO)


def run_mode(cluster: LocalCluster, admin: AdminClient, mode: str, node_id: int,
             args: argparse.Namespace) -> ModeResult:
    run = uuid.uuid4().hex[:6]
    changelog, side = f"changelog-{mode}-{run}", f"side-{mode}-{run}"
    create(admin, changelog, {
        "kipper.storage.mode": mode, "cleanup.policy": "compact",
        "segment.bytes": str(args.segment_bytes),
        "min.cleanable.dirty.ratio": str(MIN_CLEANABLE_DIRTY_RATIO),
        "min.compaction.lag.ms": str(int(args.hold_s * 1000))})
    create(admin, side, {"kipper.storage.mode": mode})
    before = cluster.metrics_json(node_id)
    started = time.monotonic()
    produce_changelog(cluster.bootstrap, changelog, args, time.time_ns() // 1_000_000)
    produced = time.monotonic()
    release = started + args.hold_s
    if produced > release - 1:
        print(f"{mode}: producing took {produced - started:.1f} s, too close to --hold-s "
              f"{args.hold_s}: the idle window is short", file=sys.stderr)

    latencies, stop = Latencies(), threading.Event()
    sender = threading.Thread(target=side_producer,
                              args=(cluster.bootstrap, side, stop, latencies))
    sender.start()
    try:
        time.sleep(max(0.0, release - time.monotonic()))
        deadline = release + args.timeout_s
        while not cleaned(snapshot := cluster.metrics_json(node_id), mode, before):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the changelog was not cleaned in "
                                   f"{args.timeout_s} s")
            time.sleep(POLL_S)
        done = time.monotonic()
    finally:
        stop.set()
        sender.join()
    log_bytes = snapshot["broker"]["topics"]["bytes_in"][changelog]
    own_rate = None
    if mode != "diskless":
        cleaner = snapshot["log_cleaner"]
        read = cleaner["bytes_read"] - before["log_cleaner"]["bytes_read"]
        own_rate = read / 1e6 / cleaner["last_clean_seconds"]
    return ModeResult(mode, log_bytes, produced - started, done - release, own_rate,
                      latencies.between(produced, release), latencies.between(release, done))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="classic,active-tiered,diskless")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--hold-s", type=float, default=15.0,
                        help="min.compaction.lag.ms of the changelog, in seconds: produce "
                        "and the idle measurement fit in it")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args()
    os.environ.update(BROKER_ENV)
    with tempfile.TemporaryDirectory(prefix="kipper-compaction-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=args.brokers, metrics=True).start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            node_id = int(next(n for n in cluster.nodes if n.startswith("broker")).split()[1])
            results = []
            for mode in args.modes.split(","):
                results.append(run_mode(cluster, admin, mode, node_id, args))
                print("\n".join(results[-1].lines()), flush=True)
        finally:
            cluster.stop()
    print(f"{args.keys} keys x {args.versions} versions of {args.record_bytes} B, "
          f"{args.brokers} broker(s); produce P99 while cleaning / idle: "
          + ", ".join(f"{r.mode} {r.p99_ratio()}" for r in results))


if __name__ == "__main__":
    main()
