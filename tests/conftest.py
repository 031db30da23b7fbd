"""Fixtures every test directory may use; they are defined in tests/support."""

import compileall
import re
from pathlib import Path

from support.diskless import diskless_cluster  # noqa: F401
from support.js import js_client, kafkajs  # noqa: F401
from support.processes import broker_factory, shared_broker  # noqa: F401
from support.s3 import object_store, pausable_s3, s3_endpoint, s3_prefix  # noqa: F401
from support.shared_storage import shared_cluster  # noqa: F401
from support.tiered import tiered_cluster  # noqa: F401
from support.topics import topic_name  # noqa: F401

REPOSITORY = Path(__file__).resolve().parent.parent
SOURCES = ["protocol", "storage", "replication", "coordinator", "broker", "bench", "tests"]


def pytest_configure(config) -> None:
    """Compile kipper's modules to bytecode once, before any test starts a process. Where
    PYTHONDONTWRITEBYTECODE is set (CI machines here have it), every broker, launcher and
    client process the tests start would compile them again: 0.6 s of CPU each, hundreds of
    times a run. (pytest-xdist's workers leave it to the controller.)"""
    if hasattr(config, "workerinput"):
        return
    for source in SOURCES:
        compileall.compile_dir(REPOSITORY / source, quiet=1, rx=re.compile(r"node_modules"))
