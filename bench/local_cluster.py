"""`kipper cluster up` as a test fixture: one launcher process, its nodes read from its stdout."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from broker.az_network import AzLayout, cluster_namespaces, remove_namespaces

# "broker 1: pid=4101 rack=az2 address=127.0.0.1:9093 metrics=http://...", "s3: pid=...";
# with --netns also "relay: pid=..." and "az az1: netns=... clients=...".
NODE_LINE = re.compile(r"(s3|broker \d+|relay|az \S+): (.*)")
# Starts tried when a node found its port taken.
START_ATTEMPTS = 3


@dataclass
class LocalCluster:
    root: Path
    brokers: int = 3
    metrics: bool = False
    # More `kipper cluster up` arguments, e.g. ["--s3-latency-profile", "s3-standard"].
    extra_args: list[str] = field(default_factory=list)
    # Each AZ a network namespace (`cluster up --netns`); a round trip of that many ms
    # between AZs.
    netns: bool = False
    az_rtt_ms: float = 0.0
    # Environment of the launcher (its KIPPER_* reach every broker) on top of ours.
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    bootstrap: str = ""
    # With `--security sasl-ssl|ssl`: the client configuration the launcher wrote.
    client_properties: Path | None = None
    # "s3", "broker 0", ...: the key=value fields of the launcher's line for that node.
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    _stdout: queue.Queue = field(default_factory=queue.Queue)

    def start(self, timeout: float = 90.0) -> "LocalCluster":
        for _ in range(START_ATTEMPTS - 1):
            position = self.log_size()
            try:
                return self._start(timeout)
            except RuntimeError:
                # --base-port 0 picks free ports before the nodes bind them, and another
                # process may take one meanwhile (kipper says so in one line): new ports.
                if "address already in use" not in self.log_since(position):
                    raise
        return self._start(timeout)

    def _start(self, timeout: float) -> "LocalCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        self.nodes, self._stdout = {}, queue.Queue()
        command = [sys.executable, "-m", "broker.cli", "cluster", "up",
                   "--brokers", str(self.brokers), "--base-port", "0",
                   "--data-dir", str(self.root / "data")]
        if self.metrics:
            command += ["--metrics-base-port", "0"]
        if self.netns:
            command += ["--netns", "--az-rtt-ms", str(self.az_rtt_ms)]
        command += self.extra_args
        with open(self.root / "cluster.log", "ab") as log:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log,
                                         stdin=subprocess.DEVNULL, text=True,
                                         env={**os.environ, **self.env})
        threading.Thread(target=_read_lines, args=(self.proc.stdout, self._stdout),
                         daemon=True).start()
        while not self.bootstrap:
            try:
                line = self._stdout.get(timeout=timeout)
            except queue.Empty:
                line = None
            if line is None:  # EOF or silence: it failed
                self.stop()
                raise RuntimeError(f"cluster did not start; log:\n{self.log_tail()}")
            if line.startswith("bootstrap: "):
                self.bootstrap = line.split(" ", 1)[1].strip()
            elif line.startswith("client properties: "):
                self.client_properties = Path(line.split(": ", 1)[1].strip())
            elif match := NODE_LINE.match(line):
                self.nodes[match.group(1)] = dict(
                    pair.split("=", 1) for pair in match.group(2).split())
        return self

    def client_config(self) -> dict[str, str]:
        """The client.properties of a secured cluster as a librdkafka configuration."""
        lines = self.client_properties.read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def pids(self) -> list[int]:
        return [int(node["pid"]) for name, node in self.nodes.items() if "pid" in node]

    def layout(self) -> AzLayout:
        """With ``netns``: the namespaces, addresses and relay of the cluster."""
        return AzLayout.load(self.root / "data" / "network.json")

    def broker(self, node_id: int) -> dict[str, str]:
        return self.nodes[f"broker {node_id}"]

    def kill_broker(self, node_id: int) -> None:
        """kill -9 of one broker; returns once it is gone (the launcher keeps the others)."""
        pid = int(self.broker(node_id)["pid"])
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.01)

    def metrics_json(self, node_id: int) -> dict:
        with urllib.request.urlopen(self.broker(node_id)["metrics"] + "/metrics.json",
                                    timeout=10) as response:
            return json.load(response)

    def log_tail(self, lines: int = 60) -> str:
        text = (self.root / "cluster.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def log_size(self) -> int:
        """Where the launcher's log ends now (a later start of the same root appends)."""
        path = self.root / "cluster.log"
        return path.stat().st_size if path.exists() else 0

    def log_since(self, position: int) -> str:
        with open(self.root / "cluster.log", "rb") as log:
            log.seek(position)
            return log.read().decode(errors="replace")

    def terminate(self, timeout: float = 60.0, sig: int = signal.SIGTERM) -> int | None:
        """Signal the launcher (SIGTERM, or SIGINT as Ctrl-C), which stops its nodes; its
        exit status."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return None if self.proc is None else self.proc.returncode

    def stop(self) -> None:
        """Terminate, and kill whatever the launcher left behind (and its namespaces)."""
        self.terminate()
        for pid in self.pids():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        if self.netns and self.proc is not None:
            remove_namespaces(cluster_namespaces().get(self.proc.pid, []))


def _read_lines(stream, lines: queue.Queue) -> None:
    """Each line of ``stream`` into ``lines``, then None (its own queue per start: an earlier
    launcher's end must not read as this one's)."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
