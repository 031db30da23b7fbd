"""The embedded S3 server: moto's server mode on 127.0.0.1, reached over real HTTP.

Two ways to run it:
- ``EmbeddedS3``: on a thread of this process, owned by whoever starts it (an
  ObjectStore without an endpoint starts one).
- ``EmbeddedS3Process`` / ``python -m storage.objectstore.embedded --port 0``: a process
  of its own, which several brokers share and whose CPU work does not compete with a
  broker's event loop for the GIL. It prints ``LISTENING_LINE`` + URL and runs until
  SIGTERM or SIGINT.

Given a data directory (``--data-dir``; ``kipper cluster up`` gives ``<data-dir>/s3``) the
server keeps every object as a file there and serves it again after a restart
(``object_files``); without one it keeps them in memory, gone when it stops, which suits tests.
"""

from __future__ import annotations

import abc
import argparse
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NoReturn, Self

LISTENING_LINE = "kipper embedded S3 listening on "
# moto accepts any credentials; these make the signed requests look ordinary.
ACCESS_KEY = "kipper"
SECRET_KEY = "kipper-secret"


class _Server(abc.ABC):
    """Start and stop, or use as a context manager."""

    @abc.abstractmethod
    def start(self) -> str: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class EmbeddedS3(_Server):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, data_dir: Path | None = None) -> None:
        # Imported here: every node reads this module's constants, only the server needs moto
        # (a third of a second of every broker's start).
        from moto.moto_server.werkzeug_app import (DomainDispatcherApplication,
                                                   MotoRequestHandler, create_backend_app)
        from werkzeug.serving import make_server

        from .object_files import keep_objects_under
        if data_dir is not None:
            keep_objects_under(data_dir)

        class OneServerHeader(MotoRequestHandler):
            """Werkzeug names itself in a Server header and moto's response names "amazon.com"
            in another: strict HTTP parsers refuse two (aiohttp's pure-Python parser, which
            asyncio debug mode and platforms without its C extension use)."""

            def send_header(self, keyword: str, value: str) -> None:
                if keyword.lower() != "server" or value == self.version_string():
                    super().send_header(keyword, value)

        self._server = make_server(host, port, DomainDispatcherApplication(create_backend_app),
                                   threaded=True, request_handler=OneServerHeader)
        self._thread: threading.Thread | None = None
        self.endpoint_url: str | None = None

    def start(self) -> str:
        # werkzeug logs every request at INFO; at S3 request rates that drowns the log.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-s3",
                                        daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self.endpoint_url = None


class EmbeddedS3Process(_Server):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, data_dir: Path | None = None) -> None:
        self._command = [
            sys.executable, "-m", "storage.objectstore.embedded", "--host", host, "--port", str(port),
        ]
        if data_dir is not None:
            self._command += ["--data-dir", str(data_dir)]
        self._process: subprocess.Popen[str] | None = None
        self.endpoint_url: str | None = None

    def start(self) -> str:
        # The child must import this package even when it is not installed (a checkout).
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        self._process = subprocess.Popen(self._command, stdout=subprocess.PIPE, text=True, env=env)
        line = self._process.stdout.readline()  # type: ignore[union-attr]
        match = re.match(re.escape(LISTENING_LINE) + r"(http://\S+)", line)
        if match is None:
            self.stop()
            raise RuntimeError(f"embedded S3 did not start; it printed {line!r}")
        self.endpoint_url = match.group(1)
        return self.endpoint_url

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()  # type: ignore[union-attr]
        self._process = None
        self.endpoint_url = None


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(description="Run kipper's embedded S3 server (moto).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep objects as files here (default: in memory, lost at exit)")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    print(LISTENING_LINE + EmbeddedS3(args.host, args.port, args.data_dir).start(), flush=True)
    stopping.wait()
    # Exit at once: every object is a file already, written and fsynced before its PUT was
    # answered (object_files; without a data dir they are meant to go), as a kill -9 would
    # find them. Stopping the server first only stopped accepting, after up to half a
    # second of werkzeug's accept loop (its request threads are daemons, gone at exit
    # either way), and tearing down moto's modules took a few tenths more: both on every
    # `kipper cluster up` stop.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
