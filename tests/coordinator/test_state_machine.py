"""coordinator.state_machine: committed records are applied in order, once each."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.state_machine import Applier
from replication.cluster_metadata import MetadataImage


class Counter:
    def __init__(self) -> None:
        self.next_offset = 0
        self.total = 0

    def apply(self, offset: int, record: dict) -> int:
        self.total += record["add"]
        self.next_offset = offset + 1
        return self.total


async def test_records_apply_once_in_order_and_writers_get_their_results():
    applier = Applier(Counter())
    seen = []
    applier.listeners.append(lambda offset, record, result: seen.append((offset, result)))
    waiting = asyncio.ensure_future(applier.result_of(1, 1.0))
    await asyncio.sleep(0)
    assert applier.apply([(0, {"add": 1}), (1, {"add": 10})]) == 2
    # A re-read of what is applied already changes nothing.
    assert applier.apply([(0, {"add": 1}), (1, {"add": 10}), (2, {"add": 100})]) == 1
    assert await waiting == 11
    assert await applier.result_of(2, 1.0) == 111  # applied before the writer asked
    assert seen == [(0, 1), (1, 11), (2, 111)]
    assert applier.next_offset == 3


async def test_waiting_until_applied():
    applier = Applier(Counter())
    waiting = asyncio.ensure_future(applier.wait_until_applied(2, 1.0))
    applier.apply([(0, {"add": 1})])
    await asyncio.sleep(0)
    assert not waiting.done()
    applier.apply([(1, {"add": 1})])
    await waiting
    with pytest.raises(TimeoutError):
        await applier.wait_until_applied(5, 0.05)


def test_the_metadata_image_is_a_state_machine():
    image = MetadataImage()
    Applier(image).apply([(0, {"type": "broker", "node_id": 1, "host": "127.0.0.1",
                               "port": 9092, "rack": "az1", "epoch": 0}),
                          (1, {"type": "fence_broker", "node_id": 1})])
    assert image.next_offset == 2
    assert image.brokers[1].fenced
