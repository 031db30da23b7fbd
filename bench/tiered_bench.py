"""Active-tiered (KIP-1176) against classic on one local 3-broker, 3-AZ cluster, in one run.

    python -m bench.tiered_bench [--requests 1000] [--mb 64] [--json out.json]

Starts `kipper cluster up` (racks az1..az3, embedded S3, metrics on) and creates RF=3
topics: one classic, one active-tiered per metadata scheme (topic, fetch, memory). Then:

1. acks=1 latency: one record per request, classic and active-tiered (topic scheme)
   alternating request by request, so both see the same machine; P50/P99 and the ratio.
2. acks=all latency: the same, one block per topic; for the active-tiered ones the
   breakdown from the brokers' step timers: upload wait (first append to PUT), PUT,
   publish (metadata), download (follower), and "replicated" (refs handed out until every
   in-sync follower fetched past them: pointer delivery + download + append + next fetch).
3. Throughput run per topic (--mb of 1 KiB records, acks=1): cross-AZ replication bytes
   and fast-bucket PUT/GET bytes; WAL metadata bytes per GB produced for each scheme.
4. Paced run per scheme (--paced-mb-per-s for --paced-seconds): metadata per GB when
   uploads close on the interval rather than on max.bytes, as for most real partitions.

Every figure is printed and, with --json, written out. The brokers' KIPPER_* environment
(e.g. KIPPER_ACTIVE_TIERED_UPLOAD_INTERVAL_MS) reaches them through the launcher.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.local_cluster import LocalCluster

SCHEMES = ("topic", "fetch", "memory")
GB = 1 << 30
# A KIP-405 RemoteLogSegmentMetadata record is a few hundred bytes per (1 GiB) segment.
SEGMENT_RECORD_BYTES = 300


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def create_topics(cluster: LocalCluster) -> dict[str, str]:
    """Name by case: "classic" and one per scheme; returns once every ISR is complete."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = {"classic": ("bench-classic", {})}
    for scheme in SCHEMES:
        topics[scheme] = (f"bench-tiered-{scheme}", {
            "kipper.storage.mode": "active-tiered", "active.tiered.metadata.scheme": scheme})
    futures = admin.create_topics([NewTopic(name, 1, 3, config=config)
                                   for name, config in topics.values()])
    for future in futures.values():
        future.result(30)
    deadline = time.monotonic() + 60
    names = [name for name, _ in topics.values()]
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10).topics
        if all(n in metadata and len(metadata[n].partitions[0].isrs) == 3 for n in names):
            return {case: name for case, (name, _) in topics.items()}
        time.sleep(0.2)
    raise RuntimeError("topics did not get a full ISR")


def timed_request(producer: Producer, topic: str, payload: bytes) -> float:
    """Seconds from produce() to the delivery report of one single-record request."""
    started = time.perf_counter()
    producer.produce(topic, payload, partition=0)
    producer.flush(30)
    return time.perf_counter() - started


def broker_counters(cluster: LocalCluster, nodes: list[int] | None = None) -> Counter:
    """Summed over the brokers (or ``nodes``): active_tiered counters (flattened), network
    bytes by (class, same|cross) and fast-bucket object-store bytes by operation."""
    total: Counter = Counter()
    for node in range(cluster.brokers) if nodes is None else nodes:
        metrics = cluster.metrics_json(node)
        for name, value in metrics.get("active_tiered", {}).items():
            if name == "timings":
                for step, timing in value.items():
                    total["count", step] += timing["count"]
                    total["sum_s", step] += timing["sum_s"]
            elif isinstance(value, dict):
                for label, n in value.items():
                    total[name, label] += n
            else:
                total[name] += value
        for row in metrics["network"]["server"]:
            if row["peer_az"] != "unknown":
                where = "same" if row["peer_az"] == row["local_az"] else "cross"
                total["network", row["class"], where] += row["bytes"]
        for row in metrics["objectstore"]["requests"]:
            if row["bucket"].startswith("kipper-fast-"):
                total["objectstore", row["operation"]] += row["bytes"]
                total["requests", row["operation"]] += row["requests"]
    return total


def latency_summary(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(seconds, 0.5) * 1000, "p99_ms": percentile(seconds, 0.99) * 1000,
            "mean_ms": statistics.fmean(seconds) * 1000, "requests": len(seconds)}


def acks1_latency(cluster: LocalCluster, topics: dict[str, str], requests: int,
                  payload: bytes) -> dict:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 0})
    seconds: dict[str, list[float]] = {"classic": [], "active-tiered": []}
    for case in seconds:  # warm-up: connections, metadata
        timed_request(producer, topics["classic" if case == "classic" else "topic"], payload)
    for _ in range(requests):
        seconds["classic"].append(timed_request(producer, topics["classic"], payload))
        seconds["active-tiered"].append(timed_request(producer, topics["topic"], payload))
    result = {case: latency_summary(values) for case, values in seconds.items()}
    result["p50_ratio"] = result["active-tiered"]["p50_ms"] / result["classic"]["p50_ms"]
    result["p99_ratio"] = result["active-tiered"]["p99_ms"] / result["classic"]["p99_ms"]
    return result


# The steps of an active-tiered acks=all produce the brokers time (kipper_tiered_step_*).
STEPS = ("upload_wait", "put", "publish", "download", "replicated")


def acks_all_latency(cluster: LocalCluster, topics: dict[str, str], requests: int,
                     payload: bytes, cases: tuple[str, ...] = ("classic", *SCHEMES)) -> dict:
    """Per case (a key of ``topics``): the latency of ``requests`` acks=all produce requests
    one at a time, and for an active-tiered case the mean of each of its STEPS, the fast
    bucket PUTs and the bytes that fell back to the leader."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    result = {}
    for case in cases:
        timed_request(producer, topics[case], payload)  # connections, metadata
        before = broker_counters(cluster)
        seconds = [timed_request(producer, topics[case], payload) for _ in range(requests)]
        grown = broker_counters(cluster) - before
        summary = latency_summary(seconds)
        if case != "classic":
            summary["breakdown_mean_ms"] = {
                step: grown["sum_s", step] / grown["count", step] * 1000
                for step in STEPS if grown["count", step]}
            summary["fallback_bytes"] = grown["fallback_bytes"]
            summary["fast_puts"] = grown["requests", "PutObject"]
        result[case] = summary
    return result


def throughput_run(cluster: LocalCluster, topics: dict[str, str], mb: float) -> dict:
    record = os.urandom(1024)
    count = int(mb * (1 << 20) / len(record))
    result = {}
    for case in ("classic", *SCHEMES):
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1",
                             "linger.ms": 5, "batch.size": 1 << 20})
        before = broker_counters(cluster)
        started = time.perf_counter()
        for _ in range(count):
            while True:
                try:
                    producer.produce(topics[case], record, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        producer.flush(120)
        elapsed = time.perf_counter() - started
        time.sleep(2)  # let followers finish replicating before the counters are read
        grown = broker_counters(cluster) - before
        produced = count * len(record)
        entry = {
            "produced_bytes": produced, "mb_per_s": produced / elapsed / (1 << 20),
            "cross_az_replication_bytes": grown["network", "replication", "cross"],
            "fast_bucket_put_bytes": grown["objectstore", "PutObject"],
            "fast_bucket_get_bytes": grown["objectstore", "GetObject"],
            "puts": grown["requests", "PutObject"], "gets": grown["requests", "GetObject"],
            "fallback_bytes": grown["fallback_bytes"],
        }
        if case != "classic":
            metadata = grown["metadata_bytes", case] + grown["metadata_file_bytes", case]
            entry.update({
                "metadata_bytes": grown["metadata_bytes", case],
                "metadata_records": grown["metadata_records", case],
                "metadata_file_bytes": grown["metadata_file_bytes", case],
                "metadata_bytes_per_gb": metadata / produced * GB,
                "metadata_records_per_gb": grown["metadata_records", case] / produced * GB,
            })
        result[case] = entry
    return result


def paced_metadata_run(cluster: LocalCluster, topics: dict[str, str], mb_per_s: float,
                       seconds: float) -> dict:
    """Metadata per GB at a steady per-partition rate: here uploads close on the interval,
    not on max.bytes, so every object carries little data and metadata per GB grows."""
    record = os.urandom(1024)
    per_tick = max(1, int(mb_per_s * (1 << 20) / len(record) / 100))  # 100 ticks per second
    result = {}
    for case in SCHEMES:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1",
                             "linger.ms": 5})
        before = broker_counters(cluster)
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < seconds:
            for _ in range(per_tick):
                producer.produce(topics[case], record, partition=0)
            sent += per_tick
            producer.poll(0)
            time.sleep(max(0.0, started + sent / per_tick / 100 - time.monotonic()))
        producer.flush(60)
        time.sleep(1)
        grown = broker_counters(cluster) - before
        produced = sent * len(record)
        metadata = grown["metadata_bytes", case] + grown["metadata_file_bytes", case]
        result[case] = {"produced_bytes": produced, "uploads": grown["uploads"],
                        "metadata_bytes_per_gb": metadata / produced * GB,
                        "metadata_records_per_gb": grown["metadata_records", case] / produced * GB}
    return result


def print_report(report: dict) -> None:
    a1 = report["acks1"]
    print(f"\nacks=1, {a1['classic']['requests']} single-record requests each (interleaved)")
    for case in ("classic", "active-tiered"):
        print(f"  {case:14} P50 {a1[case]['p50_ms']:7.2f} ms  P99 {a1[case]['p99_ms']:7.2f} ms")
    print(f"  ratio active-tiered/classic: P50 {a1['p50_ratio']:.2f}x  P99 {a1['p99_ratio']:.2f}x")
    print("\nacks=all, single-record requests")
    for case, s in report["acks_all"].items():
        line = f"  {case:8} P50 {s['p50_ms']:7.2f} ms  P99 {s['p99_ms']:7.2f} ms"
        if "breakdown_mean_ms" in s:
            line += "  mean steps: " + ", ".join(
                f"{step} {ms:.1f}" for step, ms in s["breakdown_mean_ms"].items())
        print(line)
    print("\nthroughput run (acks=1, 1 KiB records)")
    for case, t in report["throughput"].items():
        line = (f"  {case:8} {t['produced_bytes'] / (1 << 20):6.1f} MiB at {t['mb_per_s']:5.1f} "
                f"MiB/s; cross-AZ replication {t['cross_az_replication_bytes']:>11} B; fast "
                f"buckets PUT {t['fast_bucket_put_bytes']:>11} B ({t['puts']} req), GET "
                f"{t['fast_bucket_get_bytes']:>11} B ({t['gets']} req)")
        print(line)
    paced = report["paced"]
    rate = paced["mb_per_s"]
    print(f"\nWAL metadata per GB produced (KIP-405 for comparison: one ~{SEGMENT_RECORD_BYTES} B"
          f" record per 1 GiB segment = {SEGMENT_RECORD_BYTES} B/GB)")
    for case in SCHEMES:
        t, p = report["throughput"][case], paced[case]
        print(f"  {case:6} full speed: {t['metadata_bytes_per_gb'] / 1024:8.1f} KiB/GB "
              f"({t['metadata_records_per_gb']:6.0f} records/GB, "
              f"{t['metadata_bytes_per_gb'] / SEGMENT_RECORD_BYTES:7.0f}x KIP-405); "
              f"at {rate} MiB/s: {p['metadata_bytes_per_gb'] / 1024:8.1f} KiB/GB "
              f"({p['metadata_records_per_gb']:6.0f} records/GB, "
              f"{p['metadata_bytes_per_gb'] / SEGMENT_RECORD_BYTES:7.0f}x KIP-405)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiered_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000,
                        help="acks=1 requests per mode (acks=all: a fifth of it per topic)")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--mb", type=float, default=64, help="MiB per topic in the throughput run")
    parser.add_argument("--paced-mb-per-s", type=float, default=1.0,
                        help="rate of the paced metadata run (one partition)")
    parser.add_argument("--paced-seconds", type=float, default=10)
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    payload = os.urandom(args.record_bytes)
    with tempfile.TemporaryDirectory(prefix="kipper-tiered-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=3, metrics=True).start()
        try:
            topics = create_topics(cluster)
            report = {
                "upload_interval_ms": int(os.environ.get(
                    "KIPPER_ACTIVE_TIERED_UPLOAD_INTERVAL_MS", 100)),
                "acks1": acks1_latency(cluster, topics, args.requests, payload),
                "acks_all": acks_all_latency(cluster, topics, max(args.requests // 5, 20),
                                             payload),
                "throughput": throughput_run(cluster, topics, args.mb),
                "paced": {"mb_per_s": args.paced_mb_per_s, **paced_metadata_run(
                    cluster, topics, args.paced_mb_per_s, args.paced_seconds)},
            }
        finally:
            cluster.stop()
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
