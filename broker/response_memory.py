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
import gc
import time

from . import heap

COLLECT_DELAY_S = 1.0
COLLECT_INTERVAL_S = 10.0
# Bytes abandoned connections must have left unread before a collection may reach into the
# frozen heap (broker.heap): at 10,000 partitions that full collection held the event loop
# 0.8 s, and the controller quorum, missing the fetches of a leader held that long, elected
# another. Fewer bytes wait for a later collection: the memory they hold is bounded by this,
# or, on a larger heap, by FULL_COLLECTION_BYTES_PER_FROZEN_OBJECT times its frozen objects.
FULL_COLLECTION_BYTES = 8 << 20
# A full collection's pause grows with the frozen heap it scans (0.35-0.44 s for 700,000
# objects at 20,000 partitions), so it waits for garbage in proportion, as Python's own rule
# for its oldest generation does (a quarter of the long-lived objects new): one pause per
# about as many bytes left unread as the frozen objects take (64 bytes each, 45 MiB at
# 700,000). Every one a bench's clients set off at that size found under 60 objects to free.
FULL_COLLECTION_BYTES_PER_FROZEN_OBJECT = 64


class ResponseMemory:
    """The broker's total, shared by its connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._changed = asyncio.Condition()
        self._collected_at = -COLLECT_INTERVAL_S
        self._collection: asyncio.TimerHandle | None = None
        # heap.freezes() when the oldest connection abandoned since the last collection began,
        # and the bytes the abandoned connections left unread.
        self._abandoned_since: int | None = None
        self._abandoned_bytes = 0

    def connection(self, limit: int) -> "ConnectionResponses":
        return ConnectionResponses(self, limit)

    def collect_abandoned(self, freezes_then: int, lost_bytes: int) -> None:
        """A connection ended with responses its client never read. Its streams, transport
        and the exception that ended them form reference cycles that keep those buffers
        until a full garbage collection, which Python may not run for a long while: run one
        soon (connections that go together share it), at most every COLLECT_INTERVAL_S, as
        it pauses the event loop briefly. ``freezes_then``: heap.freezes() when the connection
        began (its cycles are frozen only if the heap was frozen since); ``lost_bytes``: what
        its client left unread."""
        self._abandoned_bytes += lost_bytes
        self._abandoned_since = min(freezes_then, self._abandoned_since
                                    if self._abandoned_since is not None else freezes_then)
        if self._collection is None:
            delay = max(COLLECT_DELAY_S,
                        self._collected_at + COLLECT_INTERVAL_S - time.monotonic())
            self._collection = asyncio.get_running_loop().call_later(delay, self._collect)

    def _collect(self) -> None:
        self._collection = None
        self._collected_at = time.monotonic()
        since = self._abandoned_since
        worth_it = max(FULL_COLLECTION_BYTES,
                       FULL_COLLECTION_BYTES_PER_FROZEN_OBJECT * gc.get_freeze_count())
        if since < heap.freezes() and self._abandoned_bytes < worth_it:
            heap.collect_unfrozen()  # the frozen part waits for more bytes to be worth it
            return
        self._abandoned_since, self._abandoned_bytes = None, 0
        heap.collect_since(since)


class ConnectionResponses:
    """One connection's share: reserve before reading a request, release once sent."""

    def __init__(self, memory: ResponseMemory, limit: int) -> None:
        self._memory = memory
        self.limit = limit
        self.used = 0
        self._freezes_at_start = heap.freezes()

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
            self._memory.collect_abandoned(self._freezes_at_start, lost_bytes)

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
