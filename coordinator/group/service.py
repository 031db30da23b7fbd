"""The group coordinator as the request handlers see it (Kafka's GroupCoordinatorService).

It answers whether this broker coordinates a group at all (active, leading the group's
partition of ``__consumer_offsets``, done loading it) and hands the request to the part
that runs it: ``classic`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), ``consumer``
(ConsumerGroupHeartbeat, KIP-848) or ``offsets`` (OffsetCommit, TxnOffsetCommit,
OffsetFetch, OffsetDelete, and the transaction markers that decide transactional commits).
``loader`` follows leadership of the partitions.

The group kinds (``kind.GroupKind``: classic, consumer, and share groups once the broker
adds them with ``add_kind``) sit in one registry, ``kinds``: a group id belongs to one of them, and listing, loading, unloading and deleting go through
it, so another kind plugs in by joining it. An empty group changes kind when a member of
the other protocol arrives, keeping its offsets (Kafka's upgrade and downgrade of empty
groups). The writes it starts in the background finish before ``stop`` returns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ..group_config import ConsumerGroupSettings, GroupConfig
from ..internal_topic import OFFSETS_TOPIC
from .classic import ClassicGroupManager, JoinRequest, JoinResult, SyncResult
from ..partition_loader import PartitionLoader
from .consumer import ConsumerGroupManager, HeartbeatRequest, HeartbeatResult
from .consumer_group import ConsumerGroup, JOIN_EPOCH
from .kind import GroupKind, ListedGroup
from .loader import LoadedPartition, replay
from .offsets import OffsetCommit, OffsetManager, TopicPartition
from ..coordinator_log import CoordinatorLog, CoordinatorLogError, LogRecord, TxnProducer
from .rack_aware import NoTopics, TopicsView
from .state import CommittedOffset, Group, GroupState
from .timer import AsyncioTimer, Timer

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: CoordinatorLog, timer: Timer | None = None,
                 topics: TopicsView | None = None,
                 consumer_group_settings: Callable[[str], ConsumerGroupSettings] | None = None,
                 ) -> None:
        """``consumer_group_settings``: each consumer group's group configs (none: every group
        follows ``config``)."""
        self.config = config
        self.store = store
        self._background: set[asyncio.Task] = set()
        self._active = False
        self.timer = timer = timer or AsyncioTimer()
        self.topics = topics or NoTopics()
        self.classic = ClassicGroupManager(config, store, timer, self._spawn)
        self.consumer = ConsumerGroupManager(
            config, store, timer, self._spawn, self.topics,
            consumer_group_settings or (lambda group_id: config.consumer_group_defaults()))
        self.kinds: tuple[GroupKind, ...] = (self.classic, self.consumer)
        self.offsets = OffsetManager(self.classic, self.consumer, store, timer)
        self.loader: PartitionLoader[LoadedPartition] = PartitionLoader(
            OFFSETS_TOPIC, store, self._spawn, lambda partition: replay(store, partition),
            self._on_loaded, self._unload)

    def add_kind(self, kind: GroupKind) -> None:
        """A kind built outside the coordinator (KIP-932 share groups, which need the broker's
        view of racks) joins the registry."""
        self.kinds += (kind,)

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

    def _unload(self, partition: int) -> None:
        for kind in self.kinds:
            kind.unload_partition(partition)

    def _on_loaded(self, partition: int, loaded: LoadedPartition) -> None:
        for kind in self.kinds:
            kind.restore(loaded)
        self.offsets.restore(loaded.offsets, loaded.pending)

    def kind_of(self, group_id: str) -> GroupKind | None:
        return next((kind for kind in self.kinds if kind.owns(group_id)), None)

    def _keeps_no_offsets(self, group_id: str) -> bool:
        """A group of a kind other than classic and consumer (a share group) has the id:
        KIP-848 heartbeats and offset commits for it get GROUP_ID_NOT_FOUND, as Kafka's."""
        return self.kind_of(group_id) not in (None, self.classic, self.consumer)

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
        kind = self.kind_of(request.group_id) if error is None else None
        if kind is self.consumer:
            error = await self._downgrade(request.group_id)
        elif kind not in (None, self.classic):
            error = ErrorCode.inconsistent_group_protocol  # a share group's id, as Kafka
        if error is not None:
            return JoinResult(error, request.member_id)
        return await self.classic.join_group(request)

    async def _downgrade(self, group_id: str) -> ErrorCode | None:
        """A classic member joins a consumer group: an empty one becomes a classic group
        with its offsets; kipper does not convert groups with members (Kafka's online
        migration), they answer INCONSISTENT_GROUP_PROTOCOL as Kafka's do without it."""
        group = self.consumer.groups[group_id]
        if group.members:
            return ErrorCode.inconsistent_group_protocol
        tombstones = self.consumer.delete(group_id)
        classic = self.classic.group_or_new(group_id)
        classic.offsets, classic.pending_offsets = group.offsets, group.pending_offsets
        log.info("group %s downgraded from the consumer to the classic protocol", group_id)
        return await self.append_group_records(group_id, tombstones)

    async def append_group_records(self, group_id: str, records: list[LogRecord]
                                   ) -> ErrorCode | None:
        """Write records of a group to its partition; the error if that failed."""
        try:
            await self.store.append(self.store.partition_for(group_id), records,
                                    self.timer.now_ms())
        except CoordinatorLogError as e:
            log.warning("writing to group %s failed: %s", group_id, e)
            return e.error_code
        return None

    # -- the consumer group protocol (KIP-848) ----------------------------------------------

    async def consumer_group_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        error = self._group_error(request.group_id)
        if error is not None:
            return HeartbeatResult(error)
        if self._keeps_no_offsets(request.group_id):
            return HeartbeatResult(ErrorCode.group_id_not_found,
                                   f"Group {request.group_id} is not a consumer group.")
        classic = self.classic.groups.get(request.group_id)
        if classic is None:
            return await self.consumer.heartbeat(request)
        refused = self.consumer.request_error(request)
        if refused is not None:
            return refused
        if request.member_epoch != JOIN_EPOCH or not classic.in_state(GroupState.EMPTY):
            # Kafka converts a classic group with members online; kipper does not.
            return HeartbeatResult(ErrorCode.group_id_not_found,
                                   f"Group {request.group_id} is not a consumer group.")
        # An empty classic group becomes a consumer group, keeping its offsets.
        tombstones = self.classic.delete(request.group_id)
        return await self.consumer.heartbeat(request, classic, tombstones)

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, ConsumerGroup | None]:
        """ConsumerGroupDescribe: GROUP_ID_NOT_FOUND unless a consumer group has the id."""
        error = self._group_error(group_id)
        if error is not None:
            return error, None
        group = self.consumer.groups.get(group_id)
        return (ErrorCode.none, group) if group is not None else (
            ErrorCode.group_id_not_found, None)

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
        if error is None and self._keeps_no_offsets(group_id):
            error = ErrorCode.group_id_not_found
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

    def list_groups(self) -> tuple[ErrorCode, list[ListedGroup]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        error = (ErrorCode.coordinator_load_in_progress if self.loader.is_loading
                 else ErrorCode.none)
        return error, [group for kind in self.kinds for group in kind.listed()]

    def describe_group(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        """DescribeGroups, of classic groups: GROUP_ID_NOT_FOUND for a group of another
        kind (as Kafka: "not a classic group")."""
        error = self._group_error(group_id)
        if error is None and self.kind_of(group_id) not in (None, self.classic):
            error = ErrorCode.group_id_not_found
        return (error, None) if error is not None else (ErrorCode.none, self.groups.get(group_id))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        deleted: list[tuple[str, list[TopicPartition], list[LogRecord]]] = []
        for group_id in group_ids:
            error = self._group_error(group_id)
            kind = self.kind_of(group_id)
            if error is None and kind is None:
                error = ErrorCode.group_id_not_found
            elif error is None:
                error = kind.deletion_error(group_id)
            if error is None:
                offsets = sorted(self.offsets.group_offset_partitions(group_id))
                deleted.append((group_id, offsets, kind.delete(group_id)))
            results[group_id] = error or ErrorCode.none
        for group_id, offsets, tombstones in deleted:
            error = await self.offsets.write_tombstones(group_id, offsets, tombstones)
            if error is not None:
                results[group_id] = error
            else:
                log.info("deleted group %s", group_id)
        return results
