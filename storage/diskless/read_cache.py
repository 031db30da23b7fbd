"""The diskless read cache: batch byte ranges of WAL objects, least recently used first out.

Keyed by (object key, byte offset, size): WAL objects are immutable, so an entry never goes
stale; merging writes new objects under new keys."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence

from storage.histogram import Histogram
from storage.objectstore import WAL_BUCKET, ObjectStore

Range = tuple[str, int, int]  # object key, byte offset, size

log = logging.getLogger(__name__)


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
        # Ranges prefetched in this turn of the event loop, and the future of their read.
        self._batch: tuple[list[Range], asyncio.Future] | None = None
        self._filling: set[asyncio.Task] = set()

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

    def prefetch(self, ranges: Sequence[Range]) -> asyncio.Future:
        """Bring ``ranges`` in together with every range asked for in the same turn of the
        event loop: one ``read``, coalesced per object (the partitions a Fetch prefetches
        have their batches in the same few WAL objects). The future never fails: a failed
        range is missed again by the read that wants it, which reports it."""
        if self._batch is None:
            loop = asyncio.get_running_loop()
            self._batch = ([], loop.create_future())
            loop.call_soon(self._read_batch)
        self._batch[0].extend(ranges)
        return self._batch[1]

    def _read_batch(self) -> None:
        (ranges, done), self._batch = self._batch, None
        task = asyncio.ensure_future(self._fill(ranges, done))
        self._filling.add(task)
        task.add_done_callback(self._filling.discard)

    async def _fill(self, ranges: list[Range], done: asyncio.Future) -> None:
        try:
            await self.read(ranges)
        except Exception as error:  # the read that wants the range reports it
            log.debug("prefetch of %d ranges failed: %r", len(ranges), error)
        finally:
            if not done.done():
                done.set_result(None)

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
        downloads = await asyncio.gather(*(self._download(key, spans)
                                           for key, spans in missing.items()))
        for (key, spans), downloaded in zip(missing.items(), downloads):
            for (offset, size), data in zip(spans, downloaded):
                found[(key, offset, size)] = data
                self.put(key, offset, size, data)
        return [found[entry] for entry in ranges]

    async def _download(self, key: str, spans: list[tuple[int, int]]) -> list[bytes]:
        started = time.monotonic()
        downloaded = await self.store.get_ranges(WAL_BUCKET, key, spans)
        self.download_seconds.observe(time.monotonic() - started)
        return downloaded

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
