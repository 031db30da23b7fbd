"""The share group assignor (KIP-932's SimpleAssignor), rack-aware.

A share group's partitions are not owned: one partition may be given to many members (the
records are shared out by acquisition), so every member of a topic gets at least one of its
partitions when there are more members than partitions, and every partition gets at least
one member otherwise. Within that balance each member is preferably given partitions that a
broker of its own rack (AZ) serves, so its fetch bytes stay in the AZ: ``serving_racks``
says which racks can serve a partition (a classic partition's leader's rack; for a diskless
one every rack with a live broker, which the caller reports as None: any).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
# The racks whose brokers serve a partition; None: every rack does.
ServingRacks = Callable[[str, int], frozenset[str] | None]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    rack: str | None
    topics: frozenset[str]


def assign(members: Mapping[str, MemberSubscription], partitions_of: Mapping[str, int],
           serving_racks: ServingRacks) -> dict[str, set[TopicPartition]]:
    """Member id -> its partitions. ``partitions_of``: partition count of each existing
    subscribed topic. Deterministic: the same input gives the same assignment."""
    assignment: dict[str, set[TopicPartition]] = {member: set() for member in members}
    for topic in sorted(partitions_of):
        subscribers = sorted(m for m, s in members.items() if topic in s.topics)
        partitions = [(topic, p) for p in range(partitions_of[topic])]
        if not subscribers or not partitions:
            continue

        def local(member: str, tp: TopicPartition) -> bool:
            racks = serving_racks(*tp)
            rack = members[member].rack
            return racks is None or (rack is not None and rack in racks)

        if len(subscribers) >= len(partitions):
            _spread(subscribers, partitions, lambda m, tp: local(m, tp),
                    lambda m, tp: assignment[m].add(tp))
        else:
            _spread(partitions, subscribers, lambda tp, m: local(m, tp),
                    lambda tp, m: assignment[m].add(tp))
    return assignment


def _spread(takers: list, givers: list, is_local: Callable, give: Callable) -> None:
    """Give each taker one giver, each giver to at most ceil(takers/givers) takers (so to at
    least one): a local giver with room if there is one, else the least taken."""
    capacity = math.ceil(len(takers) / len(givers))
    taken = dict.fromkeys(range(len(givers)), 0)
    # Takers with the fewest local choices pick first, so they get the ones they can use.
    order = sorted(takers, key=lambda t: sum(is_local(t, g) for g in givers))
    for taker in order:
        room = [i for i in taken if taken[i] < capacity]
        # A giver nobody took yet comes first while some remain: then every giver is taken.
        untaken = len(takers) - sum(taken.values()) <= sum(1 for i in room if taken[i] == 0)
        candidates = [i for i in room if taken[i] == 0] if untaken else room
        local = [i for i in candidates if is_local(taker, givers[i])]
        chosen = min(local or candidates, key=lambda i: (taken[i], i))
        taken[chosen] += 1
        give(taker, givers[chosen])
