"""A partition whose storage mode was switched live: a chain of spans, each kept by its
engine's log (docs/mode-switch.md).

``SpanChainLog`` is a ``PartitionLog`` like any other: appends, follower appends and
everything about producers go to the newest span's log; a read goes to the span holding the
offset, and never past that span's end (the next span's base offset). Two spans of the same
mode share one log (classic -> diskless -> classic: one classic log with a gap of offsets
that the diskless span holds), so the engines themselves know nothing of the chain but
``seal`` and ``start_span`` (storage.log).

A span whose log this broker does not hold (a classic span on a broker that was not its
replica) is ``None``: reading it raises ``SpanElsewhere``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.records import BatchHeader

from .append_rules import AppendDecision
from .config import LogConfig
from .log import (
    AppendResult,
    EpochEndOffset,
    KafkaStorageError,
    Leadership,
    OffsetOutOfRange,
    PartitionLog,
    ReadResult,
    TimestampOffset,
)
from .producer_state import AbortedTransaction, ProducerEntry


class SpanElsewhere(KafkaStorageError):
    """The offset lies in a span this broker does not hold (retriable: another broker,
    the one the metadata names, does)."""


@dataclass(slots=True)
class Span:
    mode: str
    base_offset: int
    # This broker's log of the span's engine; None where this broker does not hold it.
    log: PartitionLog | None


class SpanChainLog(PartitionLog):
    def __init__(self, topic: str, partition: int, config: LogConfig, spans: list[Span]) -> None:
        super().__init__(topic, partition, config)
        self.spans = spans

    @property
    def current(self) -> PartitionLog:
        """The newest span's log: the one appends go to (always held: every broker hosting
        the partition writes or follows it)."""
        log = self.spans[-1].log
        assert log is not None
        return log

    def held_logs(self) -> list[PartitionLog]:
        """Each distinct log of the chain this broker holds, oldest span first."""
        logs: list[PartitionLog] = []
        for span in self.spans:
            if span.log is not None and span.log not in logs:
                logs.append(span.log)
        return logs

    def _end_of(self, index: int) -> int | None:
        return self.spans[index + 1].base_offset if index + 1 < len(self.spans) else None

    def skip_gaps(self) -> None:
        """Move each log past the offsets other engines hold: a log that holds all of its
        span jumps to the base of its next span, and an empty log to the base of its first
        (a replica of a classic span that follows a diskless one starts there; one that
        lacks records of an earlier span fetches them first)."""
        for index, span in enumerate(self.spans):
            log = span.log
            if log is None:
                continue
            earlier = [s for s in self.spans[:index] if s.log is log]
            if not earlier and log.log_end_offset == log.log_start_offset:
                log.skip_to(span.base_offset)
            end = self._end_of(index)
            later = next((s for s in self.spans[index + 1:] if s.log is log), None)
            if later is not None and end is not None and log.log_end_offset == end:
                log.skip_to(later.base_offset)

    # -- offsets --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        for index, span in enumerate(self.spans):
            start = span.base_offset if span.log is None else max(span.base_offset,
                                                                   span.log.log_start_offset)
            end = self._end_of(index)
            if end is None or start < end:
                return start
        return self.spans[-1].base_offset

    @property
    def log_end_offset(self) -> int:
        # A replica still fetching an earlier span of the newest span's log is below the
        # newest base: its true end is where it fetches from.
        return self.current.log_end_offset

    @property
    def size_bytes(self) -> int:
        return sum(log.size_bytes for log in self.held_logs())

    # -- appends go to the newest span ---------------------------------------------------

    async def _append(self, records: bytearray, batches: list[BatchHeader], leader_epoch: int,
                      decision: AppendDecision) -> AppendResult:
        return await self.current._append(records, batches, leader_epoch, decision)

    @property
    def follower_append_waits(self) -> bool:
        return self.current.follower_append_waits

    async def append_as_follower(self, records: bytes) -> None:
        await self.current.append_as_follower(records)
        self.skip_gaps()  # a follower that was behind reaches the end of an old span

    # -- reads ----------------------------------------------------------------------------

    def _span_at(self, offset: int) -> int:
        index = 0
        for i, span in enumerate(self.spans):
            if span.base_offset <= offset:
                index = i
        return index

    async def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_batch: bool = True) -> ReadResult:
        start, end = self.log_start_offset, self.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{start}, {end}] of "
                                   f"{self.topic}-{self.partition}")
        index = self._span_at(offset)
        span, span_end = self.spans[index], self._end_of(index)
        if span_end is None:
            result = await self.current.read(offset, max_bytes, max_offset=max_offset,
                                             min_one_batch=min_one_batch)
            return ReadResult(result.records, start, end)
        if span.log is None or offset >= span.log.log_end_offset:
            raise SpanElsewhere(f"offset {offset} of {self.topic}-{self.partition} is in its "
                                f"{span.mode} span, which this broker does not hold")
        limit = span_end if max_offset is None else min(max_offset, span_end)
        result = await span.log.read(offset, max_bytes, max_offset=limit,
                                     min_one_batch=min_one_batch)
        return ReadResult(result.records, start, end)

    async def read_for_replica(self, replica_id: int, offset: int, max_bytes: int, *,
                               max_offset: int | None = None,
                               min_one_batch: bool = True) -> ReadResult:
        # Followers replicate the newest span's log, gaps included (skip_gaps).
        return await self.current.read_for_replica(replica_id, offset, max_bytes,
                                                   max_offset=max_offset,
                                                   min_one_batch=min_one_batch)

    async def offset_for_timestamp(self, timestamp_ms: int) -> TimestampOffset | None:
        for index, span in enumerate(self.spans):
            if span.log is None:
                continue
            found = await span.log.offset_for_timestamp(timestamp_ms)
            end = self._end_of(index)
            if found is not None and found.offset >= span.base_offset and (
                    end is None or found.offset < end):
                return found
        return None

    async def max_timestamp(self) -> TimestampOffset | None:
        found = [t for log in self.held_logs() if (t := await log.max_timestamp()) is not None]
        return max(found, key=lambda t: (t.timestamp, -t.offset), default=None)

    # -- producers and transactions: the newest span's state (carried over at the switch) -

    def last_stable_offset(self, high_watermark: int) -> int:
        return self.current.last_stable_offset(high_watermark)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self.current.on_high_watermark_updated(high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTransaction]:
        seen: dict[tuple[int, int], AbortedTransaction] = {}
        for log in self.held_logs():
            for aborted in log.aborted_transactions(start, end):
                seen.setdefault((aborted.producer_id, aborted.first_offset), aborted)
        return sorted(seen.values(), key=lambda a: a.last_offset)

    def active_producers(self) -> list[ProducerEntry]:
        return self.current.active_producers()

    def producer(self, producer_id: int) -> ProducerEntry | None:
        return self.current.producer(producer_id)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        return self.current.expire_producers(now_ms, expiration_ms)

    def durable_end_offset(self) -> int:
        return self.current.durable_end_offset()

    async def catch_up(self, since: float) -> None:
        for log in self.held_logs():
            await log.catch_up(since)

    def on_leadership_change(self, role: Leadership, leader_epoch: int) -> None:
        self.current.on_leadership_change(role, leader_epoch)

    # -- removal: each span's log keeps its own retention ----------------------------------

    async def delete_records_before(self, offset: int) -> int:
        for log in self.held_logs():
            if any(s.log is log and s.base_offset < offset for s in self.spans):
                await log.delete_records_before(min(offset, log.log_end_offset))
        return self.log_start_offset

    async def enforce_retention(self, now_ms: int) -> int:
        return sum([await log.enforce_retention(now_ms) for log in self.held_logs()])

    # -- replication of the newest span ----------------------------------------------------

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        # Newest span first: the first log that knows the epoch (or one below it) answers,
        # no further than its span's end. A new span's log knows no epoch before its first
        # append, and clients validate their position with the epoch they fetched at (a
        # consumer whose answer was "unknown" would take it for a truncation and reset).
        for index in reversed(range(len(self.spans))):
            log = self.spans[index].log
            if log is None:
                continue
            found = log.end_offset_for_epoch(leader_epoch)
            if found.end_offset >= 0:
                end = self._end_of(index)
                return found if end is None else EpochEndOffset(found.leader_epoch,
                                                                min(found.end_offset, end))
        return EpochEndOffset(-1, -1)

    def latest_epoch(self) -> int:
        return self.current.latest_epoch()

    async def truncate_to(self, offset: int) -> None:
        # Below the newest span's base everything was committed before the switch: a
        # follower's divergence can only be above it.
        await self.current.truncate_to(max(offset, self.spans[-1].base_offset))

    # -- lifecycle ------------------------------------------------------------------------

    def flush_deadline_ms(self) -> int | None:
        return min((d for log in self.held_logs() if (d := log.flush_deadline_ms()) is not None),
                   default=None)

    async def flush(self) -> None:
        for log in self.held_logs():
            await log.flush()

    async def close(self, *, sync: bool = True) -> None:
        for log in self.held_logs():
            await log.close(sync=sync)

    def closed_log_end(self) -> int | None:
        # Every span's engine keeps its files in the partition's one directory, so at most
        # one of them keeps a local log.
        ends = [end for log in self.held_logs() if (end := log.closed_log_end()) is not None]
        return ends[0] if len(ends) == 1 else None

    def release_directory(self) -> None:
        for log in self.held_logs():
            log.release_directory()

    async def delete(self) -> None:
        for log in self.held_logs():
            await log.delete()

    def reconfigure(self, config: LogConfig) -> None:
        super().reconfigure(config)
        for log in self.held_logs():
            log.reconfigure(config)
