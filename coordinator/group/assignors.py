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
from collections.abc import Iterable, Mapping
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
    then move partitions from members with two or more above another eligible member."""

    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        use_racks = spec.use_racks()
        eligible = {(topic_id, p): sorted(m for m, sub in spec.members.items()
                                          if topic_id in sub.topic_ids)
                    for topic_id, topic in spec.topics.items() for p in range(topic.partitions)}
        eligible = {tp: members for tp, members in eligible.items() if members}
        owned: dict[str, list[TopicPartition]] = {m: [] for m in spec.members}
        owner: dict[TopicPartition, str] = {}

        def is_local(member_id: str, tp: TopicPartition) -> bool:
            return use_racks and spec.local(member_id, tp)

        def give(member_id: str, tp: TopicPartition) -> None:
            owner[tp] = member_id
            owned[member_id].append(tp)

        # 1. Stickiness: a member keeps what it had, unless racks say another member should
        #    read the partition within its AZ and this one cannot.
        for member_id in sorted(spec.members):
            for topic_id, partitions in spec.members[member_id].current.items():
                for p in sorted(partitions):
                    tp = (topic_id, p)
                    if tp not in eligible or tp in owner or member_id not in eligible[tp]:
                        continue
                    if use_racks and not is_local(member_id, tp) and any(
                            is_local(m, tp) for m in eligible[tp]):
                        continue
                    give(member_id, tp)

        # 2. The rest, most constrained first: a local member under its fair share if there
        #    is one, else the least loaded.
        for tp in sorted((tp for tp in eligible if tp not in owner),
                         key=lambda tp: (len(eligible[tp]), tp[0].bytes, tp[1])):
            candidates = eligible[tp]
            fair_share = math.ceil(len(eligible) / len(spec.members))
            local = [m for m in candidates if is_local(m, tp) and len(owned[m]) < fair_share]
            give(min(local or candidates, key=lambda m: (len(owned[m]), m)), tp)

        # 3. Balance: from the most loaded to an eligible member with two fewer, preferring a
        #    partition the receiver reads locally and the giver does not.
        for _ in range(len(eligible) * len(spec.members)):
            move = self._next_move(owned, eligible, is_local)
            if move is None:
                break
            giver, receiver, tp = move
            owned[giver].remove(tp)
            give(receiver, tp)
        return {m: as_assignment(partitions) for m, partitions in owned.items()}

    @staticmethod
    def _next_move(owned: dict[str, list[TopicPartition]],
                   eligible: dict[TopicPartition, list[str]], is_local
                   ) -> tuple[str, str, TopicPartition] | None:
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            best = None
            for tp in owned[giver]:
                for receiver in eligible[tp]:
                    if len(owned[receiver]) + 1 >= len(owned[giver]):
                        continue
                    rank = (not is_local(receiver, tp), is_local(giver, tp),
                            len(owned[receiver]), receiver, tp[0].bytes, -tp[1])
                    if best is None or rank < best[0]:
                        best = (rank, receiver, tp)
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
                for p in list(unassigned):
                    local = [m for m in members
                             if share[m] and spec.local(m, (topic_id, p))]
                    if local:
                        chosen = max(local, key=lambda m: (share[m], -members.index(m)))
                        result[chosen].append((topic_id, p))
                        share[chosen] -= 1
                        unassigned.remove(p)
            for member_id in members:
                taken, unassigned = unassigned[:share[member_id]], unassigned[share[member_id]:]
                result[member_id] += [(topic_id, p) for p in taken]
        return {m: as_assignment(partitions) for m, partitions in result.items()}


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
