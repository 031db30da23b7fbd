"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor turns the members' subscriptions (and their present target assignments, for
stickiness) into a new target assignment; the coordinator then reconciles each member towards
it (``reconciliation``). Both assignors are rack-aware (``rack_aware``): when members declare a
rack (``client.rack``), a partition goes to a member that reads it within its own AZ whenever
that costs no balance.

- ``uniform`` (Kafka's default): every member gets as many partitions as possible the same
  number, keeping the partitions it already has where the balance allows.
- ``range``: per topic, the subscribed members in member-id order get consecutive ranges of
  partitions, so members subscribed to co-partitioned topics get the same partition numbers.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .rack_aware import SubscribedTopic, prefers, rack_aware

# Partitions of each topic, by topic id.
Assignment = Mapping[uuid.UUID, frozenset[int]]
TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    rack: str | None
    topic_ids: frozenset[uuid.UUID]
    # The member's target assignment so far: what a sticky assignor keeps.
    current: Assignment


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSubscription]
    topics: Mapping[uuid.UUID, SubscribedTopic]

    def use_racks(self) -> bool:
        return rack_aware((m.rack for m in self.members.values()), self.topics.values())

    def local(self, member_id: str, tp: TopicPartition) -> bool:
        return prefers(self.members[member_id].rack, self.topics[tp[0]].partition_racks[tp[1]])


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]: ...


def as_assignment(partitions: Iterable[TopicPartition]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in partitions:
        by_topic.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(p) for topic_id, p in by_topic.items()}


class UniformAssignor:
    """Sticky and balanced: keep what members had, give out the rest to the least loaded,
    then move partitions from members with two or more above another eligible member.

    Members and partitions are numbered for the work (sorted member ids, topics by id): the
    assignor runs on the coordinator's event loop, and a group of a hundred members over a
    thousand partitions must take milliseconds, not seconds."""

    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        use_racks = spec.use_racks()
        member_ids = sorted(spec.members)
        racks = [spec.members[m].rack for m in member_ids]
        partitions: list[TopicPartition] = []
        eligible: list[list[int]] = []  # by partition number: the members that may take it
        local_racks: list[frozenset[str]] = []
        for topic_id in sorted(spec.topics, key=lambda t: t.bytes):
            subscribers = [m for m, member_id in enumerate(member_ids)
                           if topic_id in spec.members[member_id].topic_ids]
            if not subscribers:
                continue
            topic = spec.topics[topic_id]
            for p in range(topic.partitions):
                partitions.append((topic_id, p))
                eligible.append(subscribers)
                local_racks.append(topic.partition_racks[p])
        number = {tp: i for i, tp in enumerate(partitions)}
        owned: list[list[int]] = [[] for _ in member_ids]
        owner = [-1] * len(partitions)

        def is_local(m: int, i: int) -> bool:
            return use_racks and racks[m] is not None and racks[m] in local_racks[i]

        def give(m: int, i: int) -> None:
            owner[i] = m
            owned[m].append(i)

        # 1. Stickiness: a member keeps what it had, unless racks say another member should
        #    read the partition within its AZ and this one cannot.
        for m, member_id in enumerate(member_ids):
            subscription = spec.members[member_id]
            for topic_id, kept in subscription.current.items():
                if topic_id not in subscription.topic_ids:
                    continue
                for p in sorted(kept):
                    i = number.get((topic_id, p))
                    if i is None or owner[i] != -1:
                        continue
                    if use_racks and not is_local(m, i) and any(
                            is_local(other, i) for other in eligible[i]):
                        continue
                    give(m, i)

        # 2. The rest, most constrained first: a local member under its fair share if there
        #    is one, else the least loaded.
        fair_share = math.ceil(len(partitions) / max(len(member_ids), 1))
        # The members of each rack among a partition's eligible ones (eligible lists are
        # shared by the partitions of a topic, so this is per topic).
        by_rack: dict[int, dict[str, list[int]]] = {}
        for i in sorted((i for i in range(len(partitions)) if owner[i] == -1),
                        key=lambda i: (len(eligible[i]), i)):
            candidates = eligible[i]
            local: list[int] = []
            if use_racks:
                racked = by_rack.get(id(candidates))
                if racked is None:
                    racked = by_rack[id(candidates)] = {}
                    for m in candidates:
                        if racks[m] is not None:
                            racked.setdefault(racks[m], []).append(m)
                local = [m for rack in local_racks[i] for m in racked.get(rack, ())
                         if len(owned[m]) < fair_share]
            give(min(local or candidates, key=lambda m: (len(owned[m]), m)), i)

        # 3. Balance: from the most loaded to an eligible member with two fewer, preferring a
        #    partition the receiver reads locally and the giver does not.
        for _ in range(len(partitions) * len(member_ids)):
            move = self._next_move(owned, eligible, is_local)
            if move is None:
                break
            giver, receiver, i = move
            owned[giver].remove(i)
            give(receiver, i)
        return {member_id: as_assignment(partitions[i] for i in owned[m])
                for m, member_id in enumerate(member_ids)}

    @staticmethod
    def _next_move(owned: list[list[int]], eligible: list[list[int]],
                   is_local: Callable[[int, int], bool]) -> tuple[int, int, int] | None:
        for giver in sorted(range(len(owned)), key=lambda m: (-len(owned[m]), m)):
            best = None
            for i in owned[giver]:
                for receiver in eligible[i]:
                    if len(owned[receiver]) + 1 >= len(owned[giver]):
                        continue
                    rank = (not is_local(receiver, i), is_local(giver, i),
                            len(owned[receiver]), receiver, -i)
                    if best is None or rank < best[0]:
                        best = (rank, receiver, i)
            if best is not None:
                return giver, best[1], best[2]
        return None


class RangeAssignor:
    """Per topic, member ``i`` of ``k`` subscribed members gets ``n // k`` partitions, one more
    for the first ``n % k``; without racks as consecutive ranges, with racks each member first
    takes the partitions it reads locally, up to its share."""

    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        use_racks = spec.use_racks()
        result: dict[str, list[TopicPartition]] = {m: [] for m in spec.members}
        for topic_id in sorted(spec.topics, key=lambda t: spec.topics[t].name):
            members = sorted(m for m, sub in spec.members.items() if topic_id in sub.topic_ids)
            if not members:
                continue
            n = spec.topics[topic_id].partitions
            share = {m: n // len(members) + (1 if i < n % len(members) else 0)
                     for i, m in enumerate(members)}
            unassigned = list(range(n))
            if use_racks:
                order = {m: i for i, m in enumerate(members)}
                for p in list(unassigned):
                    local = [m for m in members
                             if share[m] and spec.local(m, (topic_id, p))]
                    if local:
                        chosen = max(local, key=lambda m: (share[m], -order[m]))
                        result[chosen].append((topic_id, p))
                        share[chosen] -= 1
                        unassigned.remove(p)
            for member_id in members:
                taken, unassigned = unassigned[:share[member_id]], unassigned[share[member_id]:]
                result[member_id] += [(topic_id, p) for p in taken]
        return {m: as_assignment(partitions) for m, partitions in result.items()}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
