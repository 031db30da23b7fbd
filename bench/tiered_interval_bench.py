"""Claim 4 (digest §6): the acks=all latency of active-tiered (KIP-1176) broken into its
steps, and how it changes with the upload interval.

For each ``--intervals`` value a fresh `kipper cluster up` (3 brokers in az1..az3, embedded
S3, profile none) with ``active_tiered_upload_interval_ms`` set to it, a classic RF=3 topic
and an active-tiered RF=3 topic (topic metadata scheme). One confluent-kafka producer sends
--requests single-record requests (acks=all, linger.ms=0) to each, one at a time. For the
active-tiered topic the brokers' step timers give the mean of each step: upload wait (first
append to PUT), PUT, publish (metadata), download (follower) and "replicated" (references
handed out until every in-sync follower fetched past them).

In kipper a follower learns of a new object from the leader's next fetch answer, so there is
no separate download interval: the upload interval is the knob, and the follower's fetch
round trip is part of "replicated".

    python -m bench.tiered_interval_bench                     # ~3 minutes
    python -m bench.tiered_interval_bench --json docs/findings/tiered-intervals.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.local_cluster import LocalCluster
from bench.run_json import write_run
from bench.tiered_bench import STEPS, acks_all_latency, create_topics


def run(root: Path, interval_ms: int, args: argparse.Namespace) -> dict:
    env = {"KIPPER_ACTIVE_TIERED_UPLOAD_INTERVAL_MS": str(interval_ms)}
    cluster = LocalCluster(root / f"interval-{interval_ms}", brokers=3, metrics=True,
                           env=env).start()
    payload = os.urandom(args.record_bytes)
    try:
        topics = create_topics(cluster)
        latency = acks_all_latency(cluster, topics, args.requests, payload, ("classic", "topic"))
        result = {"interval_ms": interval_ms, "classic": latency["classic"],
                  "active_tiered": latency["topic"]}
    finally:
        cluster.stop()
    tiered = result["active_tiered"]
    print(f"  {interval_ms} ms: classic P50/P99 {result['classic']['p50_ms']:.1f}/"
          f"{result['classic']['p99_ms']:.1f} ms, active-tiered {tiered['p50_ms']:.1f}/"
          f"{tiered['p99_ms']:.1f} ms; steps "
          + ", ".join(f"{k} {v:.1f}" for k, v in tiered["breakdown_mean_ms"].items()),
          flush=True)
    return result


def table(results: list[dict]) -> str:
    rows = ["| upload interval | classic P50 / P99 ms | active-tiered P50 / P99 ms | "
            + " | ".join(f"{step} ms" for step in STEPS) + " |",
            "|---|---|---|" + "---|" * len(STEPS)]
    for r in results:
        tiered, steps = r["active_tiered"], r["active_tiered"]["breakdown_mean_ms"]
        rows.append(f"| {r['interval_ms']} ms | {r['classic']['p50_ms']:.1f} / "
                    f"{r['classic']['p99_ms']:.1f} | {tiered['p50_ms']:.1f} / "
                    f"{tiered['p99_ms']:.1f} | "
                    + " | ".join(f"{steps.get(step, 0):.1f}" for step in STEPS) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tiered_interval_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--intervals", default="25,50,100,250",
                   help="active_tiered_upload_interval_ms values (default 25,50,100,250)")
    p.add_argument("--requests", type=int, default=100, help="acks=all requests per topic")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)
    intervals = [int(v) for v in args.intervals.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kipper-tiered-intervals-") as tmp:
        results = [run(Path(tmp), interval, args) for interval in intervals]
    wall_s = time.perf_counter() - started
    print(f"\n{wall_s:.0f} s; {args.requests} single-record acks=all requests per topic\n")
    print(table(results))
    if args.json:
        write_run(args.json, args, wall_s, intervals=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
