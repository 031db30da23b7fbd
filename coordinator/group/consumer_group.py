"""One KIP-848 consumer group: its epochs, members, target assignment, and who owns what.

Kafka's ConsumerGroup and ConsumerGroupMember. The group epoch moves whenever what the
assignor sees changes (a member joins, leaves, changes its subscription or rack; a subscribed
topic changes its partitions); the target assignment is recomputed for that epoch (the
assignment epoch); each member then moves towards its target at its own pace, with its own
member epoch (``reconciliation``). ``partition_owners`` records which member holds each
partition, assigned or still to be revoked: a partition is given to its new owner only once
free.
"""

from __future__ import annotations

import base64
import enum
import uuid
from dataclasses import dataclass, field, replace

from .assignors import Assignment, TopicPartition
from .state import GroupOffsets
from .timer import Scheduled

# Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
CONSUMER_GROUP_TYPE = "consumer"
CONSUMER_PROTOCOL_TYPE = "consumer"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    """Where a member is on its way to its target (Kafka's MemberState)."""
    STABLE = "stable"
    # It must first give up ``pending_revocation``; its epoch stays until it has.
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    # It has the new epoch but waits for partitions other members still hold.
    UNRELEASED_PARTITIONS = "unreleased_partitions"


def partitions_of(assignment: Assignment) -> set[TopicPartition]:
    return {(topic_id, p) for topic_id, partitions in assignment.items() for p in partitions}


@dataclass(frozen=True, slots=True)
class MemberSubscriptionInfo:
    """What a member told the coordinator about itself (ConsumerGroupMemberMetadata)."""
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """Where a member is in its reconciliation (ConsumerGroupCurrentMemberAssignment)."""
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


NO_ASSIGNMENT = MemberAssignment(JOIN_EPOCH, JOIN_EPOCH, MemberState.STABLE, {}, {})


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    info: MemberSubscriptionInfo
    current: MemberAssignment = NO_ASSIGNMENT
    session_timer: Scheduled | None = None
    # Runs while the member owes a revocation: past it, the member is fenced.
    rebalance_timer: Scheduled | None = None

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.rebalance_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.rebalance_timer = None


@dataclass(eq=False)
class ConsumerGroup(GroupOffsets):
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    # instance id -> member id of the static members.
    static_members: dict[str, str] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Who holds each partition (assigned or pending revocation), and at which member epoch.
    partition_owners: dict[TopicPartition, tuple[str, int]] = field(default_factory=dict)
    # What the assignor last saw of the subscribed topics: a change bumps the group epoch.
    subscribed_topics_signature: tuple = ()
    dead: bool = False

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.current.state != MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def is_free(self, tp: TopicPartition, member_id: str) -> bool:
        """True when no member but ``member_id`` holds ``tp``."""
        owner = self.partition_owners.get(tp)
        return owner is None or owner[0] == member_id

    def set_current(self, member: ConsumerMember, current: MemberAssignment) -> None:
        """Move ``member`` to ``current``, keeping ``partition_owners`` in step."""
        self._release(member)
        member.current = current
        for tp in partitions_of(current.assigned) | partitions_of(current.pending_revocation):
            self.partition_owners[tp] = (member.member_id, current.member_epoch)

    def _release(self, member: ConsumerMember) -> None:
        held = partitions_of(member.current.assigned) | partitions_of(
            member.current.pending_revocation)
        for tp in held:
            if self.partition_owners.get(tp, ("",))[0] == member.member_id:
                del self.partition_owners[tp]

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.info.instance_id is not None:
            self.static_members[member.info.instance_id] = member.member_id
        self.set_current(member, member.current)

    def remove(self, member_id: str) -> ConsumerMember:
        member = self.members.pop(member_id)
        member.cancel_timers()
        self._release(member)
        self.target.pop(member_id, None)
        instance_id = member.info.instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        return member

    def replace_static_member(self, old: ConsumerMember, new_member_id: str,
                              info: MemberSubscriptionInfo) -> ConsumerMember:
        """A restarted static member takes over the old one's assignment and the epoch it
        had before it left."""
        target = self.target.get(old.member_id, {})
        self.remove(old.member_id)
        member = ConsumerMember(new_member_id, info, replace(
            old.current, member_epoch=old.current.previous_member_epoch))
        self.add(member)
        self.target[new_member_id] = target
        return member

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.info.subscribed_topic_names}

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for, else ``default`` (Kafka's rule)."""
        votes: dict[str, int] = {}
        for member in self.members.values():
            if member.info.server_assignor is not None:
                votes[member.info.server_assignor] = votes.get(member.info.server_assignor,
                                                               0) + 1
        return max(sorted(votes), key=lambda name: votes[name]) if votes else default


def new_member_id() -> str:
    """A member id as Kafka's Uuid.toString writes one: 22 URL-safe base64 characters."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
