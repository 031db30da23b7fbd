"""Start and stop kipper processes for tests: loopback only, ephemeral ports, stopped by pid."""

from __future__ import annotations

import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.listening import metrics_url, node_listening
from storage.objectstore.faults import ADMIN_PATH as FAULT_ADMIN_PATH

from .s3 import S3Endpoint
from .topics import partition_metadata
from .wait import wait_until

# Every node a test starts belongs to one cluster: they share its secret (a test of a node
# outside the cluster gives its own in ``env``).
CLUSTER_SECRET = "kipper-test-cluster-secret"
# Settings of every node a test starts (``env`` overrides them): transactions open longer
# than their timeout are aborted within a second, not Kafka's 10 s, so that a test of a
# hanging transaction does not wait for the sweep; retention is checked every 2 s, not every
# 5 minutes, so that a test lowering retention.ms sees the log shrink; leaderships are not
# moved back to preferred replicas behind a test's back (a group coordinator moving while a
# member commits on leaving loses that commit: tests of leader balancing turn it on).
TEST_NODE_ENV = {"KIPPER_CLUSTER_SECRET": CLUSTER_SECRET,
                 "KIPPER_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000",
                 "KIPPER_LOG_RETENTION_CHECK_INTERVAL_MS": "2000",
                 "KIPPER_AUTO_LEADER_REBALANCE_ENABLE": "false"}
# How long a node may take to print its ready line. About 2 s on a quiet machine; most of it
# is Python importing, which a machine loaded by other work (or a slower CI machine) can
# stretch past 30 s. Waiting costs nothing when the node is quick.
READY_TIMEOUT_S = 90.0


@dataclass
class BrokerProcess:
    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    node_id: int = 0
    port: int = 0
    role: str = "broker"
    env: dict[str, str] | None = None
    # Soft and hard RLIMIT_NOFILE of the process (the node raises its soft limit to the hard).
    open_file_limit: int | None = None
    proc: subprocess.Popen | None = None
    log_path: Path | None = None
    metrics_url: str | None = None
    # Every listener's host:port by name, as the ready line gave them.
    listeners: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = READY_TIMEOUT_S) -> "BrokerProcess":
        """Start (or restart, on the same port) and wait for the ready line."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it (see ``start_all``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"{self.role}-{self.node_id}.log"
        cmd = [sys.executable, "-m", "broker.cli", self.role, "--node-id", str(self.node_id),
               "--listener", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
               *self.extra_args]
        log_file = open(self.log_path, "ab")
        limit = self.open_file_limit
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, text=True,
            env={**os.environ, **TEST_NODE_ENV, **(self.env or {})},
            preexec_fn=None if limit is None else
            lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        log_file.close()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> "BrokerProcess":
        """Wait for the launched process's ready line (and metrics line) and take its port."""
        line = _readline_with_timeout(self.proc, timeout)
        listening = node_listening(line)
        if listening is None:
            self.kill()
            raise RuntimeError(f"broker did not start: {line!r}; log:\n{self.log_tail()}")
        self.port = listening.port
        self.listeners = listening.listeners
        if "--metrics-listener" in self.extra_args:
            line = _readline_with_timeout(self.proc, timeout)
            self.metrics_url = metrics_url(line)
            assert self.metrics_url, line
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
        self.terminate()
        return self.wait_stopped(timeout)

    def terminate(self) -> None:
        """SIGTERM without waiting (see ``stop_all``)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)

    def wait_stopped(self, timeout: float = 20.0) -> int | None:
        """Wait for a graceful exit after ``terminate``; kill -9 after ``timeout``."""
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def start_all(nodes: list[BrokerProcess], timeout: float = READY_TIMEOUT_S) -> None:
    """Start (or restart) processes together: a cluster is up in the time of its slowest
    broker rather than the sum of all."""
    try:
        for node in nodes:
            node.launch()
        for node in nodes:
            node.wait_ready(timeout)
    except BaseException:
        stop_all(nodes)  # a failed start leaves no process behind
        raise


def stop_all(nodes: list[BrokerProcess], timeout: float = 20.0) -> None:
    """SIGTERM every process, then wait for each (kill -9 after ``timeout``)."""
    for node in nodes:
        node.terminate()
    for node in nodes:
        node.wait_stopped(timeout)


def _readline_with_timeout(proc: subprocess.Popen, timeout: float) -> str | None:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else None


class Cluster:
    """A controller-only node plus brokers in racks az1..azN, so any broker can be killed."""

    def __init__(self, root: Path, brokers: int = 3, session_timeout_ms: int = 2000,
                 broker_args: list[str] | None = None, s3: S3Endpoint | None = None,
                 broker_env: dict[str, str] | None = None) -> None:
        """``s3``: the S3 server (support.s3) the brokers use, under a key prefix of this
        cluster's own."""
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

    def start(self, timeout: float = READY_TIMEOUT_S) -> "Cluster":
        """``timeout``: for each node's ready line (a loaded machine starts them slowly)."""
        try:
            self.controller.start(timeout)
            for broker in self.brokers:
                broker.extra_args += ["--controller", self.controller.bootstrap]
            start_all(self.brokers, timeout)
        except BaseException:
            self.stop()  # a failed start leaves no process behind
            raise
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.alive())

    def stop(self) -> None:
        stop_all(self.brokers)
        self.controller.stop()

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """The partition's current leader, as the cluster reports it (waits for a live one)."""
        def current() -> int | None:
            alive = {b.node_id for b in self.brokers if b.alive()}
            info = partition_metadata(self.bootstrap, topic, partition)
            return info.leader if info is not None and info.leader in alive else None
        return wait_until(current, timeout, interval=0.2)

    def isr_of(self, topic: str, partition: int = 0) -> list[int]:
        return list(partition_metadata(self.bootstrap, topic, partition).isrs)


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with their own data dirs; every one is stopped at teardown."""
    started: list[BrokerProcess] = []
    counter = itertools.count()

    def start(*extra_args: str, data_dir=None) -> BrokerProcess:
        broker = BrokerProcess(data_dir or tmp_path / f"broker-data-{next(counter)}",
                               list(extra_args))
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    """One broker for the tests that only need a place to produce and consume."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared") / "data",
                           ["--metrics-listener", "127.0.0.1:0"]).start()
    yield broker
    broker.stop()
