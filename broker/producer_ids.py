"""The producer ids this broker hands out in InitProducerId."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# How long an InitProducerId waits for a block before answering a retriable error.
BLOCK_WAIT_S = 5.0


class ProducerIdsUnavailable(Exception):
    """No producer id in hand and the controller has not answered yet: the client retries
    (Kafka answers COORDINATOR_LOAD_IN_PROGRESS then, as here)."""


class ProducerIdAllocator:
    """Producer ids that never repeat in the cluster, also when a broker comes back with an
    empty data directory (a wiped disk): the active controller hands out blocks of ids
    (AllocateProducerIds, KIP-730) and records each in the cluster metadata log before it
    answers. Nothing is kept on this broker's disk, so nothing can be lost with it; a restart
    skips the unused rest of its block.

    ``request_block`` asks the controller for the next block. It is asked for in the
    background once half of the current block is used, so an InitProducerId rarely waits.
    """

    def __init__(self, request_block: Callable[[], Awaitable[range]]) -> None:
        self._request_block = request_block
        self._block = range(0)
        self._position = 0
        self._next_block: range | None = None
        self._fetching: asyncio.Task | None = None

    def next_id(self) -> int:
        """The next id; raises ProducerIdsUnavailable if no block is in hand yet."""
        if self._position == len(self._block):
            if self._next_block is None:
                self.prefetch()
                raise ProducerIdsUnavailable("waiting for a block of producer ids from the "
                                             "controller")
            self._block, self._position, self._next_block = self._next_block, 0, None
        producer_id = self._block[self._position]
        self._position += 1
        if self._position * 2 >= len(self._block):
            self.prefetch()
        return producer_id

    async def ready(self, timeout_s: float = BLOCK_WAIT_S) -> None:
        """Wait up to ``timeout_s`` until ``next_id`` has an id to give (the transaction
        coordinator calls it without waiting)."""
        if self._position == len(self._block) and self._next_block is None:
            self.prefetch()
            await asyncio.wait([self._fetching], timeout=timeout_s)

    async def allocate(self, timeout_s: float = BLOCK_WAIT_S) -> int:
        """The next id, waiting up to ``timeout_s`` for a block from the controller."""
        await self.ready(timeout_s)
        return self.next_id()

    def prefetch(self) -> None:
        """Ask for the next block unless it is in hand or asked for already."""
        if self._next_block is None and (self._fetching is None or self._fetching.done()):
            self._fetching = asyncio.get_running_loop().create_task(self._fetch())

    async def _fetch(self) -> None:
        try:
            self._next_block = await self._request_block()
        except Exception as e:  # noqa: BLE001 - a background task: its caller asks again
            log.warning("no block of producer ids from the controller (asked again on the "
                        "next InitProducerId): %s", e)
