"""What a connection that ended with responses unread costs: a collection soon after, which
reaches into the frozen heap (broker.heap: 0.8 s at 10,000 partitions) only once abandoned
connections left FULL_COLLECTION_BYTES unread, or more on a large frozen heap."""

from __future__ import annotations

import asyncio

import pytest

from broker import heap, response_memory
from broker.response_memory import (
    FULL_COLLECTION_BYTES,
    FULL_COLLECTION_BYTES_PER_FROZEN_OBJECT,
    ResponseMemory,
)


@pytest.fixture
def collections(monkeypatch) -> list[str]:
    done: list[str] = []
    monkeypatch.setattr(heap, "full_collection", lambda: done.append("full"))
    monkeypatch.setattr(heap, "collect_unfrozen", lambda: done.append("unfrozen"))
    monkeypatch.setattr(response_memory, "COLLECT_DELAY_S", 0.01)
    monkeypatch.setattr(response_memory, "COLLECT_INTERVAL_S", 0.01)
    # A small frozen heap, whatever this process froze before.
    monkeypatch.setattr(response_memory.gc, "get_freeze_count", lambda: 0)
    return done


async def abandon(memory: ResponseMemory, lost_bytes: int, freeze_meanwhile: bool) -> None:
    connection = memory.connection(1 << 20)
    if freeze_meanwhile:  # counted as heap._freeze() counts it, without freezing this process
        heap._freezes += 1
    await connection.close(lost_bytes)
    await asyncio.sleep(0.05)


async def test_few_bytes_left_unread_do_not_reach_into_the_frozen_heap(collections):
    memory = ResponseMemory(64 << 20)
    await abandon(memory, 100_000, freeze_meanwhile=True)
    assert collections == ["unfrozen"]
    # The frozen part is owed: once enough bytes were left, a full collection reaches it.
    await abandon(memory, FULL_COLLECTION_BYTES, freeze_meanwhile=False)
    assert collections == ["unfrozen", "full"]


async def test_a_large_frozen_heap_waits_for_bytes_in_proportion(collections, monkeypatch):
    frozen_objects = 1_000_000
    monkeypatch.setattr(response_memory.gc, "get_freeze_count", lambda: frozen_objects)
    memory = ResponseMemory(64 << 20)
    await abandon(memory, FULL_COLLECTION_BYTES, freeze_meanwhile=True)
    assert collections == ["unfrozen"]
    await abandon(memory, frozen_objects * FULL_COLLECTION_BYTES_PER_FROZEN_OBJECT,
                  freeze_meanwhile=False)
    assert collections == ["unfrozen", "full"]


async def test_without_a_freeze_the_unfrozen_heap_is_collected_at_once(collections):
    await abandon(ResponseMemory(64 << 20), 100, freeze_meanwhile=False)
    assert collections == ["unfrozen"]


async def test_a_connection_that_read_everything_costs_no_collection(collections):
    await abandon(ResponseMemory(64 << 20), 0, freeze_meanwhile=True)
    assert collections == []
