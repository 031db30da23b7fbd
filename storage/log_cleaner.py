"""The log cleaner of a broker's classic and active-tiered logs (Kafka's LogCleaner and
LogCleanerManager; the cleaning of one log is storage.classic.cleaner's).

``log.cleaner.threads`` workers, run as tasks by the LogManager, each repeatedly take the
filthiest compacted log (highest dirty ratio among those at ``min.cleanable.dirty.ratio``,
or with a record older than ``max.compaction.lag.ms``) that no other worker holds, clean
it, and record where its dirty section now starts in the data directory's
``cleaner-offset-checkpoint`` (Kafka's file and format). With nothing to clean a worker
waits ``log.cleaner.backoff.ms``.

The reading, hashing and writing run in a thread (asyncio.to_thread) so the event loop goes
on serving; the loop only plans a cleaning and swaps each cleaned segment in, which are
quick and, not awaiting, never interleave with an append to the same log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .classic import ClassicLog
from .classic.checkpoint import write_atomically
from .classic.cleaner import (
    CleanerStats,
    CleaningAborted,
    CleaningPlan,
    OffsetMap,
    Throttler,
    TransactionTracker,
    build_offset_map,
    clean_group,
    group_segments,
)
from .log import PartitionLog

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CHECKPOINT_VERSION = 0
logger = logging.getLogger(__name__)

LogKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's log.cleaner.* settings. ``io_max_bytes_per_second`` is read before
    every throttling decision, so a dynamic broker config takes effect at once."""

    threads: int = 1
    dedupe_buffer_size: int = 128 << 20
    backoff_ms: int = 15_000
    io_max_bytes_per_second: Callable[[], float] = lambda: float("inf")


@dataclass(slots=True)
class CleanerMetrics:
    """What /metrics reports of the cleaner (Kafka's LogCleaner and LogCleanerManager
    gauges)."""

    totals: CleanerStats = field(default_factory=CleanerStats)
    # The highest dirty ratio among the compacted logs at the last selection.
    max_dirty_ratio: float = 0.0
    # At the last selection, the longest a compacted log's first dirty record had been past
    # max.compaction.lag.ms (0: none was), in seconds.
    max_compaction_delay_s: float = 0.0
    # time.monotonic() of the end of the last cleaning; None before the first.
    last_run_end: float | None = None
    cleanings: int = 0
    # Cleanings that failed with an error (Kafka's thread would die: DeadThreadCount).
    failures: int = 0
    # Of the last cleaning: its duration, the share of the offset map it filled, and the
    # bytes it wrote over those it read (Kafka's max-clean-time-secs,
    # max-buffer-utilization-percent and cleaner-recopy-percent, as fractions).
    last_clean_s: float = 0.0
    last_buffer_utilization: float = 0.0
    last_recopy_ratio: float = 0.0

    def time_since_last_run_s(self) -> float:
        return 0.0 if self.last_run_end is None else time.monotonic() - self.last_run_end


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CleanerCheckpoint:
    """``cleaner-offset-checkpoint``: first dirty offset per partition (Kafka's layout:
    version, count, then ``topic partition offset`` lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets: dict[LogKey, int] = {}
        try:
            lines = path.read_text("utf-8").splitlines()
        except FileNotFoundError:
            return
        try:
            if int(lines[0]) != _CHECKPOINT_VERSION:
                raise ValueError(f"version {lines[0]}")
            for line in lines[2:2 + int(lines[1])]:
                topic, partition, offset = line.rsplit(" ", 2)
                self.offsets[(topic, int(partition))] = int(offset)
        except (IndexError, ValueError) as e:
            logger.warning("ignoring %s (cleaning starts over): %s", path, e)
            self.offsets.clear()

    def update(self, key: LogKey, offset: int | None) -> None:
        if offset is None:
            if self.offsets.pop(key, None) is None:
                return
        else:
            self.offsets[key] = offset
        lines = [str(_CHECKPOINT_VERSION), str(len(self.offsets))]
        lines += [f"{t} {p} {o}" for (t, p), o in sorted(self.offsets.items())]
        write_atomically(self.path, "\n".join(lines) + "\n")


class LogCleaner:
    def __init__(self, data_dir: Path, logs: Callable[[], dict[LogKey, PartitionLog]],
                 settings: CleanerSettings) -> None:
        """``logs``: the open logs by partition (the LogManager's); a log no longer there
        when a cleaned segment is ready is not swapped into."""
        self._logs = logs
        self.settings = settings
        self.checkpoint = CleanerCheckpoint(data_dir / CHECKPOINT_FILE)
        self.metrics = CleanerMetrics()
        self._in_progress: set[LogKey] = set()
        self._woken = asyncio.Event()

    def forget(self, key: LogKey) -> None:
        """The partition was deleted: its dirty section starts over if it comes back."""
        self.checkpoint.update(key, None)

    def wake(self) -> None:
        """Look for work now rather than after the backoff (tests, benchmarks)."""
        self._woken.set()

    async def run(self) -> None:
        """The workers; run as a task, cancel to stop (a cleaning in progress is
        abandoned: its ``.cleaned`` file is deleted when the log is next opened)."""
        await asyncio.gather(*(self._worker() for _ in range(max(1, self.settings.threads))))

    async def _worker(self) -> None:
        while True:
            try:
                cleaned = await self.clean_filthiest()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("log cleaner failed")
                self.metrics.failures += 1
                cleaned = False
            if not cleaned:
                self._woken.clear()
                try:
                    await asyncio.wait_for(self._woken.wait(), self.settings.backoff_ms / 1000)
                except TimeoutError:
                    pass

    def _filthiest(self, now_ms: int) -> tuple[LogKey, ClassicLog, CleaningPlan] | None:
        best: tuple[float, LogKey, ClassicLog, CleaningPlan] | None = None
        max_ratio, max_delay_ms = 0.0, 0
        for key, log in self._logs().items():
            if not isinstance(log, ClassicLog) or not log.config.compact:
                continue
            plan = log.cleaning_plan(self.checkpoint.offsets.get(key), now_ms)
            ratio = plan.dirty_ratio
            delay_ms = log.compaction_delay_ms(plan, now_ms)
            max_ratio, max_delay_ms = max(max_ratio, ratio), max(max_delay_ms, delay_ms)
            if key in self._in_progress or not plan.cleanable_bytes:
                continue
            if ratio < log.config.min_cleanable_dirty_ratio and delay_ms <= 0:
                continue
            if best is None or ratio > best[0]:
                best = (ratio, key, log, plan)
        self.metrics.max_dirty_ratio = max_ratio
        self.metrics.max_compaction_delay_s = max_delay_ms / 1000
        return None if best is None else best[1:]

    async def clean_filthiest(self) -> bool:
        """Clean the filthiest cleanable log once; False when none is cleanable."""
        chosen = self._filthiest(_now_ms())
        if chosen is None:
            return False
        key, log, plan = chosen
        self._in_progress.add(key)
        try:
            await self.clean(key, log, plan)
        finally:
            self._in_progress.discard(key)
        return True

    async def clean(self, key: LogKey, log: ClassicLog, plan: CleaningPlan) -> None:
        """One cleaning of ``log`` as ``plan`` describes it; the checkpoint moves to where
        the offset map stopped once every group is swapped in."""
        started = time.monotonic()
        now_ms = _now_ms()
        throttler = Throttler(self.settings.io_max_bytes_per_second)
        offset_map = OffsetMap(self.settings.dedupe_buffer_size // max(1, self.settings.threads))
        stats = CleanerStats()
        end_offset = await asyncio.to_thread(build_offset_map, plan, offset_map, throttler, stats)
        transactions = TransactionTracker(plan.aborted)
        try:
            for group in group_segments(plan, end_offset):
                cleaned = log.cleaned_segment(group[0].base_offset)
                try:
                    stats.add(await asyncio.to_thread(
                        clean_group, plan, group, cleaned, offset_map, end_offset,
                        transactions, throttler, now_ms))
                except BaseException:
                    cleaned.delete()
                    raise
                if self._logs().get(key) is not log \
                        or not log.replace_segments([v.segment for v in group], cleaned):
                    raise CleaningAborted(f"{log!r} changed while it was cleaned")
        except CleaningAborted as e:
            logger.info("cleaning abandoned: %s", e)
            return
        finally:
            self.metrics.totals.add(stats)
            self.metrics.cleanings += 1
            self.metrics.last_run_end = time.monotonic()
            self.metrics.last_clean_s = self.metrics.last_run_end - started
            self.metrics.last_buffer_utilization = offset_map.utilization
            self.metrics.last_recopy_ratio = (stats.bytes_written / stats.bytes_read
                                              if stats.bytes_read else 0.0)
        self.checkpoint.update(key, end_offset)
        elapsed = self.metrics.last_clean_s
        logger.info("cleaned %r up to offset %d in %.2f s: %d of %d records removed, %d bytes "
                    "read, %d written (map %.0f %% full)", log, end_offset, elapsed,
                    stats.records_removed, stats.records_read, stats.bytes_read,
                    stats.bytes_written, 100 * offset_map.utilization)
