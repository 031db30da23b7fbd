"""Diskless latency against its cost: produce P50/P99 (acks=all) and WAL PUTs per second per
broker for several commit intervals, under the s3-standard and s3-express latency profiles,
with and without hedged uploads, all in one run.

Every case is a fresh `kipper cluster up` (3 brokers in az1..az3, the embedded S3 server,
metrics endpoints) with ``--s3-latency-profile PROFILE``,
``KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS`` and ``KIPPER_DISKLESS_APPEND_HEDGE_AFTER_MS``
(-1: one PUT per object; 0: a second PUT once the first has taken the profile's PUT P95),
since both are broker settings. The load is diskless_bench's latency case: one paced
confluent-kafka producer per AZ (acks=all, linger.ms=0, 1 KiB records) on a 3-partition
diskless topic, per-record produce() -> delivery report latency after a warm-up. PUTs are
the WAL writer's own counts from each broker's /metrics.json (`diskless.wal`: uploads, plus
one more PUT per hedged upload), over the measured run's span.

    python -m bench.diskless_sweep_bench                    # 16 cases, ~9 minutes
    python -m bench.diskless_sweep_bench --intervals 250 --profiles s3-standard --json out.json

The issue's target: P99 <= 400 ms at one PUT per 250 ms per broker. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer

from bench.diskless_bench import DISKLESS, RACKS, LatencyResult, create_topic, measure_latency
from bench.local_cluster import LocalCluster
from bench.run_json import write_run
from storage.objectstore import WAL_BUCKET
from storage.objectstore.latency import LATENCY_PROFILES, LatencyModel

TARGET_P99_MS = 400
TARGET_INTERVAL_MS = 250


@dataclass(frozen=True)
class SweepCase:
    profile: str
    commit_interval_ms: int
    hedged: bool

    @property
    def name(self) -> str:
        return (f"{self.profile}-{self.commit_interval_ms}ms-"
                f"{'hedged' if self.hedged else 'single'}")


@dataclass(frozen=True)
class SweepResult:
    profile: str
    commit_interval_ms: int
    hedged: bool
    records: int
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    seconds: float
    # Summed over the brokers during the run.
    uploads: int
    hedged_puts: int
    hedged_put_wins: int
    brokers: int
    # The machine's 1-minute load average at the end of the case: on a shared machine,
    # what the figures were taken under.
    load_average: float | None = None  # None: not recorded (runs before it was)

    @property
    def puts(self) -> int:
        return self.uploads + self.hedged_puts

    @property
    def puts_per_s_per_broker(self) -> float:
        return self.puts / self.seconds / self.brokers

    @property
    def extra_put_share(self) -> float:
        """Hedged PUTs per WAL object: what hedging adds to the PUT bill."""
        return self.hedged_puts / self.uploads if self.uploads else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "puts": self.puts,
                "puts_per_s_per_broker": self.puts_per_s_per_broker,
                "extra_put_share": self.extra_put_share}


def wal_counts(cluster: LocalCluster, brokers: int) -> tuple[int, int, int]:
    """(uploads, hedged PUTs, hedges the second PUT won) summed over the brokers."""
    totals = [0, 0, 0]
    for node in range(brokers):
        wal = cluster.metrics_json(node)["diskless"]["wal"]
        for i, key in enumerate(("uploads", "hedged_puts", "hedged_put_wins")):
            totals[i] += wal[key]
    return totals[0], totals[1], totals[2]


def prime(bootstrap: str, topic: str, partitions: int) -> None:
    """One acknowledged record per partition before the clock starts: the first diskless
    commit of a cluster creates the coordinator's log and elects its leader, seconds on a
    loaded machine, which would otherwise land in the measured latencies."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "client.id": f"diskless-bench az={RACKS[0]}"})
    for partition in range(partitions):
        producer.produce(topic, b"prime", partition=partition)
    if producer.flush(60):
        raise RuntimeError(f"{topic}: priming records not acknowledged within 60 s")


def run_case(root: Path, case: SweepCase,
             args: argparse.Namespace) -> tuple[SweepResult, list[float]]:
    """One round of the case: its figures and every measured record's latency (ms)."""
    env = {"KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS": str(case.commit_interval_ms),
           "KIPPER_DISKLESS_APPEND_HEDGE_AFTER_MS": "0" if case.hedged else "-1"}
    cluster = LocalCluster(root / case.name, brokers=len(RACKS), metrics=True, env=env,
                           extra_args=["--s3-latency-profile", case.profile]).start()
    try:
        topic = f"sweep-{case.name}"
        create_topic(cluster.bootstrap, topic, len(RACKS), 3, DISKLESS)
        prime(cluster.bootstrap, topic, len(RACKS))
        before = wal_counts(cluster, len(RACKS))
        latency = measure_latency(case.name, case.profile, cluster.bootstrap, topic, args)
        after = wal_counts(cluster, len(RACKS))
    finally:
        cluster.stop()
    uploads, hedged, wins = (a - b for a, b in zip(after, before))
    return SweepResult(case.profile, case.commit_interval_ms, case.hedged, latency.records,
                       latency.errors, latency.quantile(0.50), latency.quantile(0.99),
                       latency.seconds, uploads, hedged, wins, len(RACKS),
                       os.getloadavg()[0]), latency.latencies_ms


def combine(rounds: list[tuple[SweepResult, list[float]]]) -> SweepResult:
    """The rounds of one case as one: latencies pooled, counts and spans added, load averaged."""
    latencies = LatencyResult("", "", 0, 0, 0.0, [ms for _, round_ms in rounds for ms in round_ms])
    results = [result for result, _ in rounds]
    errors: dict[str, int] = {}
    for result in results:
        for name, count in result.errors.items():
            errors[name] = errors.get(name, 0) + count
    first = results[0]
    loads = [r.load_average for r in results]
    return SweepResult(
        first.profile, first.commit_interval_ms, first.hedged,
        sum(r.records for r in results), errors, latencies.quantile(0.50),
        latencies.quantile(0.99), sum(r.seconds for r in results),
        sum(r.uploads for r in results), sum(r.hedged_puts for r in results),
        sum(r.hedged_put_wins for r in results), first.brokers,
        None if None in loads else sum(loads) / len(loads))


@dataclass(frozen=True)
class ModelResult:
    """What the latency profile alone implies (not measured): a record waits for its buffer to
    close (uniform over the commit interval) and for the PUT (the profile's lognormal), and
    with hedging the upload ends at min(first PUT, P95 + second PUT). Commit, broker and
    client time come on top."""

    profile: str
    commit_interval_ms: int
    hedged: bool
    p50_ms: float
    p99_ms: float
    extra_put_share: float


def model(profile: str, commit_interval_ms: int, hedged: bool, samples: int = 100_000,
          seed: int = 1) -> ModelResult:
    rng = random.Random(seed)
    latency = LatencyModel(profile, rng)
    hedge_after_s = latency.quantile_s("put", WAL_BUCKET, 0.95)
    waits, hedges = [], 0
    for _ in range(samples):
        upload_s = latency.sample_s("put", WAL_BUCKET)
        if hedged and upload_s > hedge_after_s:
            hedges += 1
            upload_s = min(upload_s, hedge_after_s + latency.sample_s("put", WAL_BUCKET))
        waits.append((rng.uniform(0, commit_interval_ms / 1000) + upload_s) * 1000)
    waits.sort()
    return ModelResult(profile, commit_interval_ms, hedged, waits[samples // 2],
                       waits[int(samples * 0.99)], hedges / samples)


def model_table(results: list[ModelResult]) -> str:
    rows = ["| profile | commit interval | hedged | P50 ms | P99 ms | PUT/s per broker "
            "| hedged PUTs per object |", "|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.profile} | {r.commit_interval_ms} ms | {'yes' if r.hedged else 'no'} "
                    f"| {r.p50_ms:.0f} | {r.p99_ms:.0f} "
                    f"| {1000 / r.commit_interval_ms * (1 + r.extra_put_share):.2f} "
                    f"| {r.extra_put_share:.1%} |")
    return "\n".join(rows)


def table(results: list[SweepResult]) -> str:
    rows = ["| profile | commit interval | hedged | records | P50 ms | P99 ms "
            "| PUT/s per broker | hedged PUTs per object | hedges won by the 2nd PUT "
            "| load average |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.profile} | {r.commit_interval_ms} ms | {'yes' if r.hedged else 'no'} "
                    f"| {r.records} | {r.p50_ms:.0f} | {r.p99_ms:.0f} "
                    f"| {r.puts_per_s_per_broker:.2f} | {r.extra_put_share:.1%} "
                    f"| {r.hedged_put_wins}/{r.hedged_puts} "
                    f"| {'n/a' if r.load_average is None else f'{r.load_average:.1f}'} |")
    return "\n".join(rows)


def verdicts(results: list[SweepResult]) -> list[str]:
    """Per profile: the target case with and without hedging, against P99 <= 400 ms."""
    lines = []
    for profile in dict.fromkeys(r.profile for r in results):
        at_target = {r.hedged: r for r in results
                     if r.profile == profile and r.commit_interval_ms == TARGET_INTERVAL_MS}
        if not at_target:
            continue
        parts = []
        for hedged in (False, True):
            r = at_target.get(hedged)
            if r is not None:
                met = "met" if r.p99_ms <= TARGET_P99_MS else "NOT met"
                parts.append(f"{'hedged' if hedged else 'one PUT'} P99 {r.p99_ms:.0f} ms "
                             f"({met}) at {r.puts_per_s_per_broker:.2f} PUT/s per broker")
        lines.append(f"{profile}, {TARGET_INTERVAL_MS} ms (target P99 <= {TARGET_P99_MS} ms): "
                     + "; ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="diskless_sweep_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--intervals", type=int, nargs="+", default=[50, 100, 250, 500],
                   help="diskless_append_commit_interval_ms values (default 50 100 250 500)")
    p.add_argument("--profiles", nargs="+", default=["s3-standard", "s3-express"],
                   choices=sorted(set(LATENCY_PROFILES) - {"none"}))
    p.add_argument("--records", type=int, default=3000,
                   help="measured records per case, over the 3 producers (default 3000)")
    p.add_argument("--rate", type=float, default=300,
                   help="records/s per case, over the 3 producers (default 300)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="not counted (default 2 s)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of every case, interleaved (each case once per round, so a "
                        "shared machine's load falls on all alike); latencies pooled")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    cases = [SweepCase(profile, interval, hedged) for profile in args.profiles
             for interval in args.intervals for hedged in (False, True)]
    rounds: dict[SweepCase, list[tuple[SweepResult, list[float]]]] = {c: [] for c in cases}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-diskless-sweep-") as tmp:
        for round_number in range(args.repeat):
            for case in cases:
                rounds[case].append(run_case(Path(tmp) / f"round-{round_number}", case, args))
                result = rounds[case][-1][0]
                print(f"  {case.name:<28} P50 {result.p50_ms:5.0f} ms  P99 "
                      f"{result.p99_ms:5.0f} ms  {result.puts_per_s_per_broker:5.2f} "
                      f"PUT/s/broker  hedged {result.hedged_puts}/{result.uploads}  "
                      f"load {result.load_average:.1f}  errors {result.errors or 0}", flush=True)
    results = [combine(rounds[case]) for case in cases]
    wall_s = time.perf_counter() - started
    print(f"\n{len(cases)} cases x {args.repeat} round(s) in {wall_s:.0f} s; {args.rate:g} "
          f"records/s of {args.record_size} B over {len(RACKS)} producers, acks=all, "
          f"linger.ms=0\n")
    print(table(results))
    print()
    for line in verdicts(results):
        print(line)
    print("\nModel (the latency profile alone, not measured: buffer wait + PUT, with hedging "
          "min(PUT, P95 + PUT); one object per interval per broker):\n")
    print(model_table([model(c.profile, c.commit_interval_ms, c.hedged) for c in cases]))
    if args.json:
        write_run(args.json, args, wall_s, cases=[r.as_dict() for r in results])
    return 0 if all(not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
