"""Commit RPCs per WAL file: per-broker grouping (kipper's design, one CommitFile per object)
against the naive per-partition fan-out (``diskless_append_commit_per_partition``: one
CommitFile per partition in the object), digest §6 claim 8.

Each way is a fresh `kipper cluster up` (3 brokers in az1..az3, the embedded S3 server,
metrics endpoints, no S3 latency profile: the counts do not depend on it) with
``KIPPER_DISKLESS_APPEND_COMMIT_PER_PARTITION``. The load is diskless_bench's latency case
(one paced acks=all producer per AZ, linger.ms=0, keyless 1 KiB records, so batches spread
over the partitions) on a diskless topic of ``--partitions`` partitions. From every broker's
/metrics.json (`diskless.wal` and `diskless.coordinator`), over the run: WAL files uploaded,
commit RPCs the WAL writers sent, appends to `__diskless-metadata` the coordinator made
(housekeeping's few requests included), and produce P50/P99.

    python -m bench.commit_fanout_bench                     # ~1.5 minutes
    python -m bench.commit_fanout_bench --partitions 100 --rate 900 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.diskless_bench import DISKLESS, RACKS, create_topic, measure_latency
from bench.diskless_sweep_bench import prime
from bench.local_cluster import LocalCluster
from bench.run_json import write_run


@dataclass(frozen=True)
class FanoutResult:
    commit_per_partition: bool
    partitions: int
    records: int
    errors: dict[str, int]
    p50_ms: float
    p99_ms: float
    # Summed over the brokers during the run.
    wal_files: int
    batches: int
    commit_rpcs: int
    coordinator_appends: int

    @property
    def design(self) -> str:
        return "per-partition fan-out" if self.commit_per_partition else "per-broker grouping"

    @property
    def commit_rpcs_per_wal_file(self) -> float:
        return self.commit_rpcs / self.wal_files if self.wal_files else 0.0

    @property
    def appends_per_wal_file(self) -> float:
        return self.coordinator_appends / self.wal_files if self.wal_files else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "design": self.design,
                "commit_rpcs_per_wal_file": self.commit_rpcs_per_wal_file,
                "appends_per_wal_file": self.appends_per_wal_file}


def counts(cluster: LocalCluster) -> tuple[int, int, int, int]:
    """(WAL files, batches, commit RPCs, coordinator appends) summed over the brokers."""
    totals = [0, 0, 0, 0]
    for node in range(len(RACKS)):
        diskless = cluster.metrics_json(node)["diskless"]
        for i, value in enumerate((diskless["wal"]["uploads"], diskless["wal"]["batches"],
                                   diskless["wal"]["commits"],
                                   diskless["coordinator"]["appends"])):
            totals[i] += value
    return totals[0], totals[1], totals[2], totals[3]


def run(root: Path, commit_per_partition: bool, args: argparse.Namespace) -> FanoutResult:
    name = "per-partition" if commit_per_partition else "grouped"
    env = {"KIPPER_DISKLESS_APPEND_COMMIT_PER_PARTITION": str(commit_per_partition).lower()}
    cluster = LocalCluster(root / name, brokers=len(RACKS), metrics=True, env=env).start()
    try:
        topic = f"fanout-{name}"
        create_topic(cluster.bootstrap, topic, args.partitions, 3, DISKLESS)
        prime(cluster.bootstrap, topic, args.partitions)
        before = counts(cluster)
        latency = measure_latency(name, "none", cluster.bootstrap, topic, args)
        after = counts(cluster)
    finally:
        cluster.stop()
    files, batches, rpcs, appends = (a - b for a, b in zip(after, before))
    return FanoutResult(commit_per_partition, args.partitions, latency.records, latency.errors,
                        latency.quantile(0.50), latency.quantile(0.99), files, batches, rpcs,
                        appends)


def table(results: list[FanoutResult]) -> str:
    rows = ["| design | partitions | WAL files | batches per file | commit RPCs per file "
            "| coordinator appends per file | produce P50 / P99 ms |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.design} | {r.partitions} | {r.wal_files} "
                    f"| {r.batches / r.wal_files if r.wal_files else 0:.1f} "
                    f"| {r.commit_rpcs_per_wal_file:.2f} | {r.appends_per_wal_file:.2f} "
                    f"| {r.p50_ms:.0f} / {r.p99_ms:.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="commit_fanout_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=30, help="diskless topic partitions")
    p.add_argument("--records", type=int, default=3000,
                   help="measured records per design, over the 3 producers (default 3000)")
    p.add_argument("--rate", type=float, default=300,
                   help="records/s, over the 3 producers (default 300)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="not counted (default 2 s)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-commit-fanout-") as tmp:
        results = [run(Path(tmp), per_partition, args) for per_partition in (False, True)]
    wall_s = time.perf_counter() - started
    print(f"{wall_s:.0f} s; {args.rate:g} records/s of {args.record_size} B over "
          f"{len(RACKS)} producers (acks=all, linger.ms=0), {args.partitions} partitions\n")
    print(table(results))
    grouped, naive = results
    if grouped.commit_rpcs_per_wal_file:
        print(f"\nper-partition fan-out / grouping: "
              f"{naive.commit_rpcs_per_wal_file / grouped.commit_rpcs_per_wal_file:.1f}x "
              f"commit RPCs per WAL file")
    if args.json:
        write_run(args.json, args, wall_s, designs=[r.as_dict() for r in results])
    return 0 if all(not r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
