"""Pytest fixtures giving tests an S3 server: the embedded one, or MinIO/LocalStack/AWS.

tests/conftest.py imports them, so every test can ask for ``s3_endpoint`` (one server for
the session), ``object_store`` and ``s3_prefix``.

With KIPPER_TEST_S3_ENDPOINT set (plus KIPPER_TEST_S3_ACCESS_KEY and
KIPPER_TEST_S3_SECRET_KEY) the same tests run against that server instead.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Iterator

import pytest
import pytest_asyncio

from storage.objectstore import embedded
from storage.objectstore.client import ObjectStore
from storage.objectstore.config import ObjectStoreConfig

TEST_AZS = ("az1", "az2", "az3")

# The environment that points the tests at another S3 server (support.localstack sets it).
ENDPOINT_VAR = "KIPPER_TEST_S3_ENDPOINT"
ACCESS_KEY_VAR = "KIPPER_TEST_S3_ACCESS_KEY"
SECRET_KEY_VAR = "KIPPER_TEST_S3_SECRET_KEY"


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    access_key: str
    secret_key: str

    def config(self, **overrides: Any) -> ObjectStoreConfig:
        """A store config for this server; `overrides` sets any other field."""
        return replace(
            ObjectStoreConfig(endpoint_url=self.url, access_key=self.access_key, secret_key=self.secret_key),
            **overrides,
        )

    def environment(self) -> dict[str, str]:
        """The variables that make a test run use this server (``s3_endpoint_from_env``)."""
        return {ENDPOINT_VAR: self.url, ACCESS_KEY_VAR: self.access_key,
                SECRET_KEY_VAR: self.secret_key}


def s3_endpoint_from_env() -> S3Endpoint | None:
    url = os.environ.get(ENDPOINT_VAR)
    if not url:
        return None
    return S3Endpoint(
        url,
        os.environ.get(ACCESS_KEY_VAR, "minioadmin"),
        os.environ.get(SECRET_KEY_VAR, "minioadmin"),
    )


async def _create_buckets(endpoint: S3Endpoint) -> None:
    async with ObjectStore(endpoint.config()) as store:
        await store.ensure_buckets(TEST_AZS)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An S3 server for the whole session, with kipper-wal and kipper-fast-az1..3 created;
    the embedded one keeps its objects on disk, as ``kipper cluster up``'s does."""
    endpoint = s3_endpoint_from_env()
    if endpoint is not None:
        asyncio.run(_create_buckets(endpoint))
        yield endpoint
        return
    # A process of its own, so the server's work does not slow the tests' event loop.
    with embedded.EmbeddedS3Process(data_dir=tmp_path_factory.mktemp("s3")) as server:
        endpoint = S3Endpoint(server.endpoint_url, embedded.ACCESS_KEY, embedded.SECRET_KEY)
        asyncio.run(_create_buckets(endpoint))
        yield endpoint


@pytest_asyncio.fixture
async def object_store(s3_endpoint: S3Endpoint) -> AsyncIterator[ObjectStore]:
    """A started store with fresh counters (the buckets already exist), seeded."""
    async with ObjectStore(s3_endpoint.config(seed=0)) as store:
        yield store


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix no other test uses: the shared server keeps every test's objects."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60]
    return f"test/{name}-{uuid.uuid4().hex[:8]}/"


class PausableS3(embedded.EmbeddedS3Process):
    """An embedded S3 server of a test's own that can hang: ``pause`` stops its process
    (SIGSTOP: the kernel still accepts connections, nothing answers), ``resume`` continues."""

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@pytest.fixture
def pausable_s3() -> Iterator[tuple[S3Endpoint, PausableS3]]:
    """A dedicated S3 server (the session's must not hang under other tests), with the
    buckets created; resumed and stopped at teardown."""
    if s3_endpoint_from_env() is not None:
        pytest.skip("hangs the embedded S3 server's process; KIPPER_TEST_S3_ENDPOINT is set")
    with PausableS3() as server:
        endpoint = S3Endpoint(server.endpoint_url, embedded.ACCESS_KEY, embedded.SECRET_KEY)
        asyncio.run(_create_buckets(endpoint))
        try:
            yield endpoint, server
        finally:
            server.resume()  # a stopped process ignores SIGTERM
