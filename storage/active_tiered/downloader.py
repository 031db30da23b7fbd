"""The follower side of KIP-1176's data path: read the byte ranges WAL refs name, from
whichever AZ's fast bucket the leader uploaded them to."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from ..objectstore import ObjectStore
from .metadata import WalRef
from .metrics import ActiveTieredMetrics


class WalDownloader:
    def __init__(self, store: ObjectStore, metrics: ActiveTieredMetrics,
                 timeout_ms: int) -> None:
        self.store = store
        self.metrics = metrics
        # A follower that cannot download in this time asks the leader again, and gets
        # records (the fallback).
        self.timeout_s = timeout_ms / 1000

    async def download(self, refs: list[WalRef]) -> list[bytes]:
        """The bytes of each ref, in order: one ranged GET per object (ranges of the same
        object are coalesced), objects read concurrently."""
        by_object: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, ref in enumerate(refs):
            by_object[ref.bucket, ref.key].append(i)

        async def read(bucket: str, key: str, members: list[int]) -> None:
            ranges = [(refs[i].position, refs[i].length) for i in members]
            for i, data in zip(members, await self.store.get_ranges(bucket, key, ranges)):
                result[i] = data
            self.metrics.downloaded(bucket, sum(length for _, length in ranges))

        result: list[bytes] = [b""] * len(refs)
        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(
            read(bucket, key, members) for (bucket, key), members in by_object.items())),
            self.timeout_s)
        self.metrics.timed("download", time.monotonic() - started)
        return result
