"""The classic group protocol, as Kafka's GroupCoordinator runs it.

Groups move Empty -> PreparingRebalance -> CompletingRebalance -> Stable (-> Dead when
deleted or unloaded). A rebalance collects JoinGroups until every known member rejoined or
the rebalance timeout passed (an empty group first waits ``initial_rebalance_delay_ms``,
longer while members keep arriving), then answers them all with a new generation; the
leader's SyncGroup carries the assignment, which is stored before anyone receives it.
Heartbeats keep a member's session alive; a silent member is removed and the group
rebalances. Offsets and group metadata live in ``__consumer_offsets`` (see offsets_store),
replayed whenever this broker becomes the leader of one of its partitions.

Everything runs on the event loop: each request mutates state before its first ``await``,
and timers are loop callbacks, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .group import CONSUMER_PROTOCOL_TYPE, CommittedOffset, Group, GroupState, Member
from .group_config import GroupConfig
from .group_records import (
    GroupKey,
    GroupValue,
    MalformedGroupRecord,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from .offsets_store import OffsetsStore, OffsetsStoreError

log = logging.getLogger(__name__)
# Kafka expires a new member that never completes its first join after 5 minutes.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
TopicPartition = tuple[str, int]

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    # JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED and its id.
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, metadata): only the leader gets them.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    offset: int
    leader_epoch: int
    metadata: str


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: OffsetsStore) -> None:
        self.config = config
        self.store = store
        self.groups: dict[str, Group] = {}
        self._loaded: set[int] = set()
        self._loading: dict[int, asyncio.Task] = {}
        self._background: set[asyncio.Task] = set()
        self._active = False

    # -- lifecycle and partition ownership -------------------------------------------------

    async def start(self) -> None:
        self._active = True
        self.sync_partitions()

    async def stop(self) -> None:
        """Answer every waiting request and drop all groups; pending writes finish first."""
        self._active = False
        for partition in set(self._loaded) | set(self._loading):
            self._unload(partition)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def on_metadata_change(self) -> None:
        """Call after every metadata change has reached the replica manager: leadership of
        __consumer_offsets partitions may have moved."""
        if self._active:
            self.sync_partitions()

    def sync_partitions(self) -> None:
        """Load the partitions this broker now leads, unload those it no longer leads."""
        led = self.store.led_partitions()
        for partition in led - self._loaded - set(self._loading):
            self._loading[partition] = self._spawn(self._load(partition))
        for partition in (self._loaded | set(self._loading)) - led:
            self._unload(partition)

    def _group_error(self, group_id: str) -> ErrorCode | None:
        if not self._active:
            return ErrorCode.coordinator_not_available
        partition = self.store.partition_for(group_id)
        if not self.store.is_local_leader(partition):
            return ErrorCode.not_coordinator
        if partition not in self._loaded:
            return ErrorCode.coordinator_load_in_progress
        return None

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            metadata, offsets = await self._replay(partition)
        except Exception:
            log.exception("loading groups of __consumer_offsets-%d failed", partition)
            self._loading.pop(partition, None)
            return
        for group_id, value in metadata.items():
            self.groups[group_id] = self._restore_group(group_id, value)
        for (group_id, topic, index), committed in offsets.items():
            self._group_or_new(group_id).offsets[(topic, index)] = committed
        self._loading.pop(partition, None)
        self._loaded.add(partition)
        if metadata or offsets:
            log.info("loaded %d groups and %d offsets of __consumer_offsets-%d in %.2f s",
                     len(metadata), len(offsets), partition, time.monotonic() - started)

    async def _replay(self, partition: int) -> tuple[
            dict[str, GroupValue], dict[tuple[str, str, int], CommittedOffset]]:
        """The latest metadata of each group and offset of each (group, topic, partition)
        in the partition's records; a tombstone deletes."""
        metadata: dict[str, GroupValue] = {}
        offsets: dict[tuple[str, str, int], CommittedOffset] = {}
        async for log_offset, key, value in self.store.replay(partition):
            try:
                decoded = decode_key(key or b"")
                if isinstance(decoded, OffsetKey):
                    slot = (decoded.group_id, decoded.topic, decoded.partition)
                    if value is None:
                        offsets.pop(slot, None)
                    else:
                        v = decode_offset_value(value)
                        offsets[slot] = CommittedOffset(v.offset, v.leader_epoch, v.metadata,
                                                        v.commit_timestamp, log_offset)
                elif value is None:
                    metadata.pop(decoded.group_id, None)
                else:
                    metadata[decoded.group_id] = decode_group_value(value)
            except MalformedGroupRecord as e:
                log.warning("__consumer_offsets-%d offset %d: skipping record: %s", partition,
                            log_offset, e)
        return metadata, offsets

    def _restore_group(self, group_id: str, value: GroupValue) -> Group:
        group = Group(group_id, state=STABLE if value.members else EMPTY,
                      generation_id=value.generation_id,
                      protocol_type=value.protocol_type or None,
                      protocol_name=value.protocol_name, leader_id=value.leader_id,
                      state_timestamp=value.state_timestamp)
        for m in value.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms, value.protocol_type,
                            [(value.protocol_name or "", m.subscription)], m.assignment)
            group.add(member)
            self._expect_heartbeat(group, member, member.session_timeout_ms)
        return group

    def _unload(self, partition: int) -> None:
        loading = self._loading.pop(partition, None)
        if loading is not None:
            loading.cancel()
        self._loaded.discard(partition)
        for group in [g for g in self.groups.values()
                      if self.store.partition_for(g.group_id) == partition]:
            self._kill(group)
            for member in group.members.values():
                member.answer_join(JoinResult(ErrorCode.not_coordinator, member.member_id))
                member.answer_sync(SyncResult(ErrorCode.not_coordinator))

    def _kill(self, group: Group) -> None:
        group.cancel_timers()
        group.transition(DEAD, _now_ms())
        del self.groups[group.group_id]

    def _group_or_new(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=_now_ms())
        return group

    def _forget_if_unused(self, group: Group) -> None:
        """Drop a group that a failed request created and nothing refers to."""
        if (group.in_state(EMPTY) and group.generation_id == 0 and not group.members
                and not group.pending_members and not group.offsets):
            group.cancel_timers()
            self.groups.pop(group.group_id, None)

    # -- JoinGroup --------------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        error = self._group_error(request.group_id)
        if error is None and not (self.config.min_session_timeout_ms <= request.session_timeout_ms
                                  <= self.config.max_session_timeout_ms):
            error = ErrorCode.invalid_session_timeout
        group = self.groups.get(request.group_id)
        if error is None and group is None and request.member_id:
            # Only a member without an id may create a group.
            error = ErrorCode.unknown_member_id
        if error is not None:
            return JoinResult(error, request.member_id)
        if group is None:
            group = self._group_or_new(request.group_id)
        answer = asyncio.get_running_loop().create_future()
        if request.member_id:
            self._join_known_member(group, request, answer)
        else:
            self._join_new_member(group, request, answer)
        if group.in_state(PREPARING):
            self._try_complete_join(group)
        if answer.done():
            self._forget_if_unused(group)
        return await answer

    def _join_new_member(self, group: Group, request: JoinRequest,
                         answer: asyncio.Future) -> None:
        if group.in_state(DEAD):
            answer.set_result(JoinResult(ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(request.protocol_type,
                                        [name for name, _ in request.protocols]):
            answer.set_result(JoinResult(ErrorCode.inconsistent_group_protocol))
            return
        member_id = f"{request.group_instance_id or request.client_id}-{uuid.uuid4()}"
        if request.group_instance_id in group.static_members:
            self._rejoin_static_member(group, request, member_id, answer)
        elif request.group_instance_id is None and request.require_known_member_id:
            group.pending_members[member_id] = asyncio.get_running_loop().call_later(
                request.session_timeout_ms / 1000, self._expire_pending_member, group, member_id)
            answer.set_result(JoinResult(ErrorCode.member_id_required, member_id))
        else:
            self._add_member_and_rebalance(group, request, member_id, answer)

    def _join_known_member(self, group: Group, request: JoinRequest,
                           answer: asyncio.Future) -> None:
        member_id = request.member_id

        def fail(error: ErrorCode) -> None:
            answer.set_result(JoinResult(error, member_id))

        if group.in_state(DEAD):
            return fail(ErrorCode.coordinator_not_available)
        if not group.supports_protocols(request.protocol_type,
                                        [name for name, _ in request.protocols]):
            return fail(ErrorCode.inconsistent_group_protocol)
        if member_id in group.pending_members:
            return self._add_member_and_rebalance(group, request, member_id, answer)
        if group.is_static_member_fenced(member_id, request.group_instance_id):
            return fail(ErrorCode.fenced_instance_id)
        if member_id not in group.members or (
                request.group_instance_id is not None
                and request.group_instance_id not in group.static_members):
            return fail(ErrorCode.unknown_member_id)
        member = group.members[member_id]
        unchanged = member.matches(request.protocols)
        if group.in_state(COMPLETING) and unchanged:
            # A retry of a JoinGroup whose answer was lost: answer it again.
            return answer.set_result(self._join_result(group, member))
        if group.in_state(STABLE) and unchanged and member_id != group.leader_id:
            # Nothing changed for a follower: it may go straight to SyncGroup.
            return answer.set_result(self._join_result(group, member))
        # A changed member, or the leader (which rejoins to have topic metadata changes
        # reassigned), forces a rebalance; during one, this is simply the member rejoining.
        self._wait_for_join(member, request, answer)
        self._maybe_prepare_rebalance(group, f"member {member_id} rejoined")

    def _rejoin_static_member(self, group: Group, request: JoinRequest, member_id: str,
                              answer: asyncio.Future) -> None:
        """A static member restarted: it takes over its old place under a new member id."""
        old_member_id = group.static_members[request.group_instance_id]
        old_leader_id = group.leader_id
        member = group.members[old_member_id]
        # Whoever still waits with the old member id is a zombie of the previous instance.
        member.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        member.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        group.replace_static_member(request.group_instance_id, member_id)
        self._wait_for_join(member, request, answer)
        self._expect_heartbeat(group, member, member.session_timeout_ms)
        if group.in_state(STABLE) and group.select_protocol() == group.protocol_name:
            # The assignment stays valid: no rebalance. The old leader id is returned so
            # that this member, even if it was the leader, does not compute an assignment
            # a stable group would never distribute.
            self._spawn(self._confirm_static_rejoin(group, member, old_leader_id))
        elif group.in_state(STABLE, COMPLETING):
            self._prepare_rebalance(group, f"static member {request.group_instance_id} "
                                           "rejoined with new metadata")

    async def _confirm_static_rejoin(self, group: Group, member: Member,
                                     old_leader_id: str | None) -> None:
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await self._store_group(group, assignment)
        if error is not None:
            member.answer_join(JoinResult(error, member.member_id))
            return
        member.answer_join(JoinResult(
            ErrorCode.none, member.member_id, group.generation_id, group.protocol_type,
            group.protocol_name, old_leader_id or ""))

    def _add_member_and_rebalance(self, group: Group, request: JoinRequest, member_id: str,
                                  answer: asyncio.Future) -> None:
        member = Member(member_id, request.group_instance_id, request.client_id,
                        request.client_host, request.rebalance_timeout_ms,
                        request.session_timeout_ms, request.protocol_type,
                        list(request.protocols), join_waiter=answer, is_new=True)
        if group.in_state(PREPARING) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        # A new member cannot heartbeat before its first generation, so its session does
        # not run yet; this only bounds how long a join from a vanished client is kept.
        self._expect_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding member {member_id}")

    def _wait_for_join(self, member: Member, request: JoinRequest,
                       answer: asyncio.Future) -> None:
        # A previous JoinGroup of the same member (e.g. from a connection it gave up on)
        # is told to rejoin; this newer one is the one that gets the generation.
        member.answer_join(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = list(request.protocols)
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.join_waiter = answer

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is None:
            return
        if group.in_state(PREPARING):
            self._try_complete_join(group)
        self._forget_if_unused(group)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        return JoinResult(ErrorCode.none, member.member_id, group.generation_id,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          tuple(group.member_metadata()) if is_leader else ())

    # -- rebalancing ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.in_state(COMPLETING):
            # The assignment being computed is for a generation that will never be.
            self._propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None
        if group.in_state(EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            self._schedule_join(group, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms, None)
        group.transition(PREPARING, _now_ms())
        log.info("preparing to rebalance group %s in generation %d (%s)", group.group_id,
                 group.generation_id, reason)

    def _schedule_join(self, group: Group, delay_ms: int,
                       initial_delay_left_ms: int | None) -> None:
        """Complete the join phase after ``delay_ms``; during the initial delay it may not
        complete earlier, and it is extended while new members keep arriving."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.in_initial_delay = initial_delay_left_ms is not None
        group.join_timer = asyncio.get_running_loop().call_later(
            delay_ms / 1000, self._on_join_timer, group, initial_delay_left_ms)

    def _on_join_timer(self, group: Group, initial_delay_left_ms: int | None) -> None:
        group.join_timer = None
        if initial_delay_left_ms and group.new_member_added:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, initial_delay_left_ms)
            self._schedule_join(group, delay, initial_delay_left_ms - delay)
            return
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if not group.in_initial_delay and group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.in_initial_delay = False
        for member in [m for m in group.members.values()
                       if not m.awaiting_join and m.group_instance_id is None]:
            log.info("removing member %s of group %s: it did not rejoin", member.member_id,
                     group.group_id)
            self._remove_member(group, member)
        if group.members and not group.maybe_elect_joined_leader():
            # Only static members that have not rejoined are left: wait for them to come
            # back or for their sessions to expire.
            self._schedule_join(group, group.rebalance_timeout_ms, None)
            return
        group.init_next_generation(_now_ms())
        if group.in_state(EMPTY):
            self._spawn(self._store_group(group, {}))
            return
        log.info("group %s stabilized in generation %d with %d members (protocol %s)",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name)
        for member in group.members.values():
            member.answer_join(self._join_result(group, member))
            member.is_new = False
            self._expect_heartbeat(group, member, member.session_timeout_ms)
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms / 1000, self._on_sync_timeout, group,
            group.generation_id)

    def _on_sync_timeout(self, group: Group, generation_id: int) -> None:
        """Members that never sent their SyncGroup in time are removed."""
        group.sync_timer = None
        if generation_id != group.generation_id or not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            log.info("removing member %s of group %s: no SyncGroup in time", member_id,
                     group.group_id)
            self._remove_member(group, group.members[member_id])
        self._prepare_rebalance(group, "members did not sync in time")

    def _sync_received(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync and group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    # -- membership -------------------------------------------------------------------------

    def _expect_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        member.cancel_heartbeat_timer()
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._on_session_timeout, group, member)

    def _on_session_timeout(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # waiting on a rebalance counts as alive; the session restarts after it
        log.info("member %s of group %s: session expired", member.member_id, group.group_id)
        self._remove_member_and_rebalance(group, member, f"session of {member.member_id} expired")

    def _remove_member(self, group: Group, member: Member) -> None:
        member.answer_join(JoinResult(ErrorCode.unknown_member_id))
        member.answer_sync(SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    def _remove_member_and_rebalance(self, group: Group, member: Member, reason: str) -> None:
        self._remove_member(group, member)
        if group.in_state(STABLE, COMPLETING):
            self._prepare_rebalance(group, reason)
        elif group.in_state(PREPARING):
            self._try_complete_join(group)

    # -- SyncGroup --------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str,
                         group_instance_id: str | None, protocol_type: str | None,
                         protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        group, error = self._member_group(group_id, member_id, group_instance_id, generation_id)
        if error is None and protocol_type is not None and protocol_type != group.protocol_type:
            error = ErrorCode.inconsistent_group_protocol
        if error is None and protocol_name is not None and protocol_name != group.protocol_name:
            error = ErrorCode.inconsistent_group_protocol
        if error is None and group.in_state(PREPARING):
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            return SyncResult(error)
        member = group.members[member_id]
        self._sync_received(group, member_id)
        if group.in_state(STABLE):
            self._expect_heartbeat(group, member, member.session_timeout_ms)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        answer = asyncio.get_running_loop().create_future()
        member.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = answer
        if member_id == group.leader_id:
            assignment = {m: assignments.get(m, b"") for m in group.members}
            self._spawn(self._store_assignment(group, assignment))
        return await answer

    async def _store_assignment(self, group: Group, assignment: dict[str, bytes]) -> None:
        generation_id = group.generation_id
        error = await self._store_group(group, assignment)
        if not group.in_state(COMPLETING) or group.generation_id != generation_id:
            return  # a new rebalance started meanwhile; it has told the members
        if error is not None:
            self._propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, "storing the assignment failed")
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
            if member.awaiting_sync:
                member.answer_sync(SyncResult(ErrorCode.none, group.protocol_type,
                                              group.protocol_name, member.assignment))
                self._expect_heartbeat(group, member, member.session_timeout_ms)
        group.transition(STABLE, _now_ms())

    def _propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                member.answer_sync(SyncResult(error))
                self._expect_heartbeat(group, member, member.session_timeout_ms)

    async def _store_group(self, group: Group, assignment: dict[str, bytes]) -> ErrorCode | None:
        value = GroupValue(
            group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
            group.state_timestamp, tuple(
                MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            m.metadata_for(group.protocol_name) if group.protocol_name else b"",
                            assignment.get(m.member_id, b""))
                for m in group.members.values()))
        try:
            await self.store.append(self.store.partition_for(group.group_id), [
                (encode_group_key(GroupKey(group.group_id)), encode_group_value(value))],
                _now_ms())
        except OffsetsStoreError as e:
            log.warning("storing group %s failed: %s", group.group_id, e)
            return e.error_code
        return None

    # -- Heartbeat and LeaveGroup ------------------------------------------------------------

    def _member_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                      generation_id: int) -> tuple[Group, ErrorCode | None]:
        """The group, or the error a member's Heartbeat/SyncGroup gets, in Kafka's order."""
        error = self._group_error(group_id)
        group = self.groups.get(group_id)
        if error is None:
            if group is None:
                error = ErrorCode.unknown_member_id
            elif group.is_static_member_fenced(member_id, group_instance_id):
                error = ErrorCode.fenced_instance_id
            elif member_id not in group.members:
                error = ErrorCode.unknown_member_id
            elif generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
        return group, error

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        group, error = self._member_group(group_id, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        member = group.members[member_id]
        self._expect_heartbeat(group, member, member.session_timeout_ms)
        return ErrorCode.rebalance_in_progress if group.in_state(PREPARING) else ErrorCode.none

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Per leaving (member id, group instance id): its error; plus a group-level one."""
        error = self._group_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in leaving]
        return ErrorCode.none, [self._leave(group, member_id, instance_id)
                                for member_id, instance_id in leaving]

    def _leave(self, group: Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if not member_id:
            # An admin removing a static member by its group.instance.id alone.
            member_id = group.static_members.get(group_instance_id or "", "")
            if not member_id:
                return ErrorCode.unknown_member_id
        elif member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            if group.in_state(PREPARING):
                self._try_complete_join(group)
            return ErrorCode.none
        elif group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("member %s left group %s", member_id, group.group_id)
        self._remove_member_and_rebalance(group, member, f"member {member_id} left")
        return ErrorCode.none

    # -- offsets ----------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, generation_id: int, member_id: str,
                             group_instance_id: str | None,
                             offsets: dict[TopicPartition, OffsetCommit]
                             ) -> dict[TopicPartition, ErrorCode]:
        error = self._group_error(group_id)
        group = self.groups.get(group_id)
        if error is None and group is None and generation_id >= 0:
            # A member of a generation this coordinator does not know (or no longer has).
            error = ErrorCode.illegal_generation
        if error is None:
            if group is None:
                group = self._group_or_new(group_id)
            error = self._commit_error(group, generation_id, member_id, group_instance_id)
            if error is not None:
                self._forget_if_unused(group)
        if error is not None:
            return dict.fromkeys(offsets, error)
        member = group.members.get(member_id)
        if member is not None:
            self._expect_heartbeat(group, member, member.session_timeout_ms)
        now = _now_ms()
        records = [(encode_offset_key(OffsetKey(group_id, topic, index)),
                    encode_offset_value(OffsetValue(c.offset, c.leader_epoch, c.metadata, now)))
                   for (topic, index), c in offsets.items()]
        try:
            last = await self.store.append(self.store.partition_for(group_id), records, now)
        except OffsetsStoreError as e:
            log.warning("committing offsets of group %s failed: %s", group_id, e)
            return dict.fromkeys(offsets, e.error_code)
        # The records are durable: whatever happened to the group meanwhile, memory
        # follows the log, as a reload would.
        target = self._group_or_new(group_id)
        for key, c in offsets.items():
            known = target.offsets.get(key)
            if known is None or known.log_offset < last:
                target.offsets[key] = CommittedOffset(c.offset, c.leader_epoch, c.metadata, now,
                                                      last)
        return dict.fromkeys(offsets, ErrorCode.none)

    @staticmethod
    def _commit_error(group: Group, generation_id: int, member_id: str,
                      group_instance_id: str | None) -> ErrorCode | None:
        if group.in_state(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id or group_instance_id is not None:
            if group.is_static_member_fenced(member_id, group_instance_id):
                return ErrorCode.fenced_instance_id
            if member_id not in group.members:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.in_state(EMPTY):
            # Outside a generation only a group without members may commit ("simple" use).
            return ErrorCode.unknown_member_id
        if group.in_state(COMPLETING):
            # The member knows the new generation but not yet its assignment.
            return ErrorCode.rebalance_in_progress
        return None

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        """Committed offsets of ``partitions`` (None: every partition the group has)."""
        error = self._group_error(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {tp: committed.get(tp) for tp in partitions}

    async def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                             ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error = self._group_error(group_id)
        group = self.groups.get(group_id)
        if error is None and group is None:
            error = ErrorCode.group_id_not_found
        if (error is None and not group.in_state(EMPTY)
                and group.protocol_type != CONSUMER_PROTOCOL_TYPE):
            error = ErrorCode.non_empty_group
        if error is not None:
            return error, {}
        # A consumer group with members keeps the offsets of the topics it consumes.
        subscribed = set() if group.in_state(EMPTY) else group.subscribed_topics()
        results = {tp: ErrorCode.none if subscribed is not None and tp[0] not in subscribed
                   else ErrorCode.group_subscribed_to_topic for tp in partitions}
        removed = [tp for tp, e in results.items() if e == ErrorCode.none and tp in group.offsets]
        if removed:
            write_error = await self._write_tombstones(group_id, removed, with_group=False)
            if write_error is not None:
                return write_error, {}
            for tp in removed:
                group.offsets.pop(tp, None)
        return ErrorCode.none, results

    async def _write_tombstones(self, group_id: str, partitions: list[TopicPartition],
                                with_group: bool) -> ErrorCode | None:
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, topic, index)), None)
            for topic, index in partitions]
        if with_group:
            records.append((encode_group_key(GroupKey(group_id)), None))
        try:
            await self.store.append(self.store.partition_for(group_id), records, _now_ms())
        except OffsetsStoreError as e:
            log.warning("deleting from group %s failed: %s", group_id, e)
            return e.error_code
        return None

    # -- administration ---------------------------------------------------------------------

    def list_groups(self) -> tuple[ErrorCode, list[Group]]:
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self._loading else ErrorCode.none
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
            elif error is None and not group.in_state(EMPTY):
                error = ErrorCode.non_empty_group
            if error is None:
                self._kill(group)
                deleted.append(group)
            results[group_id] = error or ErrorCode.none
        for group in deleted:
            error = await self._write_tombstones(group.group_id, list(group.offsets), True)
            if error is not None:
                results[group.group_id] = error
            else:
                log.info("deleted group %s", group.group_id)
        return results
