"""The diskless read cache: batch byte ranges of WAL objects, least recently used first out.

Keyed by (object key, byte offset, size): WAL objects are immutable, so an entry never goes
stale; merging writes new objects under new keys."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

from storage.histogram import Histogram
from storage.objectstore import WAL_BUCKET, ObjectStore

Range = tuple[str, int, int]  # object key, byte offset, size


class ReadCache:
    def __init__(self, store: ObjectStore, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0
        # Time to GET what one read missed from one object (all its coalesced ranges).
        self.download_seconds = Histogram()
        self._entries: OrderedDict[Range, bytes] = OrderedDict()

    def put(self, key: str, offset: int, size: int, data: bytes) -> None:
        if size > self.max_bytes:
            return
        entry = (key, offset, size)
        if entry in self._entries:
            self._entries.move_to_end(entry)
            return
        self._entries[entry] = data
        self.size_bytes += size
        while self.size_bytes > self.max_bytes:
            (_, _, evicted_size), _ = self._entries.popitem(last=False)
            self.size_bytes -= evicted_size

    def holds(self, ranges: Sequence[Range]) -> bool:
        return all(entry in self._entries for entry in ranges)

    async def read(self, ranges: Sequence[Range]) -> list[bytes]:
        """The bytes of every range, in order; misses are read with one ranged GET per span
        of nearby ranges of one object (ObjectStore.get_ranges coalesces them)."""
        found: dict[Range, bytes] = {}
        missing: dict[str, list[tuple[int, int]]] = {}
        for entry in ranges:
            data = self._entries.get(entry)
            if data is not None:
                self._entries.move_to_end(entry)
                found[entry] = data
                self.hits += 1
            else:
                missing.setdefault(entry[0], []).append((entry[1], entry[2]))
                self.misses += 1
        for key, spans in missing.items():
            started = time.monotonic()
            downloaded = await self.store.get_ranges(WAL_BUCKET, key, spans)
            self.download_seconds.observe(time.monotonic() - started)
            for (offset, size), data in zip(spans, downloaded):
                found[(key, offset, size)] = data
                self.put(key, offset, size, data)
        return [found[entry] for entry in ranges]

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
