"""Fixtures for the diskless engine's unit tests: the in-memory control plane, keeping the
requests it was sent, and the session S3 server, seen through a store that records (and
can hold or fail) its calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest

from coordinator.diskless.housekeeping import Housekeeping, HousekeepingSettings
from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs
from storage.diskless.control_plane import Request
from storage.diskless.memory_control_plane import InMemoryControlPlane
from storage.objectstore import ObjectStore, ObjectStoreError


class ObservedStore:
    """The real store, with a log of PUT keys and ranged reads; ``hold_puts`` makes the
    next PUTs wait for their event, ``fail_puts`` makes them fail. Its other calls go to
    the real store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.puts: list[str] = []
        self.range_reads: list[tuple[str, list[tuple[int, int]]]] = []
        self.held: list[asyncio.Event] = []
        self.failing = 0

    def hold_puts(self, count: int) -> list[asyncio.Event]:
        events = [asyncio.Event() for _ in range(count)]
        self.held += events
        return events

    def fail_puts(self, count: int) -> None:
        self.failing += count

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        gate = self.held.pop(0) if self.held else None
        if self.failing:
            self.failing -= 1
            raise ObjectStoreError("injected PUT failure")
        if gate is not None:
            await gate.wait()
        await self.store.put(bucket, key, data)
        self.puts.append(key)

    async def get_ranges(self, bucket: str, key: str,
                         ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        self.range_reads.append((key, list(ranges)))
        return await self.store.get_ranges(bucket, key, ranges)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


AnyRequest = TypeVar("AnyRequest", bound=Request)


class RecordingControlPlane(InMemoryControlPlane):
    """The in-memory control plane, keeping every request submitted to it (refused too)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Request] = []

    async def submit(self, request: Request) -> Any:
        self.requests.append(request)
        return await super().submit(request)

    def submitted(self, request_type: type[AnyRequest]) -> list[AnyRequest]:
        return [r for r in self.requests if isinstance(r, request_type)]


@pytest.fixture
def control_plane() -> RecordingControlPlane:
    return RecordingControlPlane()


@pytest.fixture
def store(object_store) -> ObservedStore:  # noqa: F811
    return ObservedStore(object_store)


@pytest.fixture
def make_housekeeping(control_plane, store, s3_prefix) -> Callable[..., Housekeeping]:
    """make_housekeeping(image=None, **HousekeepingSettings fields): the housekeeping of
    the writable coordinator over the in-memory control plane, with the topics of
    ``image`` (none by default); objects are merged at any age unless told otherwise."""
    def make(image: MetadataImage | None = None, **settings) -> Housekeeping:
        image = image or MetadataImage()
        return Housekeeping(control_plane, lambda: True, image, store, s3_prefix,
                            DynamicConfigs(0, image, {}, {}),
                            HousekeepingSettings(**{"merge_min_age_ms": 0, **settings}))
    return make
