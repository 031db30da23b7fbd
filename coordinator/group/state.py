"""One consumer group of the classic protocol: members, generation, state, committed offsets.

This module keeps the bookkeeping (who is a member, what they support, which protocol wins,
which transitions are legal); ``classic`` drives it from requests and timers.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .timer import Scheduled


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (protocol name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Futures of the JoinGroup / SyncGroup request this member is waiting on, if any.
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    # A member that joined in the current rebalance and has not yet seen a generation.
    is_new: bool = False
    heartbeat_timer: Scheduled | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def metadata_for(self, protocol: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def answer_join(self, result: Any) -> None:
        if self.join_waiter is not None:
            if not self.join_waiter.done():
                self.join_waiter.set_result(result)
            self.join_waiter = None

    def answer_sync(self, result: Any) -> None:
        if self.sync_waiter is not None:
            if not self.sync_waiter.done():
                self.sync_waiter.set_result(result)
            self.sync_waiter = None

    def cancel_heartbeat_timer(self) -> None:
        if self.heartbeat_timer is not None:
            self.heartbeat_timer.cancel()
            self.heartbeat_timer = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Where the commit record sits in __consumer_offsets: of two commits for the same
    # partition, the one written later wins, whatever order their writes complete in.
    log_offset: int


Key = TypeVar("Key")


def keep_later(offsets: dict[Key, CommittedOffset], key: Key, committed: CommittedOffset
               ) -> None:
    """Store ``committed`` under ``key`` unless a commit written later is already there
    (a transaction's offsets become committed at its marker, after commits written since)."""
    known = offsets.get(key)
    if known is None or known.log_offset < committed.log_offset:
        offsets[key] = committed


@dataclass(eq=False, kw_only=True)
class GroupOffsets:
    """A group's committed offsets, whatever its protocol (classic or consumer groups)."""

    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Offsets committed in transactions not decided yet (TxnOffsetCommit), by producer id:
    # committed at the transaction's commit marker, dropped at its abort marker.
    pending_offsets: dict[int, dict[tuple[str, int], CommittedOffset]] = field(
        default_factory=dict)

    def pending_partitions(self) -> set[tuple[str, int]]:
        """Partitions with offsets committed in a transaction not decided yet."""
        return {tp for pending in self.pending_offsets.values() for tp in pending}

    def offset_partitions(self) -> set[tuple[str, int]]:
        """Partitions with a committed or pending offset: what deleting the group deletes."""
        return set(self.offsets) | self.pending_partitions()

    def delete_offset(self, topic_partition: tuple[str, int]) -> None:
        """Forget the partition's committed offset and its pending ones, as its tombstone
        does on replay."""
        self.offsets.pop(topic_partition, None)
        for pending in self.pending_offsets.values():
            pending.pop(topic_partition, None)


@dataclass(eq=False)
class Group(GroupOffsets):
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    # group.instance.id -> member id of the static members.
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, each with its expiry timer.
    pending_members: dict[str, Scheduled] = field(default_factory=dict)
    # Members of the current generation that have not sent their SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    # A member joined a brand-new group during the initial rebalance delay.
    new_member_added: bool = False
    join_timer: Scheduled | None = None
    # Set while the initial rebalance delay runs: the join must not complete early.
    in_initial_delay: bool = False
    sync_timer: Scheduled | None = None

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition "
                                 f"{self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp = now_ms

    def in_state(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        if self.in_state(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocol_names)
        candidates = self.candidate_protocols()
        return protocol_type == self.protocol_type and any(p in candidates for p in protocol_names)

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [set(m.protocol_names) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins."""
        candidates = self.candidate_protocols()
        votes = Counter(next(p for p in m.protocol_names if p in candidates)
                        for m in self.members.values())
        return votes.most_common(1)[0][0]

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        pending_expiry = self.pending_members.pop(member.member_id, None)
        if pending_expiry is not None:
            pending_expiry.cancel()

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        member.cancel_heartbeat_timer()
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, group_instance_id: str, new_member_id: str) -> Member:
        """Give a returning static member a new member id, keeping its place in the group."""
        old_member_id = self.static_members[group_instance_id]
        member = self.members.pop(old_member_id)
        self.members[new_member_id] = member
        member.member_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A known group.instance.id presented with a member id that is no longer its own."""
        if group_instance_id is None or group_instance_id not in self.static_members:
            return False
        return self.static_members[group_instance_id] != member_id

    def maybe_elect_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick any member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m for m in self.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.pending_sync = set(self.members)
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)

    def member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """(member id, group instance id, metadata) of every member, for the leader."""
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
                for m in self.members.values()]

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a consumer group subscribe to; None if unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            # During a rebalance a member may have rejoined without the current protocol.
            metadata = dict(member.protocols).get(self.protocol_name)
            parsed = None if metadata is None else parse_subscription_topics(metadata)
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def cancel_timers(self) -> None:
        for timer in (self.join_timer, self.sync_timer, *self.pending_members.values()):
            if timer is not None:
                timer.cancel()
        self.join_timer = self.sync_timer = None
        self.in_initial_delay = False
        for member in self.members.values():
            member.cancel_heartbeat_timer()


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: they come first)."""
    try:
        position = 2  # int16 version
        (count,) = struct.unpack_from(">i", metadata, position)
        position += 4
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            if length < 0 or position + length > len(metadata):
                return None
            topics.add(metadata[position:position + length].decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
