"""Data objects (KIP-1183's stream objects): a leader periodically copies each partition's
committed WAL ranges into one object of that partition alone and commits it in their place
(a compaction, storage.shared.stream). Once no stream refers to a WAL object any more, the
controller says so in its answer and the committer deletes it: WAL objects then live about
``shared_data_object_interval_ms``, and a partition's stream stays one range per data
object, however many WAL objects its records went through.

The bytes come from the leader's local log (its cache): what local retention already
removed stays in its WAL objects.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from storage.active_tiered.uploader import WalUploader
from storage.objectstore import ObjectStore, ObjectStoreError

from ..log import StorageError
from .log import SharedLog
from .stream import DATA, WAL, StreamCommit, StreamMetadata, StreamRange

log = logging.getLogger(__name__)


class Compactor:
    def __init__(self, store: ObjectStore, bucket: str, key_prefix: str,
                 interval_ms: int) -> None:
        self.store = store
        self.bucket = bucket
        self.key_prefix = key_prefix
        self.interval_s = interval_ms / 1000

    async def run(self, leading: dict[tuple[str, int], SharedLog],
                  streams: StreamMetadata) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            for log_ in list(leading.values()):
                try:
                    await self.compact(log_, streams)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("compacting %r failed", log_)

    async def compact(self, log_: SharedLog, streams: StreamMetadata) -> None:
        """Replace the partition's first run of WAL ranges by one data object."""
        run = _first_wal_run(streams.stream(log_.topic, log_.partition))
        if not run or not log_.serving or run[0].base_offset < log_.log_start_offset:
            return
        end = run[-1].last_offset + 1
        try:
            data, next_offset = await WalUploader._read(log_, run[0].base_offset, end, 1 << 62)
        except StorageError as e:
            log.warning("%r: cannot read [%d, %d) for a data object: %s", log_,
                        run[0].base_offset, end, e)
            return
        if next_offset != end:
            return  # truncated meanwhile
        key = (f"{self.key_prefix}{log_.topic}-{log_.partition}/"
               f"{run[0].base_offset:020d}-{uuid.uuid4().hex[:12]}")
        await self.store.put(self.bucket, key, data)
        data_range = StreamRange(self.bucket, key, run[0].base_offset, run[-1].last_offset, 0,
                                 len(data), log_.state.leader_epoch, DATA)
        (outcome,) = await streams.commit([StreamCommit(
            log_.topic, log_.partition, log_.state.leader_epoch, (data_range,), compaction=True)])
        if outcome.error_code != 0:
            # freed names the data object unless an earlier attempt of this commit landed.
            log.info("%r: data object refused (%s)%s", log_, outcome.message,
                     ", deleting it" if (self.bucket, key) in outcome.freed else "")
        await self._delete(outcome.freed)

    async def _delete(self, objects: tuple[tuple[str, str], ...]) -> None:
        by_bucket: dict[str, list[str]] = {}
        for bucket, key in objects:
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            try:
                await self.store.delete(bucket, keys)
            except ObjectStoreError as e:
                log.warning("deleting %d unreferenced WAL objects failed: %s", len(keys), e)


def _first_wal_run(stream: list[StreamRange]) -> list[StreamRange]:
    run: list[StreamRange] = []
    for r in stream:
        if r.kind == WAL:
            run.append(r)
        elif run:
            break
    return run
