"""LocalStack's S3 on this host, without Docker: run tests against it instead of the embedded server.

    PYTHONPATH=tests python -m support.localstack --install -- python -m pytest tests/storage/objectstore

installs LocalStack's own runtime (``localstack-core[runtime]``, pinned in
.ci/localstack-requirements.txt) into a venv of its own (``.localstack-venv``: its boto/moto pins
are not kipper's), starts its S3 on 127.0.0.1 and a free port with its files in a temporary
directory, runs the command with KIPPER_TEST_S3_ENDPOINT/_ACCESS_KEY/_SECRET_KEY pointing at it
(``support.s3`` honours them), stops LocalStack by pid and exits with the command's exit code.
.ci/run does this after the main test run.

LocalStack is normally started by its CLI inside its Docker image; here its runtime
(``localstack.runtime.main``) runs directly, with the settings ``LOCALSTACK_ENVIRONMENT`` gives.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.process import ChildProcess
from bench.tansu import free_port

from .s3 import S3Endpoint
from .wait import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPOSITORY / ".ci" / "localstack-requirements.txt"
DEFAULT_VENV = REPOSITORY / ".localstack-venv"
HOST = "127.0.0.1"
# LocalStack accepts any credentials; "test" is the pair its documentation uses.
CREDENTIALS = "test"

# What LocalStack's runtime needs to run S3 alone on a host that is not its Docker image.
LOCALSTACK_ENVIRONMENT = {
    "SERVICES": "s3",
    # This machine's cgroups make it think it runs in its own image, where it writes to
    # /var/lib/localstack; "0" keeps every file under FILESYSTEM_ROOT.
    "OVERRIDE_IN_DOCKER": "0",
    # Only the package registries are reachable: do not try to download its TLS certificate
    # (two 5 s timeouts at every start); it signs one itself.
    "SKIP_SSL_CERT_DOWNLOAD": "1",
    # Its DNS server wants port 53 and an upstream resolver; S3 over path-style URLs needs neither.
    "DNS_ADDRESS": "0",
    "DISABLE_EVENTS": "1",  # no analytics calls
}

# LocalStack's Twisted gateway listens on every interface whatever host GATEWAY_LISTEN names (it
# passes no interface to TCP4ServerEndpoint, an open item noted in localstack/runtime/server/twisted.py), so
# the runtime is started with Twisted's IPv4 endpoints bound to loopback.
_LAUNCHER = f"""
import functools
from twisted.internet import endpoints
endpoints.TCP4ServerEndpoint = functools.partial(endpoints.TCP4ServerEndpoint, interface={HOST!r})
from localstack.runtime.main import main
main()
"""


def install(venv: Path = DEFAULT_VENV) -> None:
    """Create ``venv`` if it is missing and install the pinned LocalStack into it (a no-op for
    pip when it is already there)."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "-r", str(REQUIREMENTS)], check=True)


@dataclass(kw_only=True)
class LocalStack(ChildProcess):
    """LocalStack's S3 as a child process: ``with LocalStack() as endpoint: ...``."""

    venv: Path = DEFAULT_VENV
    port: int = 0
    _files: tempfile.TemporaryDirectory | None = None

    @property
    def endpoint(self) -> S3Endpoint:
        return S3Endpoint(f"http://{HOST}:{self.port}", CREDENTIALS, CREDENTIALS)

    def start(self, timeout: float = 120.0) -> S3Endpoint:
        self._files = tempfile.TemporaryDirectory(prefix="kipper-localstack-")
        files = Path(self._files.name)
        self.port = self.port or free_port(HOST)
        self.log_path = files / "localstack.log"
        env = {**os.environ, **LOCALSTACK_ENVIRONMENT,
               "GATEWAY_LISTEN": f"{HOST}:{self.port}", "FILESYSTEM_ROOT": str(files / "root")}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([str(self.venv / "bin" / "python"), "-c", _LAUNCHER],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=files, env=env)
        try:
            wait_until(self._serves_s3, timeout, interval=0.2)
        except (TimeoutError, RuntimeError) as error:
            log_tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"LocalStack did not start ({error}); its log:\n{log_tail}") from error
        except BaseException:  # SIGTERM (main's sys.exit) or Ctrl-C while it starts
            self.stop()
            raise
        return self.endpoint

    def _serves_s3(self) -> bool:
        if not self.alive():
            raise RuntimeError(f"LocalStack exited with code {self.proc.returncode}")
        try:
            with urllib.request.urlopen(f"{self.endpoint.url}/_localstack/health", timeout=2) as answer:
                services = json.load(answer)["services"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return False
        if services.get("s3") not in ("available", "running"):
            return False
        # LocalStack loads S3 on its first S3 request, which takes seconds: make that one
        # here, not a test's (the object store bounds each request to a few seconds).
        import botocore.config
        import botocore.session
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=self.endpoint.url, region_name="us-east-1",
            aws_access_key_id=self.endpoint.access_key,
            aws_secret_access_key=self.endpoint.secret_key,
            config=botocore.config.Config(read_timeout=60, retries={"total_max_attempts": 1}))
        client.list_buckets()
        return True

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM by pid (SIGKILL after ``timeout``), then remove its files."""
        code = super().stop(timeout)
        if self._files is not None:
            self._files.cleanup()
            self._files = None
        return code

    def __enter__(self) -> S3Endpoint:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_bounded(command: list[str], env: dict[str, str], timeout: float) -> int:
    """Run ``command`` in a process group of its own; past ``timeout`` stop the whole group (the
    brokers a test run started too) by its id, and answer 124 as timeout(1) does."""
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"support.localstack: {command} ran past {timeout:.0f} s; stopping it", flush=True)
        return 124
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m support.localstack",
        description="Run a command against LocalStack's S3 (KIPPER_TEST_S3_* set), then stop it.")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help="LocalStack's own venv (default: .localstack-venv)")
    parser.add_argument("--install", action="store_true",
                        help="first install the pinned LocalStack into the venv")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds the command may run (default: 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    # timeout(1) or a CI runner stopping this script: stop LocalStack and the command on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.install:
        install(args.venv)
    started = time.monotonic()
    with LocalStack(venv=args.venv) as endpoint:
        print(f"support.localstack: LocalStack S3 on {endpoint.url} "
              f"(up in {time.monotonic() - started:.1f} s)", flush=True)
        return run_bounded(command, {**os.environ, **endpoint.environment()}, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
