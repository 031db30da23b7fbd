"""Mixed-broker durability (digest §6 claim 18): a classic topic's flush lag and produce
latency on brokers that serve only it, against the same brokers also taking diskless produce.

Jun's concern in the threads: materialising diskless data on the brokers' disks would compete
with classic topics' flushes (IOPS) and so stretch their RPO. kipper keeps no diskless data on
local disk (its read cache is in memory), so what diskless traffic can take from a classic
topic here is the event loop and the CPU: the brokers' appends, fsyncs and replication all
run on one asyncio loop per broker.

One `kipper cluster up` (3 brokers in az1..az3, embedded S3). Each case has a classic topic
of its own (1 partition, RF=3, ``flush.ms`` = ``--flush-ms``: a durability-minded setting;
Kafka's default never fsyncs and leaves durability to replication) fed by one paced acks=all
producer; a thread reads the leader's recovery point (``recovery-point`` in the partition's
directory, written at each fsync) every ``--sample-ms``. Per acknowledged record: its produce
latency, and its flush lag (from its acknowledgement to the first sample whose recovery point
is past it: how long an acknowledged record sits unflushed, the RPO of a power loss of the
leader's machine without replicas); per sample: the acknowledged records above the recovery
point. The second case adds one paced diskless producer per AZ (``--diskless-rate`` records/s
in all) on the same brokers. The two cases alternate for ``--rounds`` rounds.

    python -m bench.mixed_broker_bench                    # ~3 minutes
    python -m bench.mixed_broker_bench --json docs/findings/mixed-broker.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.diskless_bench import DISKLESS, RACKS, create_topic
from bench.local_cluster import LocalCluster
from bench.run_json import write_run

CASES = ("classic alone", "classic + diskless")
RECOVERY_POINT_FILE = "recovery-point"  # storage/classic/local_log.py


class PacedProducer(threading.Thread):
    """acks=all records of ``record_size`` bytes at ``rate`` per second to partition 0 until
    stopped; keeps (ack time, offset, latency ms) of every acknowledged record."""

    def __init__(self, bootstrap: str, topic: str, rate: float, record_size: int, az: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"mixed az={az}",
                                  "acks": "all", "enable.idempotence": True, "linger.ms": 1,
                                  "compression.type": "none"})
        self.topic, self.rate, self.payload = topic, rate, b"x" * record_size
        self.acked: list[tuple[float, int, float]] = []
        self.errors = 0
        self.stopping = threading.Event()

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors += 1
        else:
            self.acked.append((time.monotonic(), message.offset(), message.latency() * 1000))

    def run(self) -> None:
        started = time.perf_counter()
        for i in range(sys.maxsize):
            if self.stopping.is_set():
                break
            due = started + i / self.rate
            while (wait := due - time.perf_counter()) > 0:
                self.producer.poll(wait)
            self.producer.produce(self.topic, self.payload, partition=0,
                                  on_delivery=self._delivered)
            self.producer.poll(0)
        self.producer.flush(60)

    def finish(self) -> None:
        self.stopping.set()
        self.join(90)


class RecoveryPointSampler(threading.Thread):
    """(time, recovery point) of a partition directory every ``interval_s``."""

    def __init__(self, path: Path, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.path, self.interval_s = path, interval_s
        self.samples: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                self.samples.append((time.monotonic(), int(self.path.read_text().strip() or 0)))
            except (OSError, ValueError):  # between the rename and the write of a checkpoint
                continue

    def finish(self) -> None:
        self.stopping.set()
        self.join()


def flush_lags_ms(acked: list[tuple[float, int]], samples: list[tuple[float, int]]) -> list[float]:
    """Per acknowledged (ack time, offset): ms until the first sample taken after the ack
    whose recovery point is past the offset (a record never seen flushed is left out)."""
    lags = []
    for acked_at, offset in acked:
        flushed_at = next((at for at, point in samples if at >= acked_at and point > offset),
                          None)
        if flushed_at is not None:
            lags.append((flushed_at - acked_at) * 1000)
    return lags


def unflushed_records(acked: list[tuple[float, int]], samples: list[tuple[float, int]]) -> list[int]:
    """Per sample: acknowledged records at or above its recovery point."""
    ack_times = sorted(acked)
    counts = []
    for at, point in samples:
        highest = max((offset for acked_at, offset in ack_times if acked_at <= at), default=-1)
        counts.append(max(highest + 1 - point, 0))
    return counts


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


@dataclass
class MixedResult:
    case: str
    seconds: float
    flush_ms: int
    classic_records: int
    classic_errors: int
    diskless_records: int
    diskless_errors: int
    produce_p50_ms: float
    produce_p99_ms: float
    flush_lag_p50_ms: float
    flush_lag_p99_ms: float
    flush_lag_max_ms: float
    records_never_seen_flushed: int
    unflushed_p50_records: float
    unflushed_max_records: int
    record_size: int
    round: int
    load_average: float  # the machine's 1-minute load average at the end of the case

    @property
    def unflushed_max_bytes(self) -> int:
        return self.unflushed_max_records * self.record_size

    def as_dict(self) -> dict:
        return {**asdict(self), "unflushed_max_bytes": self.unflushed_max_bytes}


def leader_directory(cluster: LocalCluster, topic: str) -> Path:
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(topic, timeout=10)
    leader = metadata.topics[topic].partitions[0].leader
    return cluster.root / "data" / f"broker-{leader}" / f"{topic}-0"


def run_case(cluster: LocalCluster, case: str, round_: int,
             args: argparse.Namespace) -> MixedResult:
    topic = f"mixed-classic-{round_}-{CASES.index(case)}"
    create_topic(cluster.bootstrap, topic, 1, 3, {"kipper.storage.mode": "classic",
                                                  "flush.ms": str(args.flush_ms)})
    sampler = RecoveryPointSampler(leader_directory(cluster, topic) / RECOVERY_POINT_FILE,
                                   args.sample_ms / 1000)
    classic = PacedProducer(cluster.bootstrap, topic, args.classic_rate, args.record_size,
                            RACKS[0])
    diskless = []
    if case == "classic + diskless":
        diskless_topic = f"mixed-diskless-{round_}"
        create_topic(cluster.bootstrap, diskless_topic, 3, 3, DISKLESS)
        diskless = [PacedProducer(cluster.bootstrap, diskless_topic,
                                  args.diskless_rate / len(RACKS), args.record_size, az)
                    for az in RACKS]
    for thread in (*diskless, sampler, classic):
        thread.start()
    time.sleep(args.seconds)
    classic.finish()
    for producer in diskless:
        producer.finish()
    time.sleep(2 * args.flush_ms / 1000 + 1)  # the last records' fsync is seen
    sampler.finish()
    acked = [(at, offset) for at, offset, _ in classic.acked]
    lags = flush_lags_ms(acked, sampler.samples)
    unflushed = unflushed_records(acked, sampler.samples)
    latencies = [latency for _, _, latency in classic.acked]
    return MixedResult(
        case, args.seconds, args.flush_ms, len(classic.acked), classic.errors,
        sum(len(p.acked) for p in diskless), sum(p.errors for p in diskless),
        quantile(latencies, 0.50), quantile(latencies, 0.99), quantile(lags, 0.50),
        quantile(lags, 0.99), max(lags, default=float("nan")), len(acked) - len(lags),
        statistics.median(unflushed) if unflushed else float("nan"), max(unflushed, default=0),
        args.record_size, round_, os.getloadavg()[0])


def table(results: list[MixedResult]) -> str:
    rows = ["| round | case | load | classic records | diskless records | classic produce P50 / P99 ms "
            "| flush lag P50 / P99 / max ms | unflushed records median / max (max bytes) |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.round} | {r.case} | {r.load_average:.1f} | {r.classic_records} | {r.diskless_records} "
                    f"| {r.produce_p50_ms:.1f} / {r.produce_p99_ms:.1f} "
                    f"| {r.flush_lag_p50_ms:.0f} / {r.flush_lag_p99_ms:.0f} / "
                    f"{r.flush_lag_max_ms:.0f} | {r.unflushed_p50_records:.0f} / "
                    f"{r.unflushed_max_records} ({r.unflushed_max_bytes:,}) |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mixed_broker_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="per case")
    p.add_argument("--flush-ms", type=int, default=1000, help="the classic topic's flush.ms")
    p.add_argument("--classic-rate", type=float, default=200, help="records/s")
    p.add_argument("--diskless-rate", type=float, default=1500,
                   help="records/s over the three diskless producers")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--sample-ms", type=float, default=10)
    p.add_argument("--rounds", type=int, default=2, help="of the two cases, alternating")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mixed-broker-bench-") as root:
        cluster = LocalCluster(Path(root) / "cluster", brokers=len(RACKS)).start()
        try:
            # Cases alternate: a change of the machine's load hits both alike.
            results = [run_case(cluster, case, round_, args)
                       for round_ in range(args.rounds) for case in CASES]
        finally:
            cluster.stop()
    wall_s = time.monotonic() - started
    print(table(results))
    if args.json:
        write_run(args.json, args, wall_s, cases=[r.as_dict() for r in results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
