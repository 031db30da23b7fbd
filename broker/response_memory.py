"""How many response bytes the broker holds for its clients, and the wait that bounds it.

A response is held from the moment its request is read (counted at the size it may reach,
plus the request's own bytes, held until the response is built) until it is handed to the
socket (counted at its real size once built). A client that pipelines requests and never
reads the responses would otherwise make the broker build and keep them all, and one that
pipelines large requests would make it keep those. Like Kafka's muting of a channel, the
reader of a connection stops taking requests while the connection holds more than its limit,
or all connections together hold more than the broker's; a connection that holds nothing
always gets one request through, so no client waits on others.
"""

from __future__ import annotations

import asyncio
import ctypes
import time

from . import heap

COLLECT_DELAY_S = 1.0
COLLECT_INTERVAL_S = 10.0


class ResponseMemory:
    """The broker's total, shared by its connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._changed = asyncio.Condition()
        self._collected_at = -COLLECT_INTERVAL_S
        self._collection: asyncio.TimerHandle | None = None

    def connection(self, limit: int) -> "ConnectionResponses":
        return ConnectionResponses(self, limit)

    def collect_abandoned(self) -> None:
        """A connection ended with responses its client never read. The connection freed
        them as it ended (Connection._forget_how_it_ended); its streams and transport, and a
        request it left half read, form cycles that Python may not collect for a long while:
        collect them soon (connections that go together share it), at most every
        COLLECT_INTERVAL_S. Only objects that are not frozen (broker.heap): a collection that
        reached the frozen heap held a broker of 10,000 partitions 0.3-0.8 s. The cycles of
        a connection that was open when the heap was frozen (a few KiB, and any half-read
        request) wait for the next full collection (heap.Heap.dropped)."""
        if self._collection is None:
            delay = max(COLLECT_DELAY_S,
                        self._collected_at + COLLECT_INTERVAL_S - time.monotonic())
            self._collection = asyncio.get_running_loop().call_later(delay, self._collect)

    def _collect(self) -> None:
        self._collection = None
        self._collected_at = time.monotonic()
        heap.collect_unfrozen()


class ConnectionResponses:
    """One connection's share: reserve before reading a request, release once sent."""

    def __init__(self, memory: ResponseMemory, limit: int) -> None:
        self._memory = memory
        self.limit = limit
        self.used = 0

    def _has_room(self, nbytes: int) -> bool:
        return self.used == 0 or (self.used + nbytes <= self.limit
                                  and self._memory.used + nbytes <= self._memory.limit)

    async def reserve(self, nbytes: int) -> None:
        """Wait until this connection and the broker can hold `nbytes` more, then hold them."""
        if not self._has_room(nbytes):
            async with self._memory._changed:
                await self._memory._changed.wait_for(lambda: self._has_room(nbytes))
        self._add(nbytes)

    async def resize(self, reserved: int, actual: int) -> None:
        """A response was built: it holds `actual` bytes where `reserved` were expected."""
        if actual < reserved:
            await self.release(reserved - actual)
        else:
            self._add(actual - reserved)

    async def release(self, nbytes: int) -> None:
        self._add(-nbytes)
        async with self._memory._changed:
            self._memory._changed.notify_all()

    async def close(self, lost_bytes: int) -> None:
        """The connection ended: whatever it still holds is freed; `lost_bytes`: responses
        its client left unread."""
        lost_bytes += self.used
        await self.release(self.used)
        if lost_bytes:
            self._memory.collect_abandoned()

    def _add(self, nbytes: int) -> None:
        self.used += nbytes
        self._memory.used += nbytes


M_MMAP_THRESHOLD = -3  # glibc mallopt(3)


def return_large_buffers_to_the_os(threshold: int = 1 << 20) -> None:
    """Have glibc allocate buffers of `threshold` bytes or more with mmap, always.

    By default glibc raises its mmap threshold after a large buffer is freed (up to 32 MiB),
    so the next responses of a few MiB come from the heap, which it keeps: a burst of large
    responses would leave the broker's RSS high for good. A fixed threshold gives every large
    response back to the OS when it is freed. No-op where glibc is not the C library."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_MMAP_THRESHOLD, threshold)
    except (OSError, AttributeError):
        pass
