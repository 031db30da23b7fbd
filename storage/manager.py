"""The logs a broker hosts, each opened with the engine its topic's ``kipper.storage.mode``
names. This is the one place a storage mode is resolved to an engine."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from .classic import ClassicLog
from .config import InvalidConfig, LogConfig
from .log import PartitionLog

logger = logging.getLogger(__name__)

# (topic, partition, config, partition directory) -> log. Engines that need more (an object
# store client, the batch coordinator) are registered by the broker as closures over it.
EngineFactory = Callable[[str, int, LogConfig, Path], PartitionLog]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogManager:
    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._last_flush_ms: dict[tuple[str, int], int] = {}
        self.engines: dict[str, EngineFactory] = {"classic": ClassicLog}

    def register_engine(self, mode: str, factory: EngineFactory) -> None:
        self.engines[mode] = factory

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def open(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """The partition's log, opened (and recovered if needed) on first use."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None:
            return log
        factory = self.engines.get(config.storage_mode)
        if factory is None:
            raise InvalidConfig(
                f"kipper.storage.mode={config.storage_mode!r} of {topic} has no storage engine "
                f"in this broker (available: {', '.join(sorted(self.engines))})")
        log = factory(topic, partition, config, self.partition_dir(topic, partition))
        self._logs[key] = log
        self._last_flush_ms[key] = _now_ms()
        return log

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    async def delete_partition(self, topic: str, partition: int) -> None:
        """Remove the partition's data, whether or not its log is open."""
        key = (topic, partition)
        log = self._logs.pop(key, None)
        self._last_flush_ms.pop(key, None)
        if log is not None:
            await log.delete()
        else:
            shutil.rmtree(self.partition_dir(topic, partition), ignore_errors=True)

    async def flush_all(self) -> None:
        for log in list(self._logs.values()):
            await log.flush()

    async def close_all(self) -> None:
        while self._logs:
            key, log = self._logs.popitem()
            self._last_flush_ms.pop(key, None)
            try:
                await log.close()
            except Exception:
                # One failing partition must not leave the others without a clean shutdown.
                logger.exception("closing %s-%s failed", *key)

    async def run_retention(self, interval_s: float) -> None:
        """Apply retention to every log every ``interval_s`` (run as a task; cancel to stop)."""
        while True:
            await asyncio.sleep(interval_s)
            now = _now_ms()
            for key, log in list(self._logs.items()):
                if self._logs.get(key) is not log:
                    continue  # deleted or closed while an earlier log was being processed
                try:
                    freed = await log.enforce_retention(now)
                except Exception:
                    logger.exception("retention of %s-%s failed", *key)
                    continue
                if freed:
                    logger.info("retention freed %d bytes of %s-%s", freed, *key)

    async def run_flush(self, interval_s: float) -> None:
        """Flush every log whose flush.ms has elapsed, checking every ``interval_s``."""
        while True:
            await asyncio.sleep(interval_s)
            now = _now_ms()
            for key, log in list(self._logs.items()):
                if self._logs.get(key) is not log:
                    continue
                if now - self._last_flush_ms.get(key, now) < log.config.flush_ms:
                    continue
                try:
                    await log.flush()
                except Exception:
                    logger.exception("flush of %s-%s failed", *key)
                    continue
                self._last_flush_ms[key] = now
