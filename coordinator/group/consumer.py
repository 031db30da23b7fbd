"""The KIP-848 consumer group protocol, as Kafka's GroupMetadataManager runs
ConsumerGroupHeartbeat: one request both keeps a member alive and moves its assignment.

A heartbeat, in order:

1. validate the request (Kafka's checks and error codes) and find the group: a member joining
   (epoch 0) creates it, any other epoch needs it (GROUP_ID_NOT_FOUND);
2. find or create the member: a dynamic member by its member id, a static one by its instance
   id; check its epoch (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
   UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED);
3. update what it declares (subscription, regex, rack, assignor): a change, a new member, or a
   change of the subscribed topics' partitions bumps the group epoch;
4. if the group epoch is ahead of the assignment epoch, run the assignor for a new target;
5. reconcile the member towards its target (``reconciliation``: revoke before assign);
6. write the records of whatever changed (``consumer_records``) and answer once they are
   durable.

Sessions (``consumer_session_timeout_ms``) and rebalance timeouts (a member that does not
revoke in time) fence members through the ``Timer``; a fenced or leaving member's partitions
become free and the others' targets are recomputed. Everything runs on the event loop: the
state changes before the first ``await``, as in ``classic``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..coordinator_log import CoordinatorLog, CoordinatorLogError, LogRecord
from ..group_config import ConsumerGroupSettings, GroupConfig
from ..partition_loader import Spawn
from .assignors import ASSIGNORS, Assignment, GroupSpec, MemberSubscription, TopicPartition
from .consumer_group import (
    CONSUMER_GROUP_TYPE,
    CONSUMER_PROTOCOL_TYPE,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    MemberSubscriptionInfo,
    new_member_id,
    partitions_of,
)
from .consumer_records import (
    CURRENT_ASSIGNMENT_KEY,
    GROUP_METADATA_KEY,
    MEMBER_METADATA_KEY,
    TARGET_MEMBER_KEY,
    TARGET_METADATA_KEY,
    ConsumerKey,
    LoadedConsumerGroup,
    encode_current,
    encode_epoch,
    encode_key,
    encode_member,
    encode_target,
)
from .kind import ListedGroup
from .rack_aware import SubscribedTopic, TopicsView
from .reconciliation import reconcile
from .state import GroupOffsets
from .timer import Timer

if TYPE_CHECKING:
    from .loader import LoadedPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: tuple[str, ...] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    # The partitions the member says it owns; None when the heartbeat does not say.
    owned: frozenset[TopicPartition] | None
    client_id: str
    client_host: str
    # ConsumerGroupHeartbeat v1+ (KIP-1082): the client makes up its member id.
    client_chooses_member_id: bool


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # The member's partitions; None when they did not change since its last heartbeat.
    assignment: Assignment | None = None


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


def _invalid(message: str) -> HeartbeatError:
    return HeartbeatError(ErrorCode.invalid_request, message)


class ConsumerGroupManager:
    def __init__(self, config: GroupConfig, topic_log: CoordinatorLog, timer: Timer,
                 spawn: Spawn, topics: TopicsView,
                 group_settings: Callable[[str], ConsumerGroupSettings]) -> None:
        """``group_settings``: a group's consumer.session.timeout.ms and
        consumer.heartbeat.interval.ms (its group configs), read at each heartbeat."""
        self.config = config
        self.group_settings = group_settings
        self.topic_log = topic_log
        self.timer = timer
        self.spawn = spawn
        self.topics = topics
        self.groups: dict[str, ConsumerGroup] = {}
        # Group id -> (what it was resolved for, its subscribed topics by name).
        self._resolved: dict[str, tuple[tuple, dict[str, SubscribedTopic]]] = {}

    # -- the group kind (``kind.GroupKind``) ---------------------------------------------------

    group_type = CONSUMER_GROUP_TYPE

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def listed(self) -> Iterable[ListedGroup]:
        return [ListedGroup(g.group_id, CONSUMER_GROUP_TYPE, CONSUMER_PROTOCOL_TYPE,
                            g.state.value) for g in self.groups.values()]

    def restore(self, loaded: LoadedPartition) -> None:
        for group_id, group in loaded.consumer_groups.groups.items():
            self.restore_group(group_id, group)

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        return ErrorCode.non_empty_group if self.groups[group_id].members else None

    def delete(self, group_id: str) -> list[LogRecord]:
        """Deletes an empty group (its members' records are already gone)."""
        group = self.groups[group_id]
        self.kill(group)
        return [self._record(TARGET_METADATA_KEY, group, "", None),
                self._record(GROUP_METADATA_KEY, group, "", None)]

    # -- loading and unloading --------------------------------------------------------------

    def restore_group(self, group_id: str, loaded: LoadedConsumerGroup) -> None:
        """Take a group over as its records left it; every member's session starts now."""
        group = self.groups[group_id] = ConsumerGroup(
            group_id, group_epoch=loaded.group_epoch, assignment_epoch=loaded.assignment_epoch,
            target=dict(loaded.targets))
        for member_id, info in loaded.members.items():
            member = ConsumerMember(member_id, info)
            group.add(member)
            if member_id in loaded.current:
                group.set_current(member, loaded.current[member_id])
            self._expect_heartbeat(group, member)
            if member.current.state == MemberState.UNREVOKED_PARTITIONS:
                self._expect_revocation(group, member)
        group.subscribed_topics_signature = self._signature(self.subscribed_topics(group))

    def unload_partition(self, partition: int) -> None:
        for group in [g for g in self.groups.values()
                      if self.topic_log.partition_for(g.group_id) == partition]:
            self.kill(group)

    def kill(self, group: ConsumerGroup) -> None:
        for member in group.members.values():
            member.cancel_timers()
        group.dead = True
        del self.groups[group.group_id]
        self._resolved.pop(group.group_id, None)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------

    def request_error(self, request: HeartbeatRequest) -> HeartbeatResult | None:
        """The answer to a heartbeat Kafka refuses whatever the group's state."""
        try:
            self._validate(request)
        except HeartbeatError as e:
            return HeartbeatResult(e.error, str(e))
        return None

    async def heartbeat(self, request: HeartbeatRequest,
                        upgraded: GroupOffsets | None = None,
                        upgrade_records: Iterable[LogRecord] = ()) -> HeartbeatResult:
        """``upgraded``: the offsets of an empty classic group this heartbeat turns into a
        consumer group, whose deletion ``upgrade_records`` write."""
        refused = self.request_error(request)
        if refused is not None:
            return refused
        group = self.groups.get(request.group_id)
        if group is None and request.member_epoch != JOIN_EPOCH:
            return HeartbeatResult(ErrorCode.group_id_not_found,
                                   f"Group {request.group_id} not found.")
        records = list(upgrade_records)
        if group is None:
            group = self.groups[request.group_id] = ConsumerGroup(request.group_id)
            if upgraded is not None:
                group.offsets, group.pending_offsets = (upgraded.offsets,
                                                        upgraded.pending_offsets)
                log.info("group %s upgraded from the classic to the consumer protocol",
                         request.group_id)
        try:
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                result = self._leave(group, request, records)
            else:
                result = self._heartbeat(group, request, records)
        except HeartbeatError as e:
            result = HeartbeatResult(e.error, str(e))
            if group.group_epoch == 0 and not group.members and not group.offsets:
                del self.groups[group.group_id]  # created by this refused join: nothing
        # Whatever changed before a refusal (a rejoining member's removal) is written too:
        # memory never runs ahead of the log.
        error = await self._write(group.group_id, records)
        return result if error is None else HeartbeatResult(error)

    def _validate(self, request: HeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not request.group_id:
            raise _invalid("GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id:
            raise _invalid("InstanceId can't be empty.")
        if request.rack_id is not None and not request.rack_id:
            raise _invalid("RackId can't be empty.")
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            raise _invalid(f"MemberEpoch {request.member_epoch} is invalid.")
        needs_member_id = (request.client_chooses_member_id
                           or request.member_epoch != JOIN_EPOCH)
        if needs_member_id and not request.member_id:
            raise _invalid("MemberId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise _invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned:
                raise _invalid("TopicPartitions must be empty when (re-)joining.")
            if (request.subscribed_topic_names is None
                    and request.subscribed_topic_regex is None):
                raise _invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in "
                               "first request.")
        if request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            raise _invalid("InstanceId can't be null.")
        if (request.server_assignor is not None
                and request.server_assignor not in self.config.consumer_assignors):
            supported = ", ".join(self.config.consumer_assignors)
            raise HeartbeatError(ErrorCode.unsupported_assignor,
                                 f"ServerAssignor {request.server_assignor} is not supported. "
                                 f"Supported assignors: {supported}.")
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as e:
                raise HeartbeatError(ErrorCode.invalid_regular_expression,
                                     f"SubscribedTopicRegex is invalid: {e}") from None

    def _heartbeat(self, group: ConsumerGroup, request: HeartbeatRequest,
                   records: list[LogRecord]) -> HeartbeatResult:
        member, is_new = self._member(group, request, records)
        assigned_before = member.current.assigned
        info = self._updated_info(member.info if not is_new else None, request)
        bump = is_new
        if info != member.info or is_new:
            subscription_changed = (
                (info.subscribed_topic_names, info.subscribed_topic_regex, info.rack_id)
                != (member.info.subscribed_topic_names, member.info.subscribed_topic_regex,
                    member.info.rack_id))
            bump = bump or subscription_changed
            member.info = info
            records.append(self._record(MEMBER_METADATA_KEY, group, member.member_id,
                                        encode_member(info)))
        signature = self._signature(self.subscribed_topics(group))
        if signature != group.subscribed_topics_signature:
            group.subscribed_topics_signature = signature
            bump = True
        if bump:
            self._bump_epoch(group, records)
        self._maybe_assign(group, records)
        self._reconcile(group, member, request.owned, records)
        self._expect_heartbeat(group, member)
        full = request.owned is not None or request.member_epoch == JOIN_EPOCH
        changed = member.current.assigned != assigned_before
        return HeartbeatResult(
            ErrorCode.none, None, member.member_id, member.member_epoch,
            self._heartbeat_interval(group, member),
            member.current.assigned if full or changed else None)

    def _heartbeat_interval(self, group: ConsumerGroup, member: ConsumerMember) -> int:
        reconciling = (member.current.state != MemberState.STABLE
                       or member.member_epoch != group.assignment_epoch)
        interval = self.group_settings(group.group_id).heartbeat_interval_ms
        return min(interval, self.config.consumer_reconciling_heartbeat_interval_ms) \
            if reconciling else interval

    def _member(self, group: ConsumerGroup, request: HeartbeatRequest,
                records: list[LogRecord]) -> tuple[ConsumerMember, bool]:
        """The heartbeat's member, and whether it is new; raises what Kafka answers a
        member it does not accept."""
        joining = request.member_epoch == JOIN_EPOCH
        if request.instance_id is not None:
            existing_id = group.static_members.get(request.instance_id)
            existing = group.members.get(existing_id) if existing_id else None
            if joining:
                if existing is None:
                    return self._new_member(group, request), True
                if existing.member_epoch != STATIC_LEAVE_EPOCH:
                    raise HeartbeatError(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {existing.member_id} with instance id "
                        f"{request.instance_id} is not released yet.")
                member_id = request.member_id or new_member_id()
                self._remove_records(group, existing.member_id, records)
                member = group.replace_static_member(
                    existing, member_id, self._updated_info(existing.info, request))
                records.append(self._record(MEMBER_METADATA_KEY, group, member_id,
                                            encode_member(member.info)))
                records.append(self._record(TARGET_MEMBER_KEY, group, member_id,
                                            encode_target(group.target[member_id])))
                self._write_current(group, member, records)
                log.info("static member %s of group %s rejoined as %s", request.instance_id,
                         group.group_id, member_id)
                return member, False
            if existing is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Instance id {request.instance_id} is unknown.")
            if existing.member_id != request.member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id,
                                     f"Instance id {request.instance_id} belongs to another "
                                     "member.")
            self._check_epoch(existing, request)
            return existing, False
        member = group.members.get(request.member_id) if request.member_id else None
        if joining:
            if member is not None:
                # A member that rejoins has lost its partitions: it starts over.
                self._remove(group, member, records)
            return self._new_member(group, request), True
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Member {request.member_id} is not a member of group "
                                 f"{group.group_id}.")
        self._check_epoch(member, request)
        return member, False

    def _new_member(self, group: ConsumerGroup, request: HeartbeatRequest) -> ConsumerMember:
        if len(group.members) >= self.config.consumer_max_size:
            raise HeartbeatError(ErrorCode.group_max_size_reached,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{self.config.consumer_max_size} members.")
        member = ConsumerMember(request.member_id or new_member_id(),
                                self._updated_info(None, request))
        group.add(member)
        group.target.setdefault(member.member_id, {})
        log.info("member %s joined group %s", member.member_id, group.group_id)
        return member

    @staticmethod
    def _check_epoch(member: ConsumerMember, request: HeartbeatRequest) -> None:
        """Kafka's throwIfMemberEpochIsInvalid: an epoch behind is accepted only as a retry
        of the previous epoch's heartbeat whose answer was lost."""
        epoch = request.member_epoch
        if epoch > member.member_epoch:
            raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                 f"The consumer group member has a greater member epoch "
                                 f"({epoch}) than the one known by the group coordinator "
                                 f"({member.member_epoch}).")
        if epoch < member.member_epoch:
            lost_answer = (epoch == member.current.previous_member_epoch
                           and request.owned is not None
                           and request.owned <= partitions_of(member.current.assigned))
            if not lost_answer:
                raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                     f"The consumer group member has a smaller member epoch "
                                     f"({epoch}) than the one known by the group coordinator "
                                     f"({member.member_epoch}).")

    @staticmethod
    def _updated_info(info: MemberSubscriptionInfo | None,
                      request: HeartbeatRequest) -> MemberSubscriptionInfo:
        """What the member declares now: a field the heartbeat leaves out (null; -1 for
        the rebalance timeout) keeps its value, an empty regex drops the regex."""
        if info is None:
            info = MemberSubscriptionInfo(request.instance_id, None, request.client_id,
                                          request.client_host, (), None, None, -1)
        regex = (info.subscribed_topic_regex if request.subscribed_topic_regex is None
                 else request.subscribed_topic_regex or None)
        names = (info.subscribed_topic_names if request.subscribed_topic_names is None
                 else tuple(request.subscribed_topic_names))
        return MemberSubscriptionInfo(
            instance_id=request.instance_id,
            rack_id=info.rack_id if request.rack_id is None else request.rack_id,
            client_id=request.client_id, client_host=request.client_host,
            subscribed_topic_names=names, subscribed_topic_regex=regex,
            server_assignor=(info.server_assignor if request.server_assignor is None
                             else request.server_assignor),
            rebalance_timeout_ms=(info.rebalance_timeout_ms if request.rebalance_timeout_ms == -1
                                  else request.rebalance_timeout_ms))

    # -- leaving and fencing -----------------------------------------------------------------

    def _leave(self, group: ConsumerGroup, request: HeartbeatRequest,
               records: list[LogRecord]) -> HeartbeatResult:
        if request.instance_id is not None:
            member_id = group.static_members.get(request.instance_id)
            if member_id is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Instance id {request.instance_id} is unknown.")
            if member_id != request.member_id:
                raise HeartbeatError(ErrorCode.fenced_instance_id,
                                     f"Instance id {request.instance_id} belongs to another "
                                     "member.")
        member = group.members.get(request.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Member {request.member_id} is not a member of group "
                                 f"{group.group_id}.")
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            # A static member going away for a while: it keeps its partitions until its
            # session expires or it comes back.
            group.set_current(member, replace(
                member.current, member_epoch=STATIC_LEAVE_EPOCH,
                previous_member_epoch=member.member_epoch))
            self._write_current(group, member, records)
            self._expect_heartbeat(group, member)
            log.info("static member %s of group %s left temporarily", member.member_id,
                     group.group_id)
        else:
            log.info("member %s left group %s", member.member_id, group.group_id)
            self._remove(group, member, records)
            self._maybe_assign(group, records)
        return HeartbeatResult(ErrorCode.none, None, member.member_id, request.member_epoch,
                               self.group_settings(group.group_id).heartbeat_interval_ms)

    def _remove(self, group: ConsumerGroup, member: ConsumerMember,
                records: list[LogRecord]) -> None:
        group.remove(member.member_id)
        self._remove_records(group, member.member_id, records)
        self._bump_epoch(group, records)

    def _remove_records(self, group: ConsumerGroup, member_id: str,
                        records: list[LogRecord]) -> None:
        records += [self._record(key, group, member_id, None)
                    for key in (CURRENT_ASSIGNMENT_KEY, TARGET_MEMBER_KEY, MEMBER_METADATA_KEY)]

    def _fence(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        if group.members.get(member.member_id) is not member:
            return
        log.info("fencing member %s of group %s: %s", member.member_id, group.group_id, reason)
        records: list[LogRecord] = []
        self._remove(group, member, records)
        self._maybe_assign(group, records)
        self.spawn(self._write(group.group_id, records))

    def _expect_heartbeat(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.timer.schedule(
            self.group_settings(group.group_id).session_timeout_ms, self._fence, group, member,
            "session expired")

    # -- assignment and reconciliation -------------------------------------------------------

    def _bump_epoch(self, group: ConsumerGroup, records: list[LogRecord]) -> None:
        group.group_epoch += 1
        records.append(self._record(GROUP_METADATA_KEY, group, "",
                                    encode_epoch(group.group_epoch)))

    def _maybe_assign(self, group: ConsumerGroup, records: list[LogRecord]) -> None:
        """A new target assignment for the group epoch, if the current one is older."""
        if group.group_epoch <= group.assignment_epoch:
            return
        members = {m.member_id: m for m in group.members.values()}
        topics = self.subscribed_topics(group)
        spec = GroupSpec(
            {member_id: MemberSubscription(
                member.info.rack_id,
                frozenset(t.topic_id for t in self._member_topics(member.info).values()),
                group.target.get(member_id, {}))
             for member_id, member in members.items()},
            {t.topic_id: t for t in topics.values()})
        assignor = ASSIGNORS[group.preferred_assignor(self.config.consumer_assignors[0])]
        target = assignor.assign(spec) if members else {}
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                records.append(self._record(TARGET_MEMBER_KEY, group, member_id,
                                            encode_target(assignment)))
        group.target = target
        group.assignment_epoch = group.group_epoch
        records.append(self._record(TARGET_METADATA_KEY, group, "",
                                    encode_epoch(group.assignment_epoch)))
        log.info("group %s: target assignment of epoch %d by %s for %d members",
                 group.group_id, group.assignment_epoch, assignor.name, len(members))

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember,
                   owned: frozenset[TopicPartition] | None, records: list[LogRecord]) -> None:
        if member.member_epoch == STATIC_LEAVE_EPOCH:
            return
        before = member.current
        after = reconcile(before, group.assignment_epoch, group.target.get(member.member_id, {}),
                          owned, lambda tp: group.is_free(tp, member.member_id))
        if after == before:
            return
        group.set_current(member, after)
        self._write_current(group, member, records)
        revoking = after.state == MemberState.UNREVOKED_PARTITIONS
        if member.rebalance_timer is not None and (not revoking or after.pending_revocation
                                                   != before.pending_revocation):
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        if revoking and member.rebalance_timer is None:
            self._expect_revocation(group, member)

    def _expect_revocation(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        member.rebalance_timer = self.timer.schedule(
            member.info.rebalance_timeout_ms, self._fence, group, member,
            "partitions not revoked within the rebalance timeout")

    def _write_current(self, group: ConsumerGroup, member: ConsumerMember,
                       records: list[LogRecord]) -> None:
        records.append(self._record(CURRENT_ASSIGNMENT_KEY, group, member.member_id,
                                    encode_current(member.current)))

    def _member_topics(self, info: MemberSubscriptionInfo) -> dict[str, SubscribedTopic]:
        """The existing topics a member subscribes to, by name or regex (Python's ``re``,
        matched against the whole name, as RE2J's ``matches``; internal topics never)."""
        names = set(info.subscribed_topic_names)
        if info.subscribed_topic_regex:
            pattern = re.compile(info.subscribed_topic_regex)
            names |= {name for name in self.topics.topic_names()
                      if not name.startswith("__") and pattern.fullmatch(name)}
        found = {name: self.topics.topic(name) for name in names}
        return {name: topic for name, topic in found.items() if topic is not None}

    def subscribed_topics(self, group: ConsumerGroup) -> dict[str, SubscribedTopic]:
        """The topics any member subscribes to; resolved again only when the cluster's
        topics or the members' subscriptions changed (a heartbeat asks every time)."""
        key = (self.topics.version(), frozenset(
            (m.info.subscribed_topic_names, m.info.subscribed_topic_regex)
            for m in group.members.values()))
        cached = self._resolved.get(group.group_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        topics: dict[str, SubscribedTopic] = {}
        for member in group.members.values():
            topics |= self._member_topics(member.info)
        self._resolved[group.group_id] = (key, topics)
        return topics

    @staticmethod
    def _signature(topics: dict[str, SubscribedTopic]) -> tuple:
        return tuple(sorted((t.name, t.topic_id.bytes, t.partition_racks)
                            for t in topics.values()))

    # -- records -----------------------------------------------------------------------------

    @staticmethod
    def _record(version: int, group: ConsumerGroup, member_id: str,
                value: bytes | None) -> LogRecord:
        return LogRecord(encode_key(ConsumerKey(version, group.group_id, member_id)), value)

    async def _write(self, group_id: str, records: list[LogRecord]) -> ErrorCode | None:
        if not records:
            return None
        try:
            await self.topic_log.append(self.topic_log.partition_for(group_id), records,
                                        self.timer.now_ms())
        except CoordinatorLogError as e:
            log.warning("storing consumer group %s failed: %s", group_id, e)
            return e.error_code
        return None

    # -- offsets -----------------------------------------------------------------------------

    @staticmethod
    def commit_error(group: ConsumerGroup, member_id: str, member_epoch: int
                     ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: outside the group (epoch < 0) only
        while it has no members; a member commits with its current epoch."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

