"""Long loops on the event loop, cut into slices of time.

Work over thousands of partitions (a follower's first fetch of a new topic, ListOffsets of
every partition at start-up, the background opener) may open a log per partition on the way
(ReplicaManager.get): a millisecond each on a quiet machine, tens when the disk is busy. A
count of partitions between yields (64 was the rule) then holds the event loop for a tenth
of a second or more, and every heartbeat and request waits; a slice of time does not.
"""

from __future__ import annotations

import asyncio
import time


class LoopSlice:
    """``await slice.pause()`` between steps: yields to the event loop once ``seconds`` have
    passed since the last yield (or since the slice was made)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = time.perf_counter() + seconds

    def over(self) -> bool:
        return time.perf_counter() >= self._until

    async def pause(self) -> None:
        if self.over():
            await asyncio.sleep(0)
            self._until = time.perf_counter() + self.seconds
