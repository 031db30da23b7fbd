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

    python -m bench.diskless_sweep_bench                    # 16 cases, ~10 minutes
    python -m bench.diskless_sweep_bench --intervals 250 --profiles s3-standard --json out.json

The issue's target: P99 <= 400 ms at one PUT per 250 ms per broker. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.diskless_bench import DISKLESS, RACKS, create_topic, measure_latency
from bench.local_cluster import LocalCluster
from storage.objectstore.latency import LATENCY_PROFILES

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
    load_average: float = 0.0

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


def run_case(root: Path, case: SweepCase, args: argparse.Namespace) -> SweepResult:
    env = {"KIPPER_DISKLESS_APPEND_COMMIT_INTERVAL_MS": str(case.commit_interval_ms),
           "KIPPER_DISKLESS_APPEND_HEDGE_AFTER_MS": "0" if case.hedged else "-1"}
    cluster = LocalCluster(root / case.name, brokers=len(RACKS), metrics=True, env=env,
                           extra_args=["--s3-latency-profile", case.profile]).start()
    try:
        topic = f"sweep-{case.name}"
        create_topic(cluster.bootstrap, topic, len(RACKS), 3, DISKLESS)
        before = wal_counts(cluster, len(RACKS))
        latency = measure_latency(case.name, case.profile, cluster.bootstrap, topic, args)
        after = wal_counts(cluster, len(RACKS))
    finally:
        cluster.stop()
    uploads, hedged, wins = (a - b for a, b in zip(after, before))
    return SweepResult(case.profile, case.commit_interval_ms, case.hedged, latency.records,
                       latency.errors, latency.quantile(0.50), latency.quantile(0.99),
                       latency.seconds, uploads, hedged, wins, len(RACKS), os.getloadavg()[0])


def table(results: list[SweepResult]) -> str:
    rows = ["| profile | commit interval | hedged | records | P50 ms | P99 ms "
            "| PUT/s per broker | hedged PUTs per object | hedges won by the 2nd PUT "
            "| load average |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.profile} | {r.commit_interval_ms} ms | {'yes' if r.hedged else 'no'} "
                    f"| {r.records} | {r.p50_ms:.0f} | {r.p99_ms:.0f} "
                    f"| {r.puts_per_s_per_broker:.2f} | {r.extra_put_share:.1%} "
                    f"| {r.hedged_put_wins}/{r.hedged_puts} | {r.load_average:.1f} |")
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
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    cases = [SweepCase(profile, interval, hedged) for profile in args.profiles
             for interval in args.intervals for hedged in (False, True)]
    results = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-diskless-sweep-") as tmp:
        for case in cases:
            result = run_case(Path(tmp), case, args)
            results.append(result)
            print(f"  {case.name:<28} P50 {result.p50_ms:5.0f} ms  P99 {result.p99_ms:5.0f} ms  "
                  f"{result.puts_per_s_per_broker:5.2f} PUT/s/broker  hedged "
                  f"{result.hedged_puts}/{result.uploads}  errors {result.errors or 0}",
                  flush=True)
    wall_s = time.perf_counter() - started
    print(f"\n{len(cases)} cases in {wall_s:.0f} s; {args.rate:g} records/s of "
          f"{args.record_size} B over {len(RACKS)} producers, acks=all, linger.ms=0\n")
    print(table(results))
    print()
    for line in verdicts(results):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "wall_s": wall_s, "cases": [r.as_dict() for r in results]}, indent=2))
        print(f"wrote {args.json}")
    return 0 if all(not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
