"""The logs a broker hosts, each opened with the engine its topic's ``kipper.storage.mode``
names. This is the one place a storage mode is resolved to an engine."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from .classic import ClassicLog
from .classic.checkpoint import (
    DELETED_DIR_SUFFIX,
    deletion_name,
    move_aside_for_deletion,
    sync_file_system,
)
from .classic.clean_shutdown import CleanShutdown
from .classic.directories import TRASH, make_log_dirs, move_log_dirs_aside
from .config import InvalidConfig, LogConfig
from .disk_space import DiskFull, DiskSpace
from .log import PartitionLog
from .log_cleaner import CleanerSettings, LogCleaner
from .spans import Span, SpanChainLog

logger = logging.getLogger(__name__)
# Logs close_all closes at once (their files written by the default executor's threads,
# several on 2 cores: the time is the file system's, not the CPU's).
CLOSING_AT_ONCE = 16

# (topic, partition, config, partition directory, *, clean_recovery_point) -> log: the last
# argument, when not None, says the log was closed cleanly with that log end
# (storage.classic.clean_shutdown). Engines that need more (an object store client, the
# batch coordinator) are registered by the broker as closures over it.
EngineFactory = Callable[..., PartitionLog]
# now_ms -> bytes freed: retention an engine applies to all its partitions at once (the
# diskless batch coordinator's, one record for every topic), run on the logs' schedule.
EngineRetention = Callable[[int], Awaitable[int]]
# (now_ms, producer.id.expiration.ms) -> producers forgotten.
ProducerExpiration = Callable[[int, int], Awaitable[int]]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def is_internal_topic(topic: str) -> bool:
    """Kafka's convention: internal topics (``__consumer_offsets``, the metadata logs) are
    named ``__*``."""
    return topic.startswith("__")


class LogManager:
    def __init__(self, data_dir: Path | str, reserved_bytes: int = 0,
                 cleaner: CleanerSettings | None = None) -> None:
        """``reserved_bytes``: the free space appends of data leave to internal topics and
        checkpoints (storage.disk_space; -1: the default share of the file system).
        ``cleaner``: the log cleaner's settings (it runs once ``run_cleaner`` is started)."""
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for doomed in self.data_dir.glob(f"*{DELETED_DIR_SUFFIX}"):
            shutil.rmtree(doomed, ignore_errors=True)  # deletions a crash interrupted
        self.disk_space = DiskSpace(self.data_dir, reserved_bytes)
        # What the last shutdown left: the logs it closed cleanly, opened without recovery.
        self.clean_shutdown = CleanShutdown(self.data_dir)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # Logs holding data that flush.ms wants fsynced on time (PartitionLog.on_flush_pending).
        self._flush_pending: dict[tuple[str, int], PartitionLog] = {}
        self.engines: dict[str, EngineFactory] = {"classic": ClassicLog}
        self._engine_retention: dict[str, EngineRetention] = {}
        self._engine_producer_expiration: dict[str, ProducerExpiration] = {}
        # Each partition's engine logs by storage mode: the one log, or the logs of a
        # SpanChainLog (a partition switched live between modes, docs/mode-switch.md).
        self._engine_logs: dict[tuple[str, int], dict[str, PartitionLog]] = {}
        # Logs detached for deletion and not deleted yet, by partition.
        self._detached: dict[tuple[str, int], list[PartitionLog]] = {}
        # The job making the directories of partitions (make_directories) while it runs.
        self._making: dict[tuple[str, int], asyncio.Future] = {}
        # Set once the job renaming the directories of deleted partitions aside
        # (delete_unopened) is done, by partition, while it runs.
        self._moving: dict[tuple[str, int], threading.Event] = {}
        self.cleaner = LogCleaner(self.data_dir, lambda: self._logs, cleaner or CleanerSettings())

    def register_engine(self, mode: str, factory: EngineFactory,
                        retention: EngineRetention | None = None,
                        producer_expiration: ProducerExpiration | None = None) -> None:
        """``retention``, ``producer_expiration``: for an engine whose logs leave
        ``enforce_retention`` and ``expire_producers`` to it."""
        self.engines[mode] = factory
        if retention is not None:
            self._engine_retention[mode] = retention
        if producer_expiration is not None:
            self._engine_producer_expiration[mode] = producer_expiration

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    async def make_directories(self, logs: list[tuple[str, int, str]]) -> None:
        """Make the directories of the logs ``logs`` (topic, partition, storage mode) about
        to be opened for the first time, with the files their first open would make, in one
        child process (classic.directories): made by the open, on the loop, each one held it
        for tens of ms on a busy disk (thousands of partitions created at once). Those of
        classic logs only; an existing directory is left as it is. A deletion of one of them
        meanwhile waits for the job, so that what it deletes is not made after."""
        paths = {(topic, partition): os.fspath(self.partition_dir(topic, partition))
                 for topic, partition, mode in logs if self.engines.get(mode) is ClassicLog}
        if not paths:
            return
        for key in paths:
            if (moving := self._moving.get(key)) is not None:  # its old directory goes first
                await asyncio.to_thread(moving.wait)
        job = asyncio.ensure_future(asyncio.to_thread(make_log_dirs, list(paths.values())))
        for key in paths:
            self._making[key] = job

        def done(_: asyncio.Future) -> None:
            for key in paths:
                if self._making.get(key) is job:
                    del self._making[key]

        job.add_done_callback(done)
        await asyncio.shield(job)  # cancelled or not, the job runs on: deletions wait for it

    async def _made(self, topic: str, partition: int) -> None:
        """Once no job is making the partition's directory (make_directories)."""
        job = self._making.get((topic, partition))
        if job is not None:
            await asyncio.wait([job])

    def open(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, opened (and recovered if needed) on first use."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            return log
        log = self.engine_log(topic, partition, config, config.storage_mode)
        log.on_flush_pending = self._note_flush_pending
        self._logs[key] = log
        return log

    def engine_log(self, topic: str, partition: int, config: LogConfig,
                   mode: str) -> PartitionLog:
        """The partition's log of the engine of ``mode``, opened on first use, whether or
        not it serves the partition yet (the next span of a live mode switch)."""
        key = (topic, partition)
        by_mode = self._engine_logs.setdefault(key, {})
        log = by_mode.get(mode)
        if log is not None:
            return log
        factory = self.engines.get(mode)
        if factory is None:
            raise InvalidConfig(
                f"kipper.storage.mode={mode!r} of {topic} has no storage engine "
                f"in this broker (available: {', '.join(sorted(self.engines))})")
        if not by_mode:
            moving = self._moving.get(key)
            if moving is not None:
                # A partition of the same name deleted moments ago (the topic made again):
                # its old directory must be gone before this one is made. Rare and short.
                moving.wait()
            for old in self._detached.get(key, ()):
                old.release_directory()  # a deleted log of the same name not yet removed
        log = by_mode[mode] = factory(
            topic, partition, config, self.partition_dir(topic, partition),
            clean_recovery_point=self.clean_shutdown.take(topic, partition))
        if not is_internal_topic(topic):
            log.disk_space = self.disk_space
        return log

    def open_spans(self, topic: str, partition: int, config: LogConfig,
                   spans: list[tuple[str, int, bool]]) -> PartitionLog:
        """The log of a partition whose storage spans are ``spans``: (mode, base offset,
        whether this broker holds it), oldest first. One span is its engine's log; several
        a SpanChainLog over one log per mode (storage.spans), the same object from call to
        call, whose spans are brought up to date."""
        if len(spans) == 1:
            return self.open(topic, partition, config)
        key = (topic, partition)
        chain = self._logs.get(key)
        if not isinstance(chain, SpanChainLog):
            chain = SpanChainLog(topic, partition, config, [])
            if not is_internal_topic(topic):
                chain.disk_space = self.disk_space
            chain.on_flush_pending = self._note_flush_pending
            self._logs[key] = chain
        chain.spans = [Span(mode, base, self.engine_log(topic, partition, config, mode)
                            if held else None) for mode, base, held in spans]
        for log in chain.held_logs():
            # Its flushes are the chain's: the flush loop flushes the logs it serves.
            log.on_flush_pending = lambda _, chain=chain: self._note_flush_pending(chain)
        chain.skip_gaps()
        return chain

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    async def delete_partition(self, topic: str, partition: int) -> None:
        """Remove the partition's data, whether or not its log is open."""
        log = await self._detach_for_deletion((topic, partition))
        if log is not None:
            await self.delete_detached(log)
        elif (doomed := move_aside_for_deletion(self.partition_dir(topic, partition))) is not None:
            TRASH.add(doomed)

    async def _detach_for_deletion(self, key: tuple[str, int]) -> PartitionLog | None:
        """``detach`` the partition to delete it (its log, None if not open), once no job is
        making its directory or renaming an older one aside (deleted again before that
        child is done)."""
        if (moving := self._moving.get(key)) is not None:
            await asyncio.to_thread(moving.wait)
        log = self.detach(*key)
        self.clean_shutdown.take(*key)  # never opened: its entry goes with it
        await self._made(*key)
        return log

    async def delete_unopened(self, partitions: list[tuple[str, int]]) -> None:
        """``delete_partition`` of partitions whose logs were never opened here (a topic
        deleted soon after it was created), their directories renamed aside by one child
        process: renamed on the event loop, one at a time, a rename waited up to half a
        second for a busy file system (``rm -rf`` on every broker at once), and the loop
        with it. An open of one of them meanwhile waits for the child."""
        moves: dict[tuple[str, int], tuple[str, str]] = {}
        for key in partitions:
            log = await self._detach_for_deletion(key)
            if log is not None:  # opened meanwhile
                await self.delete_detached(log)
                continue
            directory = self.partition_dir(*key)
            moves[key] = (os.fspath(directory), os.fspath(deletion_name(directory)))
        if not moves:
            return
        done = threading.Event()
        for key in moves:
            self._moving[key] = done

        def move() -> None:
            try:
                move_log_dirs_aside(list(moves.values()))
            finally:
                done.set()

        try:
            await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(move)))
        finally:
            await asyncio.to_thread(done.wait)  # cancelled or not: the child runs on
            for key in moves:
                if self._moving.get(key) is done:
                    del self._moving[key]
            for _, doomed in moves.values():
                TRASH.add(Path(doomed))  # one never made is skipped by ``rm -rf``

    def detach(self, topic: str, partition: int) -> PartitionLog | None:
        """Stop serving the partition's log (None if not open), to be deleted later with
        ``delete_detached``; a new log of the same name may be opened meanwhile (the old
        one then gives up its directory first)."""
        key = (topic, partition)
        self._flush_pending.pop(key, None)
        self.cleaner.forget(key)
        log = self._logs.pop(key, None)
        self._engine_logs.pop(key, None)
        if log is not None:
            self._detached.setdefault(key, []).append(log)
        return log

    async def delete_detached(self, log: PartitionLog) -> None:
        key = (log.topic, log.partition)
        try:
            await self._made(*key)
            await log.delete()
        finally:
            detached = self._detached.get(key, [])
            if log in detached:
                detached.remove(log)
            if not detached:
                self._detached.pop(key, None)

    async def flush_all(self) -> None:
        for log in list(self._logs.values()):
            await log.flush()

    async def close_all(self) -> None:
        """Close every log durably with one sync of the file system, rather than several
        fsyncs per log (seconds with 2,000 partitions): write out every log, sync, then
        record them all as closed cleanly in one checkpoint and one marker for the data
        directory (storage.classic.clean_shutdown), which the next open trusts only with
        the data durable. A log that failed to close is left out: it will be recovered."""
        closed: dict[tuple[str, int], int] = {}

        async def close(key: tuple[str, int], log: PartitionLog) -> None:
            try:
                await log.close(sync=False)
                if (end := log.closed_log_end()) is not None:
                    closed[key] = end
            except Exception:
                # One failing partition must not leave the others without a clean shutdown.
                logger.exception("closing %s-%s failed", *key)

        while self._logs:
            batch = [self._logs.popitem() for _ in range(min(CLOSING_AT_ONCE, len(self._logs)))]
            for key, _ in batch:
                self._flush_pending.pop(key, None)
            await asyncio.gather(*(close(key, log) for key, log in batch))
        await asyncio.to_thread(sync_file_system, self.data_dir)
        self.clean_shutdown.write(closed)
        await TRASH.emptied()

    async def run_retention(self, interval_s: float) -> None:
        """Apply retention to every log, whatever its engine, every ``interval_s`` (the
        broker's log.retention.check.interval.ms; run as a task; cancel to stop)."""
        while True:
            await asyncio.sleep(interval_s)
            now = _now_ms()
            for key, log in list(self._logs.items()):
                if self._logs.get(key) is not log:
                    continue  # deleted or closed while an earlier log was being processed
                await self._retain(f"{key[0]}-{key[1]}", log.enforce_retention, now)
            for mode, retention in list(self._engine_retention.items()):
                await self._retain(f"the {mode} logs", retention, now)

    async def _retain(self, what: str, retention: EngineRetention, now_ms: int) -> None:
        try:
            freed = await retention(now_ms)
        except Exception:
            logger.exception("retention of %s failed", what)
            return
        if freed:
            logger.info("retention freed %d bytes of %s", freed, what)

    async def run_producer_expiration(self, interval_s: float, expiration_ms: int) -> None:
        """Forget idempotent producers idle for ``expiration_ms`` in every log, every
        ``interval_s`` (producer.id.expiration.ms / .check.interval.ms; run as a task), so
        producer state does not grow with every producer that ever wrote."""
        while True:
            await asyncio.sleep(interval_s)
            now = _now_ms()
            expired = 0
            for log in list(self._logs.values()):
                expired += log.expire_producers(now, expiration_ms)
            for expire in list(self._engine_producer_expiration.values()):
                try:
                    expired += await expire(now, expiration_ms)
                except Exception:
                    logger.exception("producer expiration failed")
            if expired:
                logger.info("forgot %d producers idle for %d ms", expired, expiration_ms)

    async def run_cleaner(self) -> None:
        """Compact the logs of compacted topics (storage.log_cleaner; run as a task)."""
        await self.cleaner.run()

    def _note_flush_pending(self, log: PartitionLog) -> None:
        self._flush_pending[(log.topic, log.partition)] = log

    async def run_flush(self, interval_s: float) -> None:
        """Flush every log whose unflushed data flush.ms wants on disk by now, checking every
        ``interval_s``."""
        while True:
            await asyncio.sleep(interval_s)
            now = _now_ms()
            for key, log in list(self._flush_pending.items()):
                deadline = log.flush_deadline_ms()
                if self._logs.get(key) is not log or deadline is None:
                    self._flush_pending.pop(key, None)  # gone, or flushed by an append
                    continue
                if now < deadline:
                    continue
                try:
                    await log.flush()
                except DiskFull:
                    continue  # reported by storage.disk_space, not once per partition and tick
                except Exception:
                    logger.exception("flush of %s-%s failed", *key)
                    continue
                self._flush_pending.pop(key, None)
