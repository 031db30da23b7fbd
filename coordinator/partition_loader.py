"""Which partitions of a coordinator's internal topic this broker serves, and loading them
(Kafka's CoordinatorLoader): shared by the group and the transaction coordinators.

When this broker becomes the leader of a partition, the coordinator's ``load`` replays it
(``replay_into``: its records applied in order to a ``StateMachine``); requests for its keys
get COORDINATOR_LOAD_IN_PROGRESS until then. When it stops leading, the keys are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

from kio.schema.errors import ErrorCode

from .coordinator_log import CoordinatorLog
from .state_machine import Applier, StateMachine

log = logging.getLogger(__name__)
Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task]
Loaded = TypeVar("Loaded")
Machine = TypeVar("Machine", bound=StateMachine)


async def replay_into(topic_log: CoordinatorLog, partition: int, machine: Machine) -> Machine:
    """``machine`` with every record of ``partition`` applied, from its start."""
    applier = Applier(machine)
    async for record in topic_log.replay(partition):
        applier.apply([(record.offset, record)])
    return machine


class PartitionLoader(Generic[Loaded]):
    """Follows leadership of the partitions of ``topic``: loads the ones this broker leads
    and unloads the others, telling the coordinator through ``on_loaded`` and
    ``on_unloaded``."""

    def __init__(self, topic: str, topic_log: CoordinatorLog, spawn: Spawn,
                 load: Callable[[int], Awaitable[Loaded]],
                 on_loaded: Callable[[int, Loaded], None],
                 on_unloaded: Callable[[int], None]) -> None:
        self.topic = topic
        self.topic_log = topic_log
        self.spawn = spawn
        self.load = load
        self.on_loaded = on_loaded
        self.on_unloaded = on_unloaded
        self._loaded: set[int] = set()
        self._loading: dict[int, asyncio.Task] = {}

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

    def serving_error(self, partition: int) -> ErrorCode | None:
        """Why this broker cannot serve the keys of ``partition`` now, if it cannot."""
        if not self.topic_log.is_local_leader(partition):
            return ErrorCode.not_coordinator
        if not self.is_loaded(partition):
            return ErrorCode.coordinator_load_in_progress
        return None

    def sync(self) -> None:
        """Load the partitions this broker now leads, unload those it no longer leads."""
        led = self.topic_log.led_partitions()
        for partition in led - self._loaded - set(self._loading):
            self._loading[partition] = self.spawn(self._load(partition))
        for partition in (self._loaded | set(self._loading)) - led:
            self._unload(partition)

    def unload_all(self) -> None:
        for partition in self._loaded | set(self._loading):
            self._unload(partition)

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            loaded = await self.load(partition)
        except Exception:
            log.exception("loading %s-%d failed", self.topic, partition)
            self._loading.pop(partition, None)
            return
        self.on_loaded(partition, loaded)
        self._loading.pop(partition, None)
        self._loaded.add(partition)
        log.debug("loaded %s-%d in %.2f s", self.topic, partition, time.monotonic() - started)

    def _unload(self, partition: int) -> None:
        loading = self._loading.pop(partition, None)
        if loading is not None:
            loading.cancel()
        self._loaded.discard(partition)
        self.on_unloaded(partition)
