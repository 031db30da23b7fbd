"""The active-tiered engine (KIP-1176): a classic log whose replication goes through object
storage.

Everything local (segments, indexes, epochs, producer state, retention) is ClassicLog's;
what the engine knows beyond it is in the partition's TieredPartitionState (``state``). The
replica layer tells the log when this broker leads, follows or stops hosting the partition
(``on_leadership_change``); the engine starts and stops uploading on that alone. This class
adds the two places where KIP-1176 differs:

- as leader, an append also tells the broker's WalUploader of the new bytes, and
  ``read_for_replica`` answers a follower with pointers to uploaded objects instead of the
  records (raw records only for offsets no object covers: the fallback);
- as follower, ``append_as_follower`` recognises a pointer batch, downloads the ranges it
  names and appends those batches (indexes are rebuilt by the append, as in the KIP). The
  follower's next fetch reports its new log end offset, which is what lets the leader's
  high watermark, and so acks=all, pass the data.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.records import BatchHeader, iter_batches

from ..append_rules import AppendDecision
from ..classic import ClassicLog
from ..classic.log import UnexpectedAppendOffset
from ..config import LogConfig
from ..log import AppendResult, Leadership, ReadResult
from ..objectstore import ObjectNotFound, ObjectStoreError
from .metadata import MetadataScheme, decode_pointers, encode_pointers
from .state import TieredPartitionState

if TYPE_CHECKING:
    from . import ActiveTiered

log = logging.getLogger(__name__)


class ActiveTieredLog(ClassicLog):
    def __init__(self, topic: str, partition: int, config: LogConfig, directory: Path | str,
                 shared: "ActiveTiered", *, clean_recovery_point: int | None = None) -> None:
        super().__init__(topic, partition, config, directory,
                         clean_recovery_point=clean_recovery_point)
        self._shared = shared
        self.state = TieredPartitionState(self)
        self.scheme.opened(self.state)

    def __repr__(self) -> str:
        return (f"ActiveTieredLog({self.topic}-{self.partition}, "
                f"[{self.log_start_offset}, {self.log_end_offset}))")

    @property
    def scheme(self) -> MetadataScheme:
        return self._shared.schemes[self.config.wal_metadata_scheme]

    def on_leadership_change(self, role: Leadership, leader_epoch: int) -> None:
        self._shared.leadership_changed(self.state, role, leader_epoch)

    # -- leader --------------------------------------------------------------------------

    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        result = await super()._append(records, batches, leader_epoch, decision)
        self._shared.uploader.appended(self.state, len(records))
        return result

    async def read_for_replica(self, replica_id: int, offset: int, max_bytes: int, *,
                               max_offset: int | None = None,
                               min_one_batch: bool = True) -> ReadResult:
        in_sync = self._shared.in_sync_followers(self.topic, self.partition)
        for seconds in self.state.followers.fetched(replica_id, offset, in_sync):
            self._shared.metrics.timed("replicated", seconds)
        refs = self.state.refs.covering(offset, max_bytes)
        if refs and self.state.followers.point(replica_id, offset):
            pointers = self.scheme.pointers(refs)
            encoded = encode_pointers(pointers)
            self._shared.metrics.metadata(self.scheme.name, len(pointers.refs or ()),
                                          len(encoded))
            return ReadResult(encoded, self.log_start_offset, self.log_end_offset)
        if not refs and self._shared.uploader.will_upload(self.state, offset):
            # The next upload covers it: the fetch long-polls until then.
            return ReadResult(b"", self.log_start_offset, self.log_end_offset)
        result = await self.read(offset, max_bytes, max_offset=max_offset,
                                 min_one_batch=min_one_batch)
        if result.records:
            self._shared.metrics.fallback(len(result.records))
        return result

    def durable_end_offset(self) -> int:
        """With ``active.tiered.ack.on.upload``, what is uploaded counts as committed,
        before any follower has it: one AZ's bucket then holds the only other copy."""
        upload = self.state.upload
        if not self.config.ack_on_upload or upload is None:
            return -1
        return upload.cursor

    # -- follower ------------------------------------------------------------------------

    @property
    def follower_append_waits(self) -> bool:
        return True  # pointers are resolved and downloaded from object storage

    async def append_as_follower(self, records: bytes) -> None:
        pointers = decode_pointers(records)
        if pointers is None:
            await super().append_as_follower(records)
            return
        refs = await self.scheme.resolve(self.state, pointers)
        if not refs:
            return
        start = self.log_end_offset
        try:
            chunks = await self._shared.downloader.download(refs)
        except (ObjectStoreError, asyncio.TimeoutError) as e:
            # Not appended: the next fetch asks for the same offset, and gets records.
            if isinstance(e, ObjectNotFound):
                self._shared.downloader.store.missing.found(
                    e.bucket, e.key, f"{self.topic}-{self.partition}")
            self._shared.metrics.download_failed()
            log.warning("%r: download of %d WAL range(s) failed, falling back to the leader: %s",
                        self, len(refs), e or type(e).__name__)
            return
        if self.log_end_offset != start:
            return  # truncated or appended to while downloading: fetch again
        try:
            for chunk in chunks:
                await super().append_as_follower(self._from_log_end(chunk))
        except UnexpectedAppendOffset as e:
            log.warning("%r: downloaded range does not continue the log: %s", self, e)
            return
        self.scheme.appended(self.state, refs)

    def _from_log_end(self, chunk: bytes) -> bytes:
        """The batches of ``chunk`` at or above the log end offset (a ref may start below
        it after a truncation)."""
        for batch in iter_batches(chunk):
            if batch.next_offset > self.log_end_offset:
                return chunk[batch.position:]
        return b""

    async def truncate_to(self, offset: int) -> None:
        self.state.truncated(offset)
        await super().truncate_to(offset)

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self, *, sync: bool = True) -> None:
        self._shared.leadership_changed(self.state, Leadership.STOPPED, -1)
        await super().close(sync=sync)

    async def delete(self) -> None:
        self._shared.leadership_changed(self.state, Leadership.STOPPED, -1)
        await super().delete()
