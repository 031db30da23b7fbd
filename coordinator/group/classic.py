"""The classic group protocol, as Kafka's GroupMetadataManager runs it for classic groups.

Groups move Empty -> PreparingRebalance -> CompletingRebalance -> Stable (-> Dead when
deleted or unloaded). A rebalance collects JoinGroups until every known member rejoined or
the rebalance timeout passed (an empty group first waits ``initial_rebalance_delay_ms``,
longer while members keep arriving), then answers them all with a new generation; the
leader's SyncGroup carries the assignment, which is stored before anyone receives it.
Heartbeats keep a member's session alive; a silent member is removed and the group
rebalances. Every deadline goes through the ``Timer``.

The service has checked that this broker coordinates the group before any method here
runs. Everything runs on the event loop: each request mutates state before its first
``await``, and timers are loop callbacks, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..group_config import GroupConfig
from ..partition_loader import Spawn
from ..coordinator_log import CoordinatorLog, CoordinatorLogError, LogRecord
from .records import (
    GroupKey,
    GroupValue,
    MemberValue,
    encode_group_key,
    encode_group_value,
)
from .kind import ListedGroup
from .state import Group, GroupState, Member
from .timer import Timer

if TYPE_CHECKING:
    from .loader import LoadedPartition

log = logging.getLogger(__name__)
# Kafka expires a new member that never completes its first join after 5 minutes.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD
CLASSIC_GROUP_TYPE = "classic"


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


class ClassicGroupManager:
    def __init__(self, config: GroupConfig, topic_log: CoordinatorLog, timer: Timer,
                 spawn: Spawn) -> None:
        self.config = config
        self.topic_log = topic_log
        self.timer = timer
        self.spawn = spawn
        self.groups: dict[str, Group] = {}

    # -- the group kind (``kind.GroupKind``) ---------------------------------------------------

    group_type = CLASSIC_GROUP_TYPE

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def listed(self) -> Iterable[ListedGroup]:
        return [ListedGroup(g.group_id, CLASSIC_GROUP_TYPE, g.protocol_type or "", g.state.value)
                for g in self.groups.values()]

    def restore(self, loaded: LoadedPartition) -> None:
        for group_id, value in loaded.groups.items():
            self.restore_group(group_id, value)

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        return None if self.groups[group_id].in_state(EMPTY) else ErrorCode.non_empty_group

    def delete(self, group_id: str) -> list[LogRecord]:
        self.kill(self.groups[group_id])
        return [LogRecord(encode_group_key(GroupKey(group_id)), None)]

    # -- loading and unloading --------------------------------------------------------------

    def restore_group(self, group_id: str, value: GroupValue) -> None:
        """Take a group over as its latest stored metadata left it."""
        group = self.groups[group_id] = Group(group_id, state=STABLE if value.members else EMPTY,
                      generation_id=value.generation_id,
                      protocol_type=value.protocol_type or None,
                      protocol_name=value.protocol_name, leader_id=value.leader_id,
                      state_timestamp=value.state_timestamp)
        for m in value.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms, value.protocol_type,
                            [(value.protocol_name or "", m.subscription)], m.assignment)
            group.add(member)
            self.expect_heartbeat(group, member, member.session_timeout_ms)

    def unload_partition(self, partition: int) -> None:
        """Drop the groups of a partition this broker no longer coordinates, answering
        their waiting members."""
        for group in [g for g in self.groups.values()
                      if self.topic_log.partition_for(g.group_id) == partition]:
            self.kill(group)
            for member in group.members.values():
                member.answer_join(JoinResult(ErrorCode.not_coordinator, member.member_id))
                member.answer_sync(SyncResult(ErrorCode.not_coordinator))

    def kill(self, group: Group) -> None:
        group.cancel_timers()
        group.transition(DEAD, self.timer.now_ms())
        del self.groups[group.group_id]

    def group_or_new(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=self.timer.now_ms())
        return group

    def forget_if_unused(self, group: Group) -> None:
        """Drop a group that a failed request created and nothing refers to."""
        if (group.in_state(EMPTY) and group.generation_id == 0 and not group.members
                and not group.pending_members and not group.offsets
                and not group.pending_offsets):
            group.cancel_timers()
            self.groups.pop(group.group_id, None)

    # -- JoinGroup --------------------------------------------------------------------------

    async def join_group(self, request: JoinRequest) -> JoinResult:
        if not (self.config.min_session_timeout_ms <= request.session_timeout_ms
                <= self.config.max_session_timeout_ms):
            return JoinResult(ErrorCode.invalid_session_timeout, request.member_id)
        group = self.groups.get(request.group_id)
        if group is None and request.member_id:
            # Only a member without an id may create a group.
            return JoinResult(ErrorCode.unknown_member_id, request.member_id)
        if group is None:
            group = self.group_or_new(request.group_id)
        answer = asyncio.get_running_loop().create_future()
        if request.member_id:
            self._join_known_member(group, request, answer)
        else:
            self._join_new_member(group, request, answer)
        if group.in_state(PREPARING):
            self._try_complete_join(group)
        if answer.done():
            self.forget_if_unused(group)
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
            group.pending_members[member_id] = self.timer.schedule(
                request.session_timeout_ms, self._expire_pending_member, group, member_id)
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
        self.expect_heartbeat(group, member, member.session_timeout_ms)
        if group.in_state(STABLE) and group.select_protocol() == group.protocol_name:
            # The assignment stays valid: no rebalance. The old leader id is returned so
            # that this member, even if it was the leader, does not compute an assignment
            # a stable group would never distribute.
            self.spawn(self._confirm_static_rejoin(group, member, old_leader_id))
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
        self.expect_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        self.forget_if_unused(group)

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
        group.transition(PREPARING, self.timer.now_ms())
        log.info("preparing to rebalance group %s in generation %d (%s)", group.group_id,
                 group.generation_id, reason)

    def _schedule_join(self, group: Group, delay_ms: int,
                       initial_delay_left_ms: int | None) -> None:
        """Complete the join phase after ``delay_ms``; during the initial delay it may not
        complete earlier, and it is extended while new members keep arriving."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.in_initial_delay = initial_delay_left_ms is not None
        group.join_timer = self.timer.schedule(
            delay_ms, self._on_join_timer, group, initial_delay_left_ms)

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
        group.init_next_generation(self.timer.now_ms())
        if group.in_state(EMPTY):
            self.spawn(self._store_group(group, {}))
            return
        log.info("group %s stabilized in generation %d with %d members (protocol %s)",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name)
        for member in group.members.values():
            member.answer_join(self._join_result(group, member))
            member.is_new = False
            self.expect_heartbeat(group, member, member.session_timeout_ms)
        group.sync_timer = self.timer.schedule(
            group.rebalance_timeout_ms, self._on_sync_timeout, group, group.generation_id)

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

    def expect_heartbeat(self, group: Group, member: Member, timeout_ms: int) -> None:
        member.cancel_heartbeat_timer()
        member.heartbeat_timer = self.timer.schedule(
            timeout_ms, self._on_session_timeout, group, member)

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
            self.expect_heartbeat(group, member, member.session_timeout_ms)
            return SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                              member.assignment)
        answer = asyncio.get_running_loop().create_future()
        member.answer_sync(SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_waiter = answer
        if member_id == group.leader_id:
            assignment = {m: assignments.get(m, b"") for m in group.members}
            self.spawn(self._store_assignment(group, assignment))
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
                self.expect_heartbeat(group, member, member.session_timeout_ms)
        group.transition(STABLE, self.timer.now_ms())

    def _propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                member.answer_sync(SyncResult(error))
                self.expect_heartbeat(group, member, member.session_timeout_ms)

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
            await self.topic_log.append(self.topic_log.partition_for(group.group_id), [
                LogRecord(encode_group_key(GroupKey(group.group_id)),
                              encode_group_value(value))], self.timer.now_ms())
        except CoordinatorLogError as e:
            log.warning("storing group %s failed: %s", group.group_id, e)
            return e.error_code
        return None

    # -- Heartbeat and LeaveGroup ------------------------------------------------------------

    def _member_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                      generation_id: int) -> tuple[Group | None, ErrorCode | None]:
        """The group, or the error a member's Heartbeat/SyncGroup gets, in Kafka's order."""
        group = self.groups.get(group_id)
        if group is None:
            error = ErrorCode.unknown_member_id
        elif group.is_static_member_fenced(member_id, group_instance_id):
            error = ErrorCode.fenced_instance_id
        elif member_id not in group.members:
            error = ErrorCode.unknown_member_id
        elif generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        else:
            error = None
        return group, error

    def heartbeat(self, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> ErrorCode:
        group, error = self._member_group(group_id, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        member = group.members[member_id]
        self.expect_heartbeat(group, member, member.session_timeout_ms)
        return ErrorCode.rebalance_in_progress if group.in_state(PREPARING) else ErrorCode.none

    def leave_group(self, group_id: str, leaving: Iterable[tuple[str, str | None]]
                    ) -> list[ErrorCode]:
        """Per leaving (member id, group instance id): its error."""
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id for _ in leaving]
        return [self._leave(group, member_id, instance_id) for member_id, instance_id in leaving]

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
