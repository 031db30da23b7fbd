"""A diskless partition's log: no local data at all. Appends go through the broker's WAL
writer, offsets and reads come from the batch coordinator, bytes from object storage."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from protocol.records import (
    BatchHeader,
    first_matching_record,
    read_header,
    rebase,
    stamp_log_append_time,
)
from storage.producer_state import AbortedTransaction, ProducerEntry, ProducerStateError

from ..append_rules import AppendDecision
from ..config import LogConfig
from ..log import (
    AppendResult,
    EpochEndOffset,
    KafkaStorageError,
    OffsetOutOfRange,
    Prefetch,
    PartitionLog,
    ReadResult,
    RecordsLost,
    SpanEnd,
    TimestampOffset,
)
from ..objectstore import ObjectNotFound
from .control_plane import (
    LOG_APPEND_TIME,
    BatchCoordinate,
    ControlPlane,
    DeleteRecords,
    LogInfo,
    OpenLog,
    SealLog,
)
from .read_cache import ReadCache
from .wal_writer import WalWriter


class BatchRejected(ProducerStateError):
    """The coordinator refused a batch at commit time (sequence, epoch, unknown topic...)."""

    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class _Lookup:
    """Batches found for a read from ``offset`` while the log was ``info``."""

    info: LogInfo
    offset: int
    max_bytes: int
    max_offset: int | None
    coordinates: list[BatchCoordinate]


class DisklessLog(PartitionLog):
    def __init__(self, topic: str, partition: int, config: LogConfig, topic_id: str,
                 control_plane: ControlPlane, writer: WalWriter, cache: ReadCache) -> None:
        super().__init__(topic, partition, config)
        self.topic_id = topic_id
        self.control_plane = control_plane
        self.writer = writer
        self.cache = cache
        # What ``prefetch`` found, for the ``read`` of the same Fetch that follows it: one
        # batch-coordinator query per partition rather than two (a consumer's Fetch of
        # thousands of partitions).
        self._prefetched: _Lookup | None = None

    @property
    def log_start_offset(self) -> int:
        return self.control_plane.log_info(self.topic_id, self.partition).log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.control_plane.log_info(self.topic_id, self.partition).high_watermark

    @property
    def size_bytes(self) -> int:
        # KIP-1150: no local log; the batches' bytes in WAL objects, as the batch
        # coordinator counts them.
        return self.control_plane.log_info(self.topic_id, self.partition).size_bytes

    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        results = await self.writer.append(self.topic_id, self.partition, records, batches,
                                           decision.log_append_time)
        for result in results:
            if result.error_code != ErrorCode.none:
                raise BatchRejected(result.error_code, result.error_message)
        first = results[0]
        return AppendResult(first.base_offset, results[-1].base_offset + batches[-1].last_offset_delta,
                            first.log_append_time_ms, first.log_start_offset)

    async def catch_up(self, since: float) -> None:
        await self.control_plane.catch_up(since)

    # -- live storage-mode switches: the batch coordinator cuts the span ---------------------

    async def seal(self) -> SpanEnd:
        # Every broker appends: only the coordinator's log orders the seal against commits.
        result = await self.control_plane.seal_log(SealLog(self.topic_id, self.partition))
        return SpanEnd(result.offset, base64.b64decode(result.producer_state))

    def skip_to(self, offset: int) -> None:
        pass  # the offsets are the batch coordinator's, which OpenLog moved there

    async def start_span(self, previous: SpanEnd) -> None:
        result = await self.control_plane.open_log(OpenLog(
            self.topic_id, self.partition, previous.offset,
            base64.b64encode(previous.producer_state).decode("ascii")))
        if result.error_code != ErrorCode.none:
            raise KafkaStorageError(f"the batch coordinator cannot start {self.topic}-"
                                    f"{self.partition} at {previous.offset}: "
                                    f"{result.error_code.name}")

    def last_stable_offset(self, high_watermark: int) -> int:
        # Markers are committed into the log like any batch: the coordinator's copy knows
        # every open transaction up to its high watermark.
        return min(high_watermark,
                   self.control_plane.last_stable_offset(self.topic_id, self.partition))

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        return self.control_plane.aborted_transactions(self.topic_id, self.partition, start, end)

    def active_producers(self) -> list[ProducerEntry]:
        return self.control_plane.active_producers(self.topic_id, self.partition)

    async def append_as_follower(self, records: bytes) -> None:
        raise KafkaStorageError("diskless partitions have no followers")

    async def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_batch: bool = True) -> ReadResult:
        info = self.control_plane.log_info(self.topic_id, self.partition)
        if not info.log_start_offset <= offset <= info.high_watermark:
            raise OffsetOutOfRange()
        coordinates = self._prefetched_coordinates(info, offset, max_bytes, max_offset)
        if coordinates is None:
            coordinates = self._coordinates(offset, max_bytes, max_offset)
        if not min_one_batch and coordinates and coordinates[0].byte_size > max_bytes:
            coordinates = []
        records = await self._batches(coordinates)
        return ReadResult(bytes(records), info.log_start_offset, info.high_watermark)

    def prefetch(self, offset: int, max_bytes: int, *, max_offset: int) -> Prefetch | None:
        info = self.control_plane.log_info(self.topic_id, self.partition)
        coordinates = self._coordinates(offset, max_bytes, max_offset)
        self._prefetched = _Lookup(info, offset, max_bytes, max_offset, coordinates)
        ranges = [(c.object_key, c.byte_offset, c.byte_size) for c in coordinates]
        if self.cache.holds(ranges):
            return None
        return Prefetch(sum(size for _, _, size in ranges), self.cache.prefetch(ranges))

    def refresh_prefetch(self) -> Prefetch | None:
        """A merge of small WAL objects (or a compaction) applied while the prefetch waited
        moved batches it found: look them up again and bring in what moved together with
        the other partitions', or each partition's read would GET its own (a consumer's
        fetch of 10,000 partitions took 20 s rather than 1 after a merge)."""
        found = self._prefetched
        if found is None \
                or found.info is self.control_plane.log_info(self.topic_id, self.partition):
            return None
        return self.prefetch(found.offset, found.max_bytes, max_offset=found.max_offset)

    def _prefetched_coordinates(self, info: LogInfo, offset: int, max_bytes: int,
                                max_offset: int | None) -> list[BatchCoordinate] | None:
        """What ``prefetch`` found, if it was asked the same under the same ``info`` (no
        batch changed since: ControlPlane.log_info); taken once."""
        found, self._prefetched = self._prefetched, None
        if found is None or found.info is not info \
                or (found.offset, found.max_bytes, found.max_offset) != (offset, max_bytes,
                                                                         max_offset):
            return None
        return found.coordinates

    def _coordinates(self, offset: int, max_bytes: int,
                     max_offset: int | None) -> list[BatchCoordinate]:
        return [c for c in self.control_plane.find_batches(
            self.topic_id, self.partition, offset, max_bytes)
            if max_offset is None or c.base_offset < max_offset]

    async def _batches(self, coordinates: list[BatchCoordinate]) -> bytearray:
        """The batches as stored by their producers, given their assigned offsets (and the
        append time, for LogAppendTime topics)."""
        try:
            raw = await self.cache.read([(c.object_key, c.byte_offset, c.byte_size)
                                         for c in coordinates])
        except ObjectNotFound as error:
            self.cache.store.missing.found(error.bucket, error.key,
                                           f"{self.topic}-{self.partition}")
            raise RecordsLost(str(error)) from error
        out = bytearray()
        for coordinate, data in zip(coordinates, raw):
            position = len(out)
            out += data
            rebase(out, position, coordinate.base_offset)
            if coordinate.timestamp_type == LOG_APPEND_TIME:
                stamp_log_append_time(out, read_header(out, position), coordinate.append_time_ms)
        return out

    async def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        coordinate = self.control_plane.offset_for_timestamp(self.topic_id, self.partition,
                                                             timestamp_ms)
        if coordinate is None:
            return None
        start = self.log_start_offset
        return await self._record_in(coordinate, lambda offset, ts: ts >= timestamp_ms and offset >= start,
                                     max(coordinate.base_offset, start))

    async def max_timestamp(self) -> TimestampOffset | None:
        coordinate = self.control_plane.max_timestamp_batch(self.topic_id, self.partition)
        if coordinate is None:
            return None
        fallback = (coordinate.base_offset if coordinate.timestamp_type == LOG_APPEND_TIME
                    else coordinate.last_offset)
        return await self._record_in(coordinate, lambda _, ts: ts == coordinate.max_timestamp, fallback)

    async def _record_in(self, coordinate: BatchCoordinate, match, fallback_offset: int) -> TimestampOffset:
        data = await self._batches([coordinate])
        header = read_header(data)
        found = first_matching_record(bytes(data), header, match)
        if found is None:
            return TimestampOffset(header.max_timestamp, fallback_offset, -1)
        return TimestampOffset(found[1], found[0], -1)

    async def delete_records_before(self, offset: int) -> int:
        result = await self.control_plane.delete_records(DeleteRecords(
            self.topic_id, self.partition, offset, time.time_ns() // 1_000_000))
        if result.error_code == ErrorCode.offset_out_of_range:
            raise OffsetOutOfRange()
        if result.error_code != ErrorCode.none:
            raise KafkaStorageError(f"DeleteRecords failed: {result.error_code.name}")
        return result.low_watermark

    async def enforce_retention(self, now_ms: int) -> int:
        # The batch coordinator applies retention to every diskless log at once, on the
        # same schedule (the engine's retention, registered with the LogManager).
        return 0

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        # No leader epochs: the log never diverges, so every epoch ends at the log end.
        return EpochEndOffset(leader_epoch, self.log_end_offset)

    def latest_epoch(self) -> int:
        return -1

    async def truncate_to(self, offset: int) -> None:
        raise KafkaStorageError("diskless partitions are never truncated")

    async def flush(self) -> None:
        pass  # acknowledged data is already in object storage

    async def close(self, *, sync: bool = True) -> None:
        pass

    async def delete(self) -> None:
        pass  # the batch coordinator drops the topic's batches; GC deletes the objects


def log_factory(control_plane: ControlPlane, writer: WalWriter, cache: ReadCache, topic_ids):
    """The LogManager engine factory for ``kipper.storage.mode=diskless``; ``topic_ids``
    maps a topic name to its current topic id."""
    def open_log(topic: str, partition: int, config: LogConfig, directory: Path, *,
                 clean_recovery_point: int | None = None) -> DisklessLog:
        # Nothing local to recover: it keeps its data in object storage.
        return DisklessLog(topic, partition, config, topic_ids(topic), control_plane, writer, cache)
    return open_log
