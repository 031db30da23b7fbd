"""The active-tiered engine (KIP-1176): a classic log whose replication goes through object
storage.

Everything local (segments, indexes, epochs, producer state, retention) is ClassicLog's;
this class adds the two places where KIP-1176 differs:

- as leader, ``append`` also hands the new bytes to the broker's WalUploader, and
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
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from protocol.records import BatchHeader, iter_batches

from ..classic import ClassicLog
from ..classic.log import UnexpectedAppendOffset
from ..config import LogConfig
from ..log import AppendResult, ReadResult
from ..objectstore import ObjectStoreError
from .metadata import (MetadataScheme, WalIndex, WalMetadataFile, WalRef, decode_pointers,
                       encode_pointers)

if TYPE_CHECKING:
    from . import ActiveTiered

log = logging.getLogger(__name__)


class ActiveTieredLog(ClassicLog):
    def __init__(self, topic: str, partition: int, config: LogConfig, directory: Path | str,
                 shared: "ActiveTiered") -> None:
        super().__init__(topic, partition, config, directory)
        self._shared = shared
        # Refs this broker can hand to followers: what it uploaded as leader (and, with the
        # fetch scheme, what it learnt as follower or kept in its file).
        self.wal_refs = WalIndex()
        self.wal_file: WalMetadataFile | None = None
        # Follower -> the offset it last fetched from (it holds everything below).
        self._replica_offsets: dict[int, int] = {}
        # Follower -> the offset it was last given pointers for. Asking again for that
        # offset means it could not use them (download failed, metadata late): records.
        self._pointed: dict[int, int] = {}
        # (last offset, when handed out) of uploads not yet held by every in-sync follower.
        self._unreplicated: deque[tuple[int, float]] = deque(maxlen=10_000)
        self.scheme.opened(self)

    def __repr__(self) -> str:
        return (f"ActiveTieredLog({self.topic}-{self.partition}, "
                f"[{self.log_start_offset}, {self.log_end_offset}))")

    @property
    def scheme(self) -> MetadataScheme:
        return self._shared.schemes[self.config.wal_metadata_scheme]

    # -- leader --------------------------------------------------------------------------

    async def append(self, records: bytearray, batches: list[BatchHeader],
                     leader_epoch: int) -> AppendResult:
        log_end_before = self.log_end_offset
        result = await super().append(records, batches, leader_epoch)
        self._shared.uploader.appended(self, log_end_before, leader_epoch, len(records))
        return result

    def handed_out(self, ref: WalRef) -> None:
        """The uploader made ``ref`` available to followers (timed until they hold it)."""
        if self._shared.in_sync_followers(self.topic, self.partition):
            self._unreplicated.append((ref.last_offset, time.monotonic()))

    def _time_replication(self) -> None:
        followers = self._shared.in_sync_followers(self.topic, self.partition)
        held = min((self._replica_offsets.get(r, -1) for r in followers), default=None)
        while self._unreplicated and held is not None and held > self._unreplicated[0][0]:
            _, handed_at = self._unreplicated.popleft()
            self._shared.metrics.timed("replicated", time.monotonic() - handed_at)

    async def read_for_replica(self, replica_id: int, offset: int, max_bytes: int, *,
                               max_offset: int | None = None,
                               min_one_batch: bool = True) -> ReadResult:
        self._replica_offsets[replica_id] = offset
        self._time_replication()
        refs = self.wal_refs.covering(offset, max_bytes)
        if refs and self._pointed.get(replica_id) != offset:
            self._pointed[replica_id] = offset
            pointers = self.scheme.pointers(refs)
            encoded = encode_pointers(pointers)
            self._shared.metrics.metadata(self.scheme.name, len(pointers.refs or ()),
                                          len(encoded))
            return ReadResult(encoded, self.log_start_offset, self.log_end_offset)
        if not refs and self._shared.uploader.will_upload(self, offset):
            # The next upload covers it: the fetch long-polls until then.
            return ReadResult(b"", self.log_start_offset, self.log_end_offset)
        result = await self.read(offset, max_bytes, max_offset=max_offset,
                                 min_one_batch=min_one_batch)
        if result.records:
            self._shared.metrics.fallback(len(result.records))
        return result

    def replicas_hold(self, offset: int) -> bool:
        """Has every in-sync follower fetched past ``offset``? (False when not leading.)"""
        if self._shared.uploader.leading(self) is None:
            return False
        followers = self._shared.in_sync_followers(self.topic, self.partition)
        return all(self._replica_offsets.get(r, -1) > offset for r in followers)

    def durable_end_offset(self) -> int:
        """With ``active.tiered.ack.on.upload``, what is uploaded counts as committed,
        before any follower has it: one AZ's bucket then holds the only other copy."""
        state = self._shared.uploader.leading(self)
        if not self.config.ack_on_upload or state is None:
            return -1
        return state.cursor

    # -- follower ------------------------------------------------------------------------

    async def append_as_follower(self, records: bytes) -> None:
        self._shared.uploader.forget(self)
        pointers = decode_pointers(records)
        if pointers is None:
            await super().append_as_follower(records)
            return
        refs = await self.scheme.resolve(self, pointers)
        if not refs:
            return
        start = self.log_end_offset
        try:
            chunks = await self._shared.downloader.download(refs)
        except (ObjectStoreError, asyncio.TimeoutError) as e:
            # Not appended: the next fetch asks for the same offset, and gets records.
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
        self.scheme.appended(self, refs)

    def _from_log_end(self, chunk: bytes) -> bytes:
        """The batches of ``chunk`` at or above the log end offset (a ref may start below
        it after a truncation)."""
        for batch in iter_batches(chunk):
            if batch.next_offset > self.log_end_offset:
                return chunk[batch.position:]
        return b""

    async def truncate_to(self, offset: int) -> None:
        self._shared.uploader.forget(self)
        self._unreplicated.clear()
        self.wal_refs.drop_from(offset)
        await super().truncate_to(offset)

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self) -> None:
        self._shared.closed(self)
        await super().close()

    async def delete(self) -> None:
        self._shared.closed(self)
        await super().delete()
