from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from storage.objectstore.testing import s3_endpoint  # noqa: F401  (session S3 server)
from support import BrokerProcess

JS_DIR = Path(__file__).resolve().parent / "js"
# What `npm ci` leaves in tests/js/node_modules (zstd-napi is compiled by node-gyp on install).
JS_INSTALLED = ["kafkajs/package.json", "kafkajs-snappy/package.json",
                "@2l/kafkajs-lz4/package.json", "@sensejs/kafkajs-zstd-support/package.json",
                "zstd-napi/build/Release/binding.node"]


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
    broker = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def topic_name(request) -> str:
    return f"t-{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name[:40])}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kafkajs(tmp_path_factory) -> Path:
    """tests/js with its node_modules (kafkajs and codecs); runs `npm ci` on a fresh clone."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    assert node and npm, "node and npm are needed for the kafkajs tests (apt-get install nodejs npm)"
    missing = [p for p in JS_INSTALLED if not (JS_DIR / "node_modules" / p).exists()]
    if missing:
        env = {**os.environ, "CI": "true"}
        if Path("/usr/include/node/node_version.h").exists():
            # node-gyp builds zstd-napi from source against the installed headers.
            env.setdefault("npm_config_nodedir", "/usr")
        log = tmp_path_factory.mktemp("npm") / "npm-ci.log"
        with open(log, "wb") as out:
            proc = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--prefix", str(JS_DIR)],
                                  stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=600, env=env)
        assert proc.returncode == 0, (
            f"npm ci --prefix {JS_DIR} failed (missing {missing}):\n"
            + log.read_text(errors="replace")[-4000:])
    return JS_DIR


@pytest.fixture(scope="session")
def js_client(kafkajs) -> Path:
    return kafkajs / "client.mjs"
