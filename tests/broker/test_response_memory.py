"""What a connection that ended with responses unread costs: a collection of the objects
that are not frozen, soon after, shared by the connections that end together; never one that
reaches into the frozen heap (broker.heap: 0.3-0.8 s at 10,000 partitions)."""

from __future__ import annotations

import asyncio

import pytest

from broker import heap, response_memory
from broker.response_memory import ResponseMemory


@pytest.fixture
def collections(monkeypatch) -> list[str]:
    done: list[str] = []
    monkeypatch.setattr(heap, "full_collection", lambda: done.append("full"))
    monkeypatch.setattr(heap, "collect_unfrozen", lambda: done.append("unfrozen"))
    monkeypatch.setattr(response_memory, "COLLECT_DELAY_S", 0.01)
    return done


async def end(memory: ResponseMemory, lost_bytes: int) -> None:
    await memory.connection(1 << 20).close(lost_bytes)


async def test_connections_that_end_together_share_one_collection_of_the_unfrozen_heap(
        collections):
    memory = ResponseMemory(64 << 20)
    for _ in range(3):
        await end(memory, 1 << 30)
    await asyncio.sleep(0.05)
    assert collections == ["unfrozen"]


async def test_a_connection_that_read_everything_costs_no_collection(collections):
    await end(ResponseMemory(64 << 20), 0)
    await asyncio.sleep(0.05)
    assert collections == []
