"""The partition leader's part of a live storage-mode switch (docs/mode-switch.md).

The controller seals the partition (``PartitionInfo.switch_to``, a record of the metadata
log: every broker refuses appends from then on). The leader named by the metadata then,
in order, each step safe to repeat after a crash, by itself or by the next leader:

1. waits until every append it took is committed (``Partition.drain``: a classic leader's
   high watermark at its log end; diskless appends are ordered by the batch coordinator);
2. seals the newest span's log (``PartitionLog.seal``): where it ends, the boundary, and
   its producers' state (the batch coordinator's ``SealLog`` for a diskless span, which
   refuses commits that arrive after it);
3. starts the next span's log there with that state (``PartitionLog.start_span``: a classic
   log continues at the boundary; the batch coordinator's ``OpenLog`` for diskless);
4. asks the controller to record the new span (``STORAGE_SPAN``), which unseals the
   partition with a new leader epoch: every broker then serves it through the chain of
   spans (storage.spans), appends going to the new one.

The boundary is the same whoever computes it: a sealed classic partition's in-sync replicas
all end at the leader's log end once its high watermark has reached it (the next leader is
one of them), and a sealed diskless log answers the same end to every SealLog.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from protocol.internal import InternalApiKey, JsonBody
from storage.log import PartitionLog, StorageError
from storage.spans import SpanChainLog

from .cluster_metadata import MetadataImage, PartitionInfo
from .partition import Partition, PartitionError

if TYPE_CHECKING:
    from storage.config import LogConfig
    from storage.manager import LogManager

    from .node_client import NodeConnection

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 30.0
REPORT_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.2


class StorageSwitcher:
    def __init__(self, node_id: int, image: MetadataImage, logs: LogManager,
                 controller: NodeConnection | None, log_config: Callable[[str], LogConfig],
                 partition: Callable[[str, int], Partition | None]) -> None:
        self.node_id = node_id
        self.image = image
        self.logs = logs
        self.controller = controller
        self.log_config = log_config
        self.partition = partition
        self._tasks: dict[tuple[str, int], asyncio.Task] = {}
        # When this broker learnt that each sealed partition is (time.monotonic()).
        self._sealed_since: dict[tuple[str, int], float] = {}

    def on_partition(self, info: PartitionInfo) -> None:
        """The partition's metadata changed: drive its switch if it is sealed and this
        broker leads it."""
        key = (info.topic, info.partition)
        if info.switch_to is None:
            since = self._sealed_since.pop(key, None)
            if since is not None:
                # What a switch costs writers: bench/mode_switch_bench.py reads this line.
                log.info("%s-%d took appends again after %.3f s sealed (storage-mode switch)",
                         *key, time.monotonic() - since)
            return
        self._sealed_since.setdefault(key, time.monotonic())
        if info.leader != self.node_id or self.controller is None:
            return
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.create_task(self._switch(key))

    def _info(self, key: tuple[str, int]) -> PartitionInfo | None:
        topic = self.image.topics.get(key[0])
        return topic.partitions.get(key[1]) if topic is not None else None

    async def _switch(self, key: tuple[str, int]) -> None:
        while (info := self._info(key)) is not None and info.switch_to is not None \
                and info.leader == self.node_id:
            try:
                if await self._switch_once(info):
                    return
            except (PartitionError, StorageError, ConnectionError, OSError,
                    asyncio.TimeoutError) as e:
                log.warning("switching %s-%d to %s: %s; retrying", *key, info.switch_to, e)
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _switch_once(self, info: PartitionInfo) -> bool:
        partition = self.partition(info.topic, info.partition)
        if partition is None or partition.leader_epoch != info.leader_epoch \
                or not partition.sealed:
            return False  # this broker has not applied the record yet
        target = info.switch_to
        assert target is not None
        config = self.log_config(info.topic)
        await partition.drain(DRAIN_TIMEOUT_S)
        end = await _newest_span_log(partition.log).seal()
        nxt = self.logs.engine_log(info.topic, info.partition, config, target)
        await nxt.start_span(end)
        log.info("%s-%d sealed at %d: recording its %s span", info.topic, info.partition,
                 end.offset, target)
        return await self._report(info, target, end.offset)

    async def _report(self, info: PartitionInfo, mode: str, base_offset: int) -> bool:
        assert self.controller is not None
        topic = self.image.topics[info.topic]
        answer = await self.controller.call(InternalApiKey.STORAGE_SPAN, JsonBody({
            "broker_id": self.node_id, "topic_id": str(topic.topic_id),
            "partition": info.partition, "leader_epoch": info.leader_epoch, "mode": mode,
            "base_offset": base_offset}), REPORT_TIMEOUT_S)
        error = ErrorCode(answer.value["error_code"])
        if error == ErrorCode.none:
            return True
        log.info("the controller did not record the %s span of %s-%d at %d: %s", mode,
                 info.topic, info.partition, base_offset, error.name)
        return False


def _newest_span_log(log_: PartitionLog) -> PartitionLog:
    return log_.current if isinstance(log_, SpanChainLog) else log_
