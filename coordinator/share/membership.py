"""Share group membership on the group coordinator (KIP-932; Kafka's
GroupMetadataManager.shareGroupHeartbeat and ShareGroup).

A member joins with epoch 0 and the member id it generated, heartbeats with the epoch it
was last given, and leaves with epoch -1. The group epoch moves whenever membership or a
subscription changes; the assignment is then computed again (``assignor``) and, as share
groups revoke nothing (a partition may be shared), each member takes its new assignment at
once with the group's epoch as its member epoch. A heartbeat with another epoch than the
member's is fenced (FENCED_MEMBER_EPOCH); one from a member the group does not know gets
UNKNOWN_MEMBER_ID, and the member joins again with epoch 0. A member that stops
heartbeating for ``session_timeout_ms`` is removed.

Membership is kept in memory by the broker coordinating the group (the leader of its
``__consumer_offsets`` partition): after a coordinator change, members heartbeat to the new
one, are told UNKNOWN_MEMBER_ID and join again, which costs one heartbeat; what they
acknowledged lives in ``__share_group_state`` (``coordinator.share.coordinator``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..coordinator_log import LogRecord
from ..group.kind import ListedGroup
from . import group_records
from ..group.timer import Scheduled, Timer
from ..group_config import ShareGroupSettings
from .assignor import MemberSubscription, ServingRacks, TopicPartition, assign

if TYPE_CHECKING:
    from ..group.loader import LoadedPartition

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# ListGroups' group type and protocol type of share groups.
SHARE_GROUP_TYPE = "share"


class ShareGroupState(enum.Enum):
    """What ShareGroupDescribe and ListGroups report (Kafka's ShareGroup.ShareGroupState)."""
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int
    rack: str | None
    client_id: str
    client_host: str
    subscribed_topics: frozenset[str]
    assignment: frozenset[TopicPartition] = frozenset()
    session_timer: Scheduled | None = None


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # The partition count of each subscribed topic the assignment was computed for.
    partition_counts: dict[str, int] = field(default_factory=dict)
    # Every share partition the group may have state for in __share_group_state: each one
    # ever assigned to a member or given a start offset (AlterShareGroupOffsets). Deleting
    # the group deletes their state.
    initialized: set[TopicPartition] = field(default_factory=set)
    # What the group's record in __consumer_offsets (``group_records``) says of them.
    recorded: frozenset[TopicPartition] = frozenset()

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topics}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack: str | None
    subscribed_topics: tuple[str, ...] | None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    member_id: str = ""
    member_epoch: int = -1
    # None: unchanged since the member's last heartbeat (the response leaves it out).
    assignment: frozenset[TopicPartition] | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ShareMembershipSettings:
    max_size: int
    # A group's share.session.timeout.ms and share.heartbeat.interval.ms, read when they
    # apply (at each heartbeat).
    group_settings: Callable[[str], ShareGroupSettings]


class ShareGroupManager:
    def __init__(self, settings: ShareMembershipSettings, timer: Timer,
                 partitions_of: Callable[[str], int | None], serving_racks: ServingRacks,
                 offsets_partition_of: Callable[[str], int]) -> None:
        """``partitions_of``: a topic's partition count, None when it does not exist;
        ``offsets_partition_of``: the partition of ``__consumer_offsets`` of a group id."""
        self.settings = settings
        self.offsets_partition_of = offsets_partition_of
        self.timer = timer
        self.partitions_of = partitions_of
        self.serving_racks = serving_racks
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        if not request.member_id:
            return HeartbeatResult(ErrorCode.invalid_request,
                                   message="MemberId can't be empty.")
        group = self.groups.get(request.group_id)
        if request.member_epoch == LEAVE_EPOCH:
            if group is not None and request.member_id in group.members:
                self._remove(group, request.member_id)
            return HeartbeatResult(ErrorCode.none, request.member_id, LEAVE_EPOCH)
        if request.member_epoch == JOIN_EPOCH:
            if request.subscribed_topics is None:
                return HeartbeatResult(ErrorCode.invalid_request, message=(
                    "SubscribedTopicNames must be set in first request."))
            group = self.groups.setdefault(request.group_id, ShareGroup(request.group_id))
            member = group.members.get(request.member_id)
            if member is None:
                if len(group.members) >= self.settings.max_size:
                    return HeartbeatResult(ErrorCode.group_max_size_reached, message=(
                        f"The share group has reached its maximum capacity of "
                        f"{self.settings.max_size} members."))
                member = group.members[request.member_id] = ShareMember(
                    request.member_id, JOIN_EPOCH, request.rack, request.client_id,
                    request.client_host, frozenset(request.subscribed_topics))
                group.group_epoch += 1
        else:
            member = group.members.get(request.member_id) if group is not None else None
            if member is None:
                return HeartbeatResult(ErrorCode.unknown_member_id, message=(
                    f"Member {request.member_id} is not a member of share group "
                    f"{request.group_id}."))
            if request.member_epoch != member.member_epoch:
                return HeartbeatResult(ErrorCode.fenced_member_epoch, message=(
                    f"The share group member has a member epoch ({request.member_epoch}) "
                    f"different from the one known by the coordinator "
                    f"({member.member_epoch})."))
        changed = False
        if request.rack is not None and request.rack != member.rack:
            member.rack, changed = request.rack, True
        if (request.subscribed_topics is not None
                and frozenset(request.subscribed_topics) != member.subscribed_topics):
            member.subscribed_topics, changed = frozenset(request.subscribed_topics), True
        if changed:
            group.group_epoch += 1
        known = None if request.member_epoch == JOIN_EPOCH else member.assignment
        self._reassign_if_needed(group)
        self._schedule_session_timeout(group, member)
        return HeartbeatResult(
            ErrorCode.none, member.member_id, member.member_epoch,
            None if member.assignment == known else member.assignment)

    def _reassign_if_needed(self, group: ShareGroup) -> None:
        """A new target assignment when the group epoch moved or a subscribed topic's
        partition count changed (created, deleted, partitions added); members take it at
        once, as there is nothing to revoke."""
        counts = {t: n for t in sorted(group.subscribed_topics())
                  if (n := self.partitions_of(t)) is not None}
        if counts != group.partition_counts and group.assignment_epoch == group.group_epoch:
            group.group_epoch += 1
        if group.assignment_epoch == group.group_epoch:
            return
        group.partition_counts = counts
        subscriptions = {m.member_id: MemberSubscription(m.rack, m.subscribed_topics)
                         for m in group.members.values()}
        target = assign(subscriptions, counts, self.serving_racks)
        for member in group.members.values():
            member.assignment = frozenset(target.get(member.member_id, ()))
            member.member_epoch = group.group_epoch
            group.initialized |= member.assignment
        group.assignment_epoch = group.group_epoch

    def _schedule_session_timeout(self, group: ShareGroup, member: ShareMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.timer.schedule(
            self.settings.group_settings(group.group_id).session_timeout_ms, self._expire,
            group.group_id, member.member_id)

    def _expire(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            self._remove(group, member_id)

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.session_timer is not None:
            member.session_timer.cancel()
        group.group_epoch += 1
        self._reassign_if_needed(group)

    def start_offsets_set(self, group_id: str, partitions: Iterable[TopicPartition]
                          ) -> ShareGroup:
        """AlterShareGroupOffsets gave these share partitions state: the group exists (empty,
        as Kafka creates it) and deleting it deletes that state."""
        group = self.groups.setdefault(group_id, ShareGroup(group_id))
        group.initialized.update(partitions)
        return group

    # -- the group kind (``coordinator.group.kind.GroupKind``) ----------------------------------

    group_type = SHARE_GROUP_TYPE

    def owns(self, group_id: str) -> bool:
        return group_id in self.groups

    def listed(self) -> Iterable[ListedGroup]:
        return [ListedGroup(g.group_id, SHARE_GROUP_TYPE, SHARE_GROUP_TYPE, g.state.value)
                for g in self.groups.values()]

    def restore(self, loaded: LoadedPartition) -> None:
        """The groups a loaded partition's records name come back empty, with the share
        partitions they have state for (membership is not written, module docstring)."""
        for group_id, partitions in loaded.share_groups.items():
            self.groups[group_id] = ShareGroup(group_id, initialized=set(partitions),
                                               recorded=frozenset(partitions))

    def unload_partition(self, partition: int) -> None:
        for group_id in [g for g in self.groups if self.offsets_partition_of(g) == partition]:
            self._drop(group_id)

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        return ErrorCode.non_empty_group if self.groups[group_id].members else None

    def delete(self, group_id: str) -> list[LogRecord]:
        """Forget an empty group; its share partitions' state is deleted first, by the
        share partitions' owners (``broker.handlers.share.delete_share_group_state``)."""
        self._drop(group_id)
        return [group_records.tombstone(group_id)]

    def _drop(self, group_id: str) -> None:
        for member in self.groups.pop(group_id).members.values():
            if member.session_timer is not None:
                member.session_timer.cancel()
