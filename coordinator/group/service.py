"""The group coordinator as the request handlers see it (Kafka's GroupCoordinatorService).

It answers whether this broker coordinates a group at all (active, leading the group's
partition of ``__consumer_offsets``, done loading it) and hands the request to the part
that runs it: ``classic`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) or ``offsets``
(OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, and the transaction markers that
decide transactional commits). ``loader`` follows leadership of the partitions.
The writes it starts in the background finish before ``stop`` returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ..group_config import GroupConfig
from ..internal_topic import OFFSETS_TOPIC
from .classic import ClassicGroupManager, JoinRequest, JoinResult, SyncResult
from ..partition_loader import PartitionLoader
from .loader import LoadedPartition, replay
from .offsets import OffsetCommit, OffsetManager, TopicPartition
from ..coordinator_log import CoordinatorLog, TxnProducer
from .state import CommittedOffset, Group, GroupState
from .timer import AsyncioTimer, Timer

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: CoordinatorLog, timer: Timer | None = None
                 ) -> None:
        self.config = config
        self.store = store
        self._background: set[asyncio.Task] = set()
        self._active = False
        timer = timer or AsyncioTimer()
        self.classic = ClassicGroupManager(config, store, timer, self._spawn)
        self.offsets = OffsetManager(self.classic, store, timer)
        self.loader: PartitionLoader[LoadedPartition] = PartitionLoader(
            OFFSETS_TOPIC, store, self._spawn, lambda partition: replay(store, partition),
            self._on_loaded, self.classic.unload_partition)

    @property
    def groups(self) -> dict[str, Group]:
        return self.classic.groups

    # -- lifecycle and partition ownership -------------------------------------------------

    async def start(self) -> None:
        self._active = True
        self.loader.sync()

    async def stop(self) -> None:
        """Answer every waiting request and drop all groups; pending writes finish first."""
        self._active = False
        self.loader.unload_all()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def on_metadata_change(self) -> None:
        """Call after every metadata change has reached the replica manager: leadership of
        __consumer_offsets partitions may have moved."""
        if self._active:
            self.loader.sync()

    def _on_loaded(self, partition: int, loaded: LoadedPartition) -> None:
        for group_id, value in loaded.groups.items():
            self.classic.restore_group(group_id, value)
        self.offsets.restore(loaded.offsets, loaded.pending)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _group_error(self, group_id: str) -> ErrorCode | None:
        """Why this broker cannot serve ``group_id`` now, if it cannot."""
        if not self._active:
            return ErrorCode.coordinator_not_available
        return self.loader.serving_error(self.store.partition_for(group_id))

    # -- the classic group protocol ---------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        error = self._group_error(request.group_id)
        if error is not None:
            return JoinResult(error, request.member_id)
        return await self.classic.join_group(request)

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        error = self._group_error(group_id)
        if error is not None:
            return SyncResult(error)
        return await self.classic.sync_group(group_id, generation_id, member_id,
                                             group_instance_id, protocol_type, protocol_name,
                                             assignments)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        error = self._group_error(group_id)
        if error is not None:
            return error
        return self.classic.heartbeat(group_id, generation_id, member_id, group_instance_id)

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Per leaving (member id, group instance id): its error; plus a group-level one."""
        error = self._group_error(group_id)
        if error is not None:
            return error, []
        return ErrorCode.none, self.classic.leave_group(group_id, leaving)

    # -- offsets ----------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None,
                             offsets: dict[TopicPartition, OffsetCommit],
                             transaction: TxnProducer | None = None
                             ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit, or with ``transaction`` TxnOffsetCommit: then the offsets are
        pending until ``complete_transaction``."""
        error = self._group_error(group_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return await self.offsets.commit_offsets(group_id, generation_id, member_id,
                                                 group_instance_id, offsets, transaction)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's commit or abort marker is written to ``partition`` of
        __consumer_offsets (WriteTxnMarkers calls this once it is): the transaction's pending
        offsets in the partition's groups become committed, or are dropped.

        Nothing to do unless the partition is loaded here: a partition still loading
        replays the marker (loading reads the partition up to its end as it is when loading
        ends), and one this broker does not coordinate is replayed, marker included, by
        whichever broker loads it."""
        if self._active and self.loader.is_loaded(partition):
            self.offsets.complete_transaction(partition, producer_id, commit)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (None: every partition the group has)."""
        error = self._group_error(group_id)
        if error is not None:
            return error, {}
        return ErrorCode.none, self.offsets.fetch_offsets(group_id, partitions)

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with transactional offsets not decided yet: OffsetFetch
        with require_stable answers them UNSTABLE_OFFSET_COMMIT."""
        return self.offsets.pending_partitions(group_id)

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error = self._group_error(group_id)
        if error is not None:
            return error, {}
        return await self.offsets.delete_offsets(group_id, partitions)

    # -- administration ---------------------------------------------------------------------

    def list_groups(self) -> tuple[ErrorCode, list[Group]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        error = (ErrorCode.coordinator_load_in_progress if self.loader.is_loading
                 else ErrorCode.none)
        return error, list(self.groups.values())

    def describe_group(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        error = self._group_error(group_id)
        return (error, None) if error is not None else (ErrorCode.none, self.groups.get(group_id))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        deleted: list[Group] = []
        for group_id in group_ids:
            error = self._group_error(group_id)
            group = self.groups.get(group_id)
            if error is None and group is None:
                error = ErrorCode.group_id_not_found
            elif error is None and not group.in_state(GroupState.EMPTY):
                error = ErrorCode.non_empty_group
            if error is None:
                self.classic.kill(group)
                deleted.append(group)
            results[group_id] = error or ErrorCode.none
        for group in deleted:
            error = await self.offsets.write_tombstones(
                group.group_id, sorted(group.offset_partitions()), with_group=True)
            if error is not None:
                results[group.group_id] = error
            else:
                log.info("deleted group %s", group.group_id)
        return results
