"""The embedded S3 server: in a thread for a store without an endpoint, and as a process."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import pytest

from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreConfig, ObjectStoreUnavailable
from broker.listening import s3_url


async def test_store_without_endpoint_runs_its_own_server() -> None:
    store = ObjectStore(ObjectStoreConfig(max_attempts=1))
    await store.start()
    try:
        assert store.endpoint_url.startswith("http://127.0.0.1:")
        await store.ensure_buckets(["az1"])
        await store.put(WAL_BUCKET, "k", b"embedded")
        assert await store.get(WAL_BUCKET, "k") == b"embedded"
    finally:
        await store.close()

    # The server went with the store.
    url = store.endpoint_url
    async with ObjectStore(ObjectStoreConfig(endpoint_url=url, access_key="a", secret_key="b",
                                             max_attempts=1, connect_timeout_s=1)) as probe:
        with pytest.raises(ObjectStoreUnavailable):
            await probe.get(WAL_BUCKET, "k")


def test_standalone_process_announces_itself_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "storage.objectstore.embedded", "--port", "0"],
        stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        url = s3_url(line)
        assert url and url.startswith("http://127.0.0.1:"), line
        with urllib.request.urlopen(url, timeout=5) as response:  # ListBuckets
            assert response.status == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
