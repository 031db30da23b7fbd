"""Produce throughput of a 3-broker cluster: acks=all on RF=3 against acks=1 on RF=1.

Starts `kipper cluster up` (3 brokers, racks az1..az3) and produces the same records with
confluent-kafka to both topics in one run; prints MB/s and the ratio.

    python -m bench.cluster_bench --mb 100
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_bench import parse_args as parse_producer_args
from bench.broker_bench import produce
from bench.local_cluster import LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kipper-cluster-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=3).start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            cases = {"acks=1 RF=1": ("rf1", 1, "1"), "acks=all RF=3": ("rf3", 3, "all")}
            for topic, rf, _ in cases.values():
                admin.create_topics([NewTopic(topic, 1, rf)])[topic].result(30)
            results = {}
            for name, (topic, _, acks) in cases.items():
                producer_args = parse_producer_args(["--mb", str(args.mb), "--acks", acks])
                results[name] = produce(producer_args, cluster.bootstrap, topic)
                print(f"{name}: {results[name].mb_per_s:.1f} MB/s "
                      f"({results[name].records} records, errors {results[name].errors})")
            ratio = results["acks=all RF=3"].mb_per_s / results["acks=1 RF=1"].mb_per_s
            print(f"acks=all RF=3 / acks=1 RF=1 = {ratio:.2f}x")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
