"""Produce and consume throughput over TLS and SASL_SSL vs plaintext, per storage mode.

For each ``--security`` (none, ssl = mutual TLS, sasl-ssl = SCRAM-SHA-512 over TLS) a
one-broker ``kipper cluster up`` (with its embedded S3 server) is started; in each
``--modes`` a topic of ``--partitions`` gets ``--mb`` produced (acks=all, records spread
over the partitions) and consumed back with confluent-kafka, the client settings of
bench.broker_bench plus the client.properties the secured cluster writes. Printed: MB/s of
each, and each secured figure's ratio to the plaintext one measured in the same run.

    python -m bench.security_bench --mb 50
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench import broker_bench
from bench.local_cluster import LocalCluster

SECURITY = ("none", "ssl", "sasl-ssl")
MODES = ("classic", "diskless")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="security_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=50, help="payload MB per produce phase")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--json", type=Path, help="write the figures to this file")
    return p.parse_args(argv)


def client_settings(cluster: LocalCluster) -> dict[str, str]:
    if cluster.client_properties is None:
        return {"bootstrap.servers": cluster.bootstrap}
    return cluster.client_config()


def create_topic(client: dict[str, str], topic: str, partitions: int, mode: str) -> None:
    admin = AdminClient(client)
    admin.create_topics([NewTopic(topic, partitions, 1, config={
        "kipper.storage.mode": mode})])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and all(
                p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} has partitions without a leader after 60 s")


def measure(args: argparse.Namespace, security: str, modes: list[str]) -> dict[str, dict]:
    extra = [] if security == "none" else ["--security", security]
    figures = {}
    with tempfile.TemporaryDirectory(prefix="kipper-security-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), brokers=1, extra_args=extra).start()
        try:
            client = client_settings(cluster)
            settings = [f"{key}={value}" for key, value in client.items()
                        if key != "bootstrap.servers"]
            bench_args = broker_bench.parse_args(
                ["--mb", str(args.mb), "--partitions", str(args.partitions), "--acks", "all",
                 "--spread"]
                + [arg for kv in settings for arg in ("--producer-config", kv)]
                + [arg for kv in settings for arg in ("--consumer-config", kv)])
            for mode in modes:
                topic = f"security-{mode}-{uuid.uuid4().hex[:8]}"
                create_topic(client, topic, args.partitions, mode)
                produced = broker_bench.produce(bench_args, cluster.bootstrap, topic)
                consumed = broker_bench.consume(bench_args, cluster.bootstrap, topic,
                                                produced.records)
                errors = {**produced.errors, **consumed.errors}
                if errors:
                    raise RuntimeError(f"{security} {mode}: {errors}")
                figures[mode] = {"produce_mb_s": produced.mb_per_s,
                                 "consume_mb_s": consumed.mb_per_s}
                print(f"{security:>8} {mode:<8} produce {produced.mb_per_s:7.1f} MB/s  "
                      f"consume {consumed.mb_per_s:7.1f} MB/s", flush=True)
        finally:
            cluster.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [mode for mode in args.modes.split(",") if mode]
    figures = {security: measure(args, security, modes) for security in SECURITY}
    print(f"\nsecured / plaintext, {args.mb:g} MB over {args.partitions} partitions "
          "(this machine, this run):")
    for security in SECURITY[1:]:
        for mode in modes:
            ratios = [figures[security][mode][f"{phase}_mb_s"]
                      / figures["none"][mode][f"{phase}_mb_s"] for phase in ("produce", "consume")]
            print(f"  {security:>8} {mode:<8} produce {ratios[0]:.2f}x  consume {ratios[1]:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
