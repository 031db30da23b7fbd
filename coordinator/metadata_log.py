"""A voter's copy of the cluster metadata log, ``__cluster_metadata-0``: a classic log of
JSON records in batches stamped with the quorum epoch that appended them, fsynced before the
quorum counts them (replication.raft, whose RaftLog this is); and its snapshots (KIP-630).

A snapshot holds the records that rebuild the metadata image as of an offset (its end
offset), in the log's own format, in a file named as KRaft names them
(``<end offset>-<epoch>.checkpoint``, zero-padded). Loading reads the newest snapshot and
replays the log from its end offset instead of from 0; once a snapshot is written, the log
below the oldest kept snapshot is deleted, so neither the log nor a restart grows with the
cluster's history. Snapshots live in a directory of their own next to the log's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from protocol.records import decode_json_records, encode_json_records, iter_batches
from replication.cluster_metadata import METADATA_TOPIC
from replication.raft import SnapshotId
from storage.classic import ClassicLog
from storage.classic.checkpoint import write_atomically
from storage.config import LogConfig
from storage.disk_space import storage_io
from storage.log import EpochEndOffset, KafkaStorageError

log = logging.getLogger(__name__)
# Snapshots kept: the newest, and one before it in case the newest cannot be read.
SNAPSHOTS_KEPT = 2
# Records per batch of one append: a topic of thousands of partitions is one append of
# several batches, each encoded (and decoded by every broker) between two turns of the
# event loop, instead of one batch taking a tenth of a second.
RECORDS_PER_BATCH = 500
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass(frozen=True)
class MetadataState:
    """What loading found: the newest readable snapshot (if any) and the log after it."""

    snapshot: SnapshotId | None
    snapshot_records: list[dict]
    tail: list[tuple[int, dict]]


class MetadataLog:
    """A voter's copy of ``__cluster_metadata-0`` and its snapshots."""

    def __init__(self, directory: Path) -> None:
        config = LogConfig(retention_ms=-1, segment_bytes=64 << 20)
        self.log = ClassicLog(METADATA_TOPIC, 0, config, directory / f"{METADATA_TOPIC}-0")
        self.snapshot_dir = directory / f"{METADATA_TOPIC}-snapshots"
        self.snapshot_dir.mkdir(parents=True, exist_ok=True)
        # Only this object writes and deletes snapshots, so the directory is listed once
        # and again after each change: the leader looks at the newest on every Fetch.
        self._snapshots = self._list_snapshots()
        # Held by every change of the log: its fsyncs run on a thread (``_flush``), and
        # nothing else may change the log until they are done. Reads go on meanwhile.
        self._changing = asyncio.Lock()

    def _list_snapshots(self) -> list[SnapshotId]:
        found = []
        for path in self.snapshot_dir.iterdir():
            match = _SNAPSHOT_NAME.match(path.name)
            if match:
                found.append(SnapshotId(int(match[1]), int(match[2])))
        return sorted(found)

    def snapshots(self) -> list[SnapshotId]:
        """The snapshots on disk, oldest first (temporary files of torn writes excluded)."""
        return list(self._snapshots)

    def latest_snapshot(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_path(self, snapshot: SnapshotId) -> Path:
        return self.snapshot_dir / snapshot.file_name

    def read_snapshot(self, snapshot: SnapshotId) -> list[dict]:
        """Its records; raises ValueError (InvalidRecordBatch) unless every batch is whole
        and intact, and there is at least one record (a snapshot names its brokers)."""
        data = self.snapshot_path(snapshot).read_bytes()
        for _ in iter_batches(data, verify_crc=True):
            pass
        records = [record for _, record in decode_json_records(data)]
        if not records:
            raise ValueError("no records")
        return records

    async def load(self) -> MetadataState:
        """The newest readable snapshot and the records after it."""
        snapshot, records = None, []
        for candidate in reversed(self.snapshots()):
            try:
                records = await asyncio.to_thread(self.read_snapshot, candidate)
                snapshot = candidate
                break
            except (OSError, ValueError) as e:
                log.error("metadata snapshot %s cannot be read (%s): trying an older one",
                          candidate.file_name, e)
        start = snapshot.end_offset if snapshot is not None else 0
        if start < self.log.log_start_offset:
            raise KafkaStorageError(
                f"{METADATA_TOPIC} starts at {self.log.log_start_offset} but no readable "
                f"snapshot reaches it (newest readable ends at {start})")
        tail = []
        offset = start
        while offset < self.log.log_end_offset:
            chunk = await self.log.read(offset, 1 << 20)
            decoded = decode_json_records(chunk.records)
            tail += [(o, r) for o, r in decoded if o >= offset]
            offset = decoded[-1][0] + 1
        return MetadataState(snapshot, records, tail)

    async def append(self, records: list[dict], leader_epoch: int = 0) -> int:
        """Append and fsync (all or nothing); return the offset of the first record."""
        data = bytearray()
        for start in range(0, len(records), RECORDS_PER_BATCH):
            data += encode_json_records(records[start:start + RECORDS_PER_BATCH])
            await asyncio.sleep(0)
        batches = list(iter_batches(data))
        async with self._changing:
            result = await self.log.append(data, batches, leader_epoch)
            try:
                await self._flush()
            except KafkaStorageError:
                # Not durable, so not committed: the records must not be replayed on restart
                # (nor be followed by the next change) when the caller applies nothing.
                await self.log.truncate_to(result.base_offset)
                raise
        return result.base_offset

    async def _flush(self) -> None:
        """fsync what was appended, on a thread: on the event loop, a voter's fsyncs held it
        for 70-80 ms while the file system was busy (a deleted topic's directories removed
        on every broker at once), and all three brokers at the same moment. The caller
        holds ``_changing``, until the thread is done even if it is cancelled meanwhile."""
        flushing = asyncio.ensure_future(asyncio.to_thread(self.log.flush_blocking))
        try:
            await asyncio.shield(flushing)
        except asyncio.CancelledError:
            await asyncio.wait([flushing])
            raise

    # --- the quorum's view (replication.raft.RaftLog) ------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def last_epoch(self) -> int:
        epoch = self.log.latest_epoch()
        if epoch >= 0 and self.log.log_end_offset > self.log.log_start_offset:
            return epoch
        snapshot = self.latest_snapshot()
        return snapshot.epoch if snapshot is not None else max(epoch, 0)

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        return self.log.end_offset_for_epoch(epoch)

    async def append_as_leader(self, records: list[dict], epoch: int) -> int:
        return await self.append(records, epoch)

    async def append_as_follower(self, data: bytes) -> None:
        async with self._changing:
            await self.log.append_as_follower(data)
            await self._flush()

    async def truncate_to(self, offset: int) -> None:
        async with self._changing:
            await self.log.truncate_to(offset)

    async def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        return bytes((await self.log.read(offset, max_bytes, max_offset=max_offset)).records)

    async def epoch_at(self, offset: int) -> int:
        """The epoch of the record at ``offset`` (a snapshot's id names the one before its
        end); below the log's start, the newest snapshot's."""
        if offset >= self.log.log_start_offset:
            for batch in iter_batches((await self.log.read(offset, 1)).records,
                                      allow_partial_tail=True):
                return max(batch.partition_leader_epoch, 0)
        snapshot = self.latest_snapshot()
        return snapshot.epoch if snapshot is not None else 0

    async def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """The leader's snapshot, for a voter below its log's start: kept as this voter's
        newest, and the log starts again, empty, at its end."""
        def write() -> None:
            with storage_io(f"write metadata snapshot {snapshot.file_name}"):
                write_atomically(self.snapshot_path(snapshot), data)

        await asyncio.to_thread(write)
        self._snapshots = self._list_snapshots()
        self.read_snapshot(snapshot)  # whole and intact, or this raises
        async with self._changing:
            await self.log.truncate_fully_and_start_at(snapshot.end_offset)

    async def write_snapshot(self, snapshot: SnapshotId, records: list[dict]) -> None:
        """Write a snapshot durably (temporary file, fsync, rename), then drop the snapshots
        and the log below the oldest of the SNAPSHOTS_KEPT newest."""
        def write() -> None:
            with storage_io(f"write metadata snapshot {snapshot.file_name}"):
                write_atomically(self.snapshot_path(snapshot),
                                 bytes(encode_json_records(records)))

        await asyncio.to_thread(write)
        snapshots = self._list_snapshots()
        kept = snapshots[-SNAPSHOTS_KEPT:]
        for old in snapshots[:-SNAPSHOTS_KEPT]:
            self.snapshot_path(old).unlink(missing_ok=True)
        self._snapshots = kept
        if len(kept) == SNAPSHOTS_KEPT and kept[0].end_offset > self.log.log_start_offset:
            async with self._changing:
                await self.log.delete_records_before(kept[0].end_offset)

    async def close(self) -> None:
        async with self._changing:
            await self.log.close()
