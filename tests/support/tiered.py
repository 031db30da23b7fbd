"""Clusters for active-tiered (KIP-1176) topics, and the counters the tests read.

Every broker serves /metrics.json (``--metrics-listener 127.0.0.1:0``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from .metrics import az_locality
from .processes import Cluster
from .s3 import S3Endpoint
from .topics import create_topic

# For tests that assert the object-store path: a loaded machine must not turn a slow
# download into a fallback.
PATIENT_DOWNLOADS = {"KIPPER_ACTIVE_TIERED_DOWNLOAD_TIMEOUT_MS": "30000"}
TIERED = {"kipper.storage.mode": "active-tiered"}


class TieredCluster(Cluster):
    """Three brokers in az1..az3 with metrics, against the session S3 server."""

    def __init__(self, root: Path, s3: S3Endpoint, broker_env: dict[str, str] | None = None,
                 broker_args: list[str] | None = None) -> None:
        super().__init__(root, s3=s3, broker_env=broker_env,
                         broker_args=["--metrics-listener", "127.0.0.1:0", *(broker_args or [])])

    def metrics(self, node_id: int) -> dict:
        return self.brokers[node_id].metrics_json()

    def fault(self, node_id: int, spec: dict) -> None:
        """Apply an object-store fault spec in one broker's S3 client (HTTP admin route)."""
        self.brokers[node_id].s3_fault(spec)

    def tiered_counters(self, nodes=None) -> Counter:
        """active_tiered counters summed over brokers: plain totals and per-label ones
        flattened to (name, label)."""
        total: Counter = Counter()
        for node in nodes if nodes is not None else range(len(self.brokers)):
            if not self.brokers[node].alive():
                continue
            for name, value in self.metrics(node).get("active_tiered", {}).items():
                if name == "timings":
                    for step, timing in value.items():
                        total["timing_count", step] += timing["count"]
                        total["timing_sum_s", step] += timing["sum_s"]
                elif isinstance(value, dict):
                    for label, n in value.items():
                        total[name, label] += n
                        total[name] += n
                else:
                    total[name] += value
        return total

    def network(self, side: str = "server", nodes=None) -> Counter:
        """Network bytes summed over live brokers by (class, same|cross|unknown)."""
        totals: Counter = Counter()
        for node, broker in enumerate(self.brokers):
            if not broker.alive() or (nodes is not None and node not in nodes):
                continue
            for row in self.metrics(node)["network"][side]:
                totals[row["class"], az_locality(row)] += row["bytes"]
        return totals

    def objectstore(self) -> Counter:
        """Object-store payload bytes and requests by (operation, bucket), over live brokers."""
        totals: Counter = Counter()
        for node, broker in enumerate(self.brokers):
            if not broker.alive():
                continue
            for row in self.metrics(node)["objectstore"]["requests"]:
                totals["bytes", row["operation"], row["bucket"]] += row["bytes"]
                totals["requests", row["operation"], row["bucket"]] += row["requests"]
        return totals


def create_tiered_topic(cluster: Cluster, name: str, **configs: str) -> None:
    config = {**TIERED, **{k.replace("_", "."): v for k, v in configs.items()}}
    create_topic(cluster.bootstrap, name, replication_factor=3, config=config, in_sync=True)


@pytest.fixture(scope="session")
def tiered_cluster(tmp_path_factory, s3_endpoint):
    """One cluster whose topics are active-tiered by default, for the active-tiered runs of
    tests/system (each client creates its topic its own way): started once per worker, on
    first use, like ``diskless_cluster``."""
    cluster = TieredCluster(tmp_path_factory.mktemp("tiered"), s3_endpoint, PATIENT_DOWNLOADS,
                            broker_args=["--default-storage-mode", "active-tiered"]).start()
    yield cluster
    cluster.stop()
