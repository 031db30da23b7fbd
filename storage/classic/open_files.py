"""The segment files a process keeps open, at most ``capacity`` of them.

Kafka keeps every segment's file open and asks for a high open-file limit. A broker past
that limit fails every ``open`` and ``accept`` alike: its followers' fetches, its clients'
connections and its object-store requests stop with its partitions (20,000 segments on a
machine whose hard limit is 20,000 left a 3-broker cluster unable to take a produce). So
kipper closes the least recently used segment files past a budget and reopens one when it
is next read or written; the budget leaves a quarter of the limit (1,024 at least) to
sockets and the other files a broker opens for a moment.

One process-wide budget, because the limit is the process's. Only the event loop's thread
uses it: a file closed here must not be in use elsewhere (the cleaner's thread writes
segments that are not in the budget until they are swapped in).
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Protocol

# Sockets and short-lived files (index files, checkpoints, snapshots, SQLite, the S3
# server's) need the rest of the limit.
RESERVED_FRACTION = 4
RESERVED_MIN = 1024
CAPACITY_MIN = 64


class FileHolder(Protocol):
    def close_idle_file(self) -> None:
        """Close the file; the holder reopens it on next use."""


def capacity_for_limit(limit: int) -> int:
    return max(CAPACITY_MIN, limit - max(RESERVED_MIN, limit // RESERVED_FRACTION))


class OpenFiles:
    def __init__(self, capacity: int | None = None) -> None:
        # None: worked out from the soft limit at first use, which the node raises at start.
        self._capacity = capacity
        self._open: OrderedDict[FileHolder, None] = OrderedDict()
        # Files closed for the budget, for the metric and the tests.
        self.closed_idle = 0

    @property
    def capacity(self) -> int:
        if self._capacity is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            self._capacity = capacity_for_limit(
                soft if soft != resource.RLIM_INFINITY else 1 << 20)
        return self._capacity

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, holder: FileHolder) -> None:
        """``holder`` has just opened its file: close the least recently used past capacity."""
        self._open[holder] = None
        capacity = self.capacity
        while len(self._open) > capacity:
            idle, _ = self._open.popitem(last=False)
            idle.close_idle_file()
            self.closed_idle += 1

    def used(self, holder: FileHolder) -> None:
        self._open.move_to_end(holder)

    def closed(self, holder: FileHolder) -> None:
        self._open.pop(holder, None)


SEGMENT_FILES = OpenFiles()
