"""Fixtures for the diskless engine's unit tests: the in-memory control plane and the
session S3 server, seen through a store that records (and can hold or fail) its calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from storage.diskless.memory_control_plane import InMemoryControlPlane
from storage.objectstore import ObjectStore, ObjectStoreError


class ObservedStore:
    """The real store, with a log of PUT keys and ranged reads; ``hold_puts`` makes the
    next PUTs wait for their event, ``fail_puts`` makes them fail."""

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


@pytest.fixture
def control_plane() -> InMemoryControlPlane:
    return InMemoryControlPlane()


@pytest.fixture
def store(object_store) -> ObservedStore:  # noqa: F811
    return ObservedStore(object_store)
