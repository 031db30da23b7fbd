"""Clusters for the active-tiered tests, and the counters they read.

Every broker serves /metrics.json (``--metrics-listener 127.0.0.1:0``); its URL is the line
the broker prints after its ready line.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from pathlib import Path

from support import BrokerProcess, Cluster, _readline_with_timeout, create_topic, wait_until

METRICS_LINE = "kipper metrics listening on "
# For tests that assert the object-store path: a loaded machine must not turn a slow
# download into a fallback.
PATIENT_DOWNLOADS = {"KIPPER_ACTIVE_TIERED_DOWNLOAD_TIMEOUT_MS": "30000"}
TIERED = {"kipper.storage.mode": "active-tiered"}


class TieredCluster(Cluster):
    """Three brokers in az1..az3 with metrics, against the session S3 server."""

    def __init__(self, root: Path, s3, broker_env: dict[str, str] | None = None) -> None:
        super().__init__(root, s3=s3, broker_env=broker_env,
                         broker_args=["--metrics-listener", "127.0.0.1:0"])
        self._metrics_urls: dict[int, str] = {}

    def start_broker(self, broker: BrokerProcess) -> None:
        broker.start()
        line = _readline_with_timeout(broker.proc, 10) or ""
        assert line.startswith(METRICS_LINE), line
        self._metrics_urls[broker.proc.pid] = line[len(METRICS_LINE):].strip()

    def start(self) -> "TieredCluster":
        self.controller.start()
        for broker in self.brokers:
            broker.extra_args += ["--controller", self.controller.bootstrap]
            self.start_broker(broker)
        return self

    def metrics(self, node_id: int) -> dict:
        broker = self.brokers[node_id]
        with urllib.request.urlopen(self._metrics_urls[broker.proc.pid] + "/metrics.json",
                                    timeout=10) as response:
            return json.load(response)

    def fault(self, node_id: int, spec: dict) -> None:
        """Apply an object-store fault spec in one broker's S3 client (HTTP admin route)."""
        broker = self.brokers[node_id]
        request = urllib.request.Request(
            self._metrics_urls[broker.proc.pid] + "/admin/s3-faults",
            data=json.dumps(spec).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request, timeout=10).read()

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
                if row["peer_az"] == "unknown":
                    locality = "unknown"
                else:
                    locality = "same" if row["peer_az"] == row["local_az"] else "cross"
                totals[row["class"], locality] += row["bytes"]
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
    create_topic(cluster.bootstrap, name, replication_factor=3, config=config)
    wait_until(lambda: len(cluster.isr_of(name)) == 3, timeout=30, interval=0.2)


class AckTracker:
    """A confluent-kafka producer (acks=all, idempotent) that records what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer
        self.acked: list[bytes] = []
        self.failed = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 120_000})

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed += 1

    def send(self, topic: str, values: list[bytes]) -> None:
        for value in values:
            self.producer.produce(topic, value, partition=0, on_delivery=self._delivered)
            self.producer.poll(0)

    def flush(self, timeout: float = 120) -> None:
        assert self.producer.flush(timeout) == 0
