"""tests/js: the kafkajs client scripts and their npm packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parent.parent / "js"
# What `npm ci` leaves in tests/js/node_modules (zstd-napi is compiled by node-gyp on install).
JS_INSTALLED = ["kafkajs/package.json", "kafkajs-snappy/package.json",
                "@2l/kafkajs-lz4/package.json", "@sensejs/kafkajs-zstd-support/package.json",
                "zstd-napi/build/Release/binding.node"]


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
