"""Start and stop kipper processes for tests: loopback only, ephemeral ports, stopped by pid."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from broker.metrics import LISTENING_LINE as METRICS_LISTENING_LINE
from storage.objectstore.admin import ADMIN_PATH as FAULT_ADMIN_PATH

READY = re.compile(r"kipper (?:broker|controller) (\d+) listening on ([\d.]+):(\d+)")


@dataclass
class BrokerProcess:
    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    node_id: int = 0
    port: int = 0
    role: str = "broker"
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    metrics_url: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        """Start (or restart, on the same port) and wait for the ready line."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.role}-{self.node_id}.log"
        cmd = [sys.executable, "-m", "broker.cli", self.role, "--node-id", str(self.node_id),
               "--listener", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
               *self.extra_args]
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file,
                                     stdin=subprocess.DEVNULL, text=True,
                                     env={**os.environ, **(self.env or {})})
        log_file.close()
        line = _readline_with_timeout(self.proc, timeout)
        match = READY.search(line or "")
        if not match:
            self.kill()
            raise RuntimeError(f"broker did not start: {line!r}; log:\n{self.log_tail()}")
        self.port = int(match.group(3))
        if "--metrics-listener" in self.extra_args:
            line = _readline_with_timeout(self.proc, timeout) or ""
            assert line.startswith(METRICS_LISTENING_LINE), line
            self.metrics_url = line[len(METRICS_LISTENING_LINE):].strip()
        return self

    def metrics_json(self) -> dict:
        with urllib.request.urlopen(self.metrics_url + "/metrics.json", timeout=10) as response:
            return json.load(response)

    def s3_fault(self, spec: dict) -> None:
        """Apply an object-store fault (storage.objectstore.faults) to this broker's store."""
        request = urllib.request.Request(self.metrics_url + FAULT_ADMIN_PATH,
                                         data=json.dumps(spec).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=10).close()

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """kill -9: no shutdown hooks, no flush."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait for a graceful exit."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _readline_with_timeout(proc: subprocess.Popen, timeout: float) -> str | None:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else None


def az_locality(row: dict) -> str:
    """"same", "cross" or "unknown": where a /metrics.json network row's peer is."""
    if row["peer_az"] == "unknown":
        return "unknown"
    return "same" if row["peer_az"] == row["local_az"] else "cross"


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value is not None and value is not False:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met in time")


class Cluster:
    """A controller-only node plus brokers in racks az1..azN, so any broker can be killed."""

    def __init__(self, root: Path, brokers: int = 3, session_timeout_ms: int = 2000,
                 broker_args: list[str] | None = None, s3=None,
                 broker_env: dict[str, str] | None = None) -> None:
        """``s3``: an ``S3Endpoint`` (storage.objectstore.testing) the brokers use, under a
        key prefix of this cluster's own."""
        env = {"KIPPER_BROKER_SESSION_TIMEOUT_MS": str(session_timeout_ms),
               "KIPPER_REPLICA_LAG_TIME_MAX_MS": "4000", **(broker_env or {})}
        broker_args = list(broker_args or [])
        if s3 is not None:
            broker_args += ["--s3-endpoint", s3.url, "--s3-access-key", s3.access_key,
                            "--s3-secret-key", s3.secret_key]
            env["KIPPER_S3_KEY_PREFIX"] = f"test-{uuid.uuid4().hex[:12]}/"
        self.controller = BrokerProcess(root / "controller", node_id=1000, role="controller",
                                        env=env)
        self.brokers = [BrokerProcess(root / f"broker-{i}", node_id=i, env=env,
                                      extra_args=[*broker_args, "--rack", f"az{i + 1}"])
                        for i in range(brokers)]

    def start(self) -> "Cluster":
        self.controller.start()
        for broker in self.brokers:
            broker.extra_args += ["--controller", self.controller.bootstrap]
            broker.start()
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.alive())

    def stop(self) -> None:
        for node in [*self.brokers, self.controller]:
            node.stop()

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """The partition's current leader, as the cluster reports it (waits for one)."""
        from confluent_kafka.admin import AdminClient

        def current() -> int | None:
            admin = AdminClient({"bootstrap.servers": self.bootstrap})
            metadata = admin.list_topics(topic, timeout=5)
            info = metadata.topics[topic].partitions.get(partition)
            alive = {b.node_id for b in self.brokers if b.alive()}
            return info.leader if info is not None and info.leader in alive else None
        return wait_until(current, timeout, interval=0.2)

    def isr_of(self, topic: str, partition: int = 0) -> list[int]:
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return list(admin.list_topics(topic, timeout=5).topics[topic].partitions[partition].isrs)


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None) -> None:
    """Create a topic with a real client and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication_factor,
                                  config=config or {})])[name].result(30)

    def has_leaders() -> bool:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        return (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values()))
    wait_until(has_leaders, timeout=30)


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60,
                config: dict[str, str] | None = None) -> list[bytes]:
    """Values of partition 0 from offset 0: ``expected`` of them, plus any extra that
    arrive within a further second (a duplicate would show up there)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **(config or {})})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
        while (message := consumer.poll(1.0)) is not None:
            if not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


class ConfluentWriter:
    """An idempotent acks=all confluent-kafka producer that records what was acknowledged."""

    def __init__(self, bootstrap: str, linger_ms: int = 2) -> None:
        from confluent_kafka import Producer
        self.acked: list[bytes] = []
        self.failed = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": linger_ms,
                                  "message.timeout.ms": 120_000})

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed += 1

    def send(self, topic: str, *values: bytes) -> None:
        for value in values:
            self.producer.produce(topic, value, partition=0, on_delivery=self._delivered)
            self.producer.poll(0)

    def flush(self, timeout: float = 120) -> int:
        """Wait for every outstanding delivery report; the number still undelivered."""
        return self.producer.flush(timeout)
