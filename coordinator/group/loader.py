"""Which ``__consumer_offsets`` partitions this coordinator serves, and loading them
(Kafka's CoordinatorLoader with the replay of its group and offset managers).

When this broker becomes the leader of a partition, the partition is replayed to the latest
metadata of each group and the latest commit of each offset in it; requests for its groups
get COORDINATOR_LOAD_IN_PROGRESS until then. When it stops leading, the groups are dropped.

Offsets committed in a transaction (a transactional batch of the producer) stay pending
until the producer's marker: a commit marker makes them committed unless a later commit of
the same partition is, an abort marker drops them (Kafka's OffsetMetadataManager.replay and
replayEndTransactionMarker). A tombstone deletes an offset's pending commits too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..state_machine import Applier
from protocol.records import NO_PRODUCER_ID

from ..coordinator_log import CoordinatorLog, LoggedMarker, LoggedRecord
from .records import (
    GroupValue,
    MalformedGroupRecord,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from .state import CommittedOffset, keep_later

log = logging.getLogger(__name__)
# (group id, topic, partition) of a committed offset.
OffsetSlot = tuple[str, str, int]
Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task]


@dataclass(slots=True)
class LoadedPartition:
    """The latest metadata of each group and offset of each (group, topic, partition) in a
    partition's records, a tombstone deleting: the state machine (coordinator.state_machine)
    that loading replays the partition into."""

    partition: int
    groups: dict[str, GroupValue] = field(default_factory=dict)
    offsets: dict[OffsetSlot, CommittedOffset] = field(default_factory=dict)
    # Offsets of transactions without a marker yet, by producer id.
    pending: dict[int, dict[OffsetSlot, CommittedOffset]] = field(default_factory=dict)
    next_offset: int = 0

    def apply(self, offset: int, record: LoggedRecord | LoggedMarker) -> None:
        self.next_offset = offset + 1
        if isinstance(record, LoggedMarker):
            self._end_transaction(record.producer_id, record.commit)
            return
        try:
            decoded = decode_key(record.key or b"")
            if isinstance(decoded, OffsetKey):
                slot = (decoded.group_id, decoded.topic, decoded.partition)
                if record.value is None:
                    self.offsets.pop(slot, None)
                    for pending in self.pending.values():
                        pending.pop(slot, None)
                    return
                v = decode_offset_value(record.value)
                committed = CommittedOffset(v.offset, v.leader_epoch, v.metadata,
                                            v.commit_timestamp, offset)
                if record.producer_id == NO_PRODUCER_ID:
                    self.offsets[slot] = committed
                else:
                    self.pending.setdefault(record.producer_id, {})[slot] = committed
            elif record.value is None:
                self.groups.pop(decoded.group_id, None)
            else:
                self.groups[decoded.group_id] = decode_group_value(record.value)
        except MalformedGroupRecord as e:
            log.warning("__consumer_offsets-%d offset %d: skipping record: %s", self.partition,
                        offset, e)

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        pending = self.pending.pop(producer_id, {})
        if commit:
            for slot, committed in pending.items():
                keep_later(self.offsets, slot, committed)


async def replay(topic_log: CoordinatorLog, partition: int) -> LoadedPartition:
    """The partition's records, replayed from its start."""
    loaded = LoadedPartition(partition)
    applier = Applier(loaded)
    async for record in topic_log.replay(partition):
        applier.apply([(record.offset, record)])
    return loaded


class PartitionLoader:
    """Follows leadership of the partitions: loads the ones this broker leads and unloads
    the others, telling the coordinator through ``on_loaded`` and ``on_unloaded``."""

    def __init__(self, topic_log: CoordinatorLog, spawn: Spawn,
                 on_loaded: Callable[[int, LoadedPartition], None],
                 on_unloaded: Callable[[int], None]) -> None:
        self.topic_log = topic_log
        self.spawn = spawn
        self.on_loaded = on_loaded
        self.on_unloaded = on_unloaded
        self._loaded: set[int] = set()
        self._loading: dict[int, asyncio.Task] = {}

    def is_loaded(self, partition: int) -> bool:
        return partition in self._loaded

    @property
    def is_loading(self) -> bool:
        return bool(self._loading)

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
            loaded = await replay(self.topic_log, partition)
        except Exception:
            log.exception("loading groups of __consumer_offsets-%d failed", partition)
            self._loading.pop(partition, None)
            return
        self.on_loaded(partition, loaded)
        self._loading.pop(partition, None)
        self._loaded.add(partition)
        if loaded.groups or loaded.offsets or loaded.pending:
            log.info("loaded %d groups, %d offsets and %d open transactions of "
                     "__consumer_offsets-%d in %.2f s", len(loaded.groups), len(loaded.offsets),
                     len(loaded.pending), partition, time.monotonic() - started)

    def _unload(self, partition: int) -> None:
        loading = self._loading.pop(partition, None)
        if loading is not None:
            loading.cancel()
        self._loaded.discard(partition)
        self.on_unloaded(partition)
