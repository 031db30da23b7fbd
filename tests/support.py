"""Start and stop kipper processes for tests: loopback only, ephemeral ports, stopped by pid."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY = re.compile(r"kipper broker (\d+) listening on ([\d.]+):(\d+)")


@dataclass
class BrokerProcess:
    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    node_id: int = 0
    port: int = 0
    proc: subprocess.Popen | None = None
    log_path: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        """Start (or restart, on the same port) and wait for the ready line."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / f"broker-{self.node_id}.log"
        cmd = [sys.executable, "-m", "broker.cli", "broker", "--node-id", str(self.node_id),
               "--listener", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir),
               *self.extra_args]
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file,
                                     stdin=subprocess.DEVNULL, text=True)
        log_file.close()
        line = _readline_with_timeout(self.proc, timeout)
        match = READY.search(line or "")
        if not match:
            self.kill()
            raise RuntimeError(f"broker did not start: {line!r}; log:\n{self.log_tail()}")
        self.port = int(match.group(3))
        return self

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


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met in time")
