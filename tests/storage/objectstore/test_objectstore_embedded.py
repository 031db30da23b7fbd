"""The embedded S3 server: in a thread for a store without an endpoint, and as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from storage.objectstore import (
    WAL_BUCKET, ObjectStore, ObjectStoreConfig, ObjectStoreUnavailable, fast_bucket,
)
from storage.objectstore.embedded import ACCESS_KEY, SECRET_KEY, EmbeddedS3Process
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


def test_strict_http_parsers_accept_its_responses() -> None:
    """Python's dev mode makes aiohttp parse strictly: a response naming two servers (werkzeug's
    and moto's) was refused, so no bucket could be made."""
    script = ("import asyncio\n"
              "from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreConfig\n"
              "async def main():\n"
              "    async with ObjectStore(ObjectStoreConfig(max_attempts=1)) as store:\n"
              "        await store.ensure_buckets(['az1'])\n"
              "        await store.put(WAL_BUCKET, 'k', b'strict')\n"
              "        assert await store.get(WAL_BUCKET, 'k') == b'strict'\n"
              "asyncio.run(main())\n")
    done = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


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


async def test_objects_survive_kill_9_of_a_server_with_a_data_dir(tmp_path: Path) -> None:
    """Every acknowledged write (put, overwrite, delete, multipart, bucket) is there again
    after the server is killed and restarted on the same directory."""
    MiB = 1 << 20
    long_key = "wal/" + "é" * 150  # too long for a file name once percent-encoded
    big = bytes(range(256)) * (11 * MiB // 256)
    expected = {"wal/0001": b"first object", "wal/0002": b"second, overwritten", long_key: b"long",
                "wal/big": big}
    config = dict(access_key=ACCESS_KEY, secret_key=SECRET_KEY, max_attempts=1,
                  multipart_threshold=5 * MiB, multipart_part_size=5 * MiB)

    first = EmbeddedS3Process(data_dir=tmp_path / "s3")
    first.start()
    try:
        async with ObjectStore(ObjectStoreConfig(endpoint_url=first.endpoint_url, **config)) as store:
            await store.ensure_buckets(["az1", "az2"])
            await store.put(WAL_BUCKET, "wal/0001", expected["wal/0001"])
            await store.put(WAL_BUCKET, "wal/0002", b"second")
            await store.put(WAL_BUCKET, "wal/0002", expected["wal/0002"])
            await store.put(WAL_BUCKET, "wal/deleted", b"gone")
            await store.delete(WAL_BUCKET, ["wal/deleted"])
            await store.put(WAL_BUCKET, long_key, expected[long_key])
            await store.put(WAL_BUCKET, "wal/big", big)
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.stop()

    with EmbeddedS3Process(data_dir=tmp_path / "s3") as second:
        async with ObjectStore(ObjectStoreConfig(endpoint_url=second.endpoint_url, **config)) as store:
            listed = {o.key: o.size async for o in store.list_objects(WAL_BUCKET, "wal/")}
            assert listed == {key: len(body) for key, body in expected.items()}
            for key, body in expected.items():
                assert await store.get(WAL_BUCKET, key) == body
            assert await store.get_range(WAL_BUCKET, "wal/big", 5 * MiB + 3, 4) == big[5 * MiB + 3:5 * MiB + 7]
            await store.put(fast_bucket("az2"), "after-restart", b"writable")
            assert await store.get(fast_bucket("az2"), "after-restart") == b"writable"
