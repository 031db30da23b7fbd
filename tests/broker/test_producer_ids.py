"""The broker's producer ids: blocks the controller hands out (AllocateProducerIds), asked for
ahead of need, nothing kept on the broker's disk (tests/system/test_wiped_broker.py wipes it)."""

from __future__ import annotations

import asyncio

import pytest

from broker.producer_ids import ProducerIdAllocator, ProducerIdsUnavailable

BLOCK = 10


class FakeController:
    """Consecutive blocks of BLOCK ids; ``refuse`` makes the next request fail."""

    def __init__(self) -> None:
        self.next = 0
        self.requests = 0
        self.refuse = False

    async def block(self) -> range:
        self.requests += 1
        await asyncio.sleep(0)
        if self.refuse:
            self.refuse = False
            raise ProducerIdsUnavailable("not registered yet")
        self.next += BLOCK
        return range(self.next - BLOCK, self.next)


async def test_ids_come_in_order_from_blocks_asked_for_ahead_of_need():
    controller = FakeController()
    allocator = ProducerIdAllocator(controller.block)
    with pytest.raises(ProducerIdsUnavailable):
        allocator.next_id()  # nothing in hand yet: the first block is asked for
    issued = [await allocator.allocate()]
    for _ in range(3 * BLOCK - 1):
        issued.append(allocator.next_id())
        await asyncio.sleep(0)  # the background request runs
    assert issued == list(range(3 * BLOCK))
    # One request per block, each made while half of the previous one was still unused.
    assert controller.requests == 4


async def test_a_refused_request_is_made_again_by_the_next_caller():
    controller = FakeController()
    controller.refuse = True
    allocator = ProducerIdAllocator(controller.block)
    with pytest.raises(ProducerIdsUnavailable):
        await allocator.allocate()
    assert await allocator.allocate() == 0
    assert controller.requests == 2


async def test_a_new_allocator_never_repeats_an_id_of_the_one_before():
    """A broker restarted (its disk wiped or not) gets a fresh block: the unused rest of its
    last one is skipped, never handed out again."""
    controller = FakeController()
    before = ProducerIdAllocator(controller.block)
    issued = {await before.allocate() for _ in range(3)}
    after = ProducerIdAllocator(controller.block)
    assert await after.allocate() > max(issued)
