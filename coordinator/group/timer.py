"""The group coordinator's clock and timers (Kafka's CoordinatorTimer and MockCoordinatorTimer).

Every deadline of the coordinator (sessions, rebalance and sync timeouts, the initial
rebalance delay, member ids handed out but not used) and every timestamp it records go
through a ``Timer``. The broker runs on ``AsyncioTimer``; tests drive ``ManualTimer``, whose
time moves only when told to, so a session expiry takes no real time to test.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVarTuple, Unpack

Args = TypeVarTuple("Args")


class Scheduled(Protocol):
    """A callback waiting for its deadline (asyncio.TimerHandle is one)."""

    def cancel(self) -> None: ...


class Timer(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds, for the timestamps the coordinator records."""

    def schedule(self, delay_ms: int, callback: Callable[[Unpack[Args]], None],
                 *args: *Args) -> Scheduled:
        """Call ``callback(*args)`` on the event loop once ``delay_ms`` have passed."""


class AsyncioTimer:
    """Real time: the event loop's ``call_later``."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def schedule(self, delay_ms: int, callback: Callable[[Unpack[Args]], None],
                 *args: *Args) -> Scheduled:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback, *args)


@dataclass(order=True)
class _ManualEntry:
    deadline_ms: int
    sequence: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """Time that stands still until ``advance``: callbacks run in deadline order (ties in the
    order they were scheduled), each with the clock set to its own deadline."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._queue: list[_ManualEntry] = []
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self._now_ms

    def schedule(self, delay_ms: int, callback: Callable[[Unpack[Args]], None],
                 *args: *Args) -> Scheduled:
        entry = _ManualEntry(self._now_ms + max(delay_ms, 0), next(self._sequence),
                             lambda: callback(*args))
        heapq.heappush(self._queue, entry)
        return entry

    def next_deadline_ms(self) -> int | None:
        """When the earliest pending callback is due; None when nothing is scheduled."""
        while self._queue and self._queue[0].cancelled:
            heapq.heappop(self._queue)
        return self._queue[0].deadline_ms if self._queue else None

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` forward, running every callback that falls due (including
        ones those callbacks schedule within the window); how many ran."""
        target = self._now_ms + ms
        ran = 0
        while (deadline := self.next_deadline_ms()) is not None and deadline <= target:
            entry = heapq.heappop(self._queue)
            self._now_ms = deadline
            entry.callback()
            ran += 1
        self._now_ms = target
        return ran


async def sleep(timer: Timer, delay_ms: int) -> None:
    """``asyncio.sleep`` on ``timer``'s time."""
    wake = asyncio.get_running_loop().create_future()
    scheduled = timer.schedule(delay_ms, _wake, wake)
    try:
        await wake
    finally:
        scheduled.cancel()


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
