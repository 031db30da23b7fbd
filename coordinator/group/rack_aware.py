"""What a group assignor knows of the topics it assigns, and where their partitions can be
read from: the input of rack-aware assignment (KIP-881's, for the KIP-848 assignors).

A partition of a classic or active-tiered topic is read from its replicas (the leader, or a
follower in the consumer's AZ, KIP-392), so it is local to the racks of its replicas. A
diskless partition is served by any broker (KIP-1163 leaderless, KIP-1181 AZ routing), so it is
local to every rack that has a live broker. A member whose ``rack`` is among a partition's racks
fetches it without crossing an AZ; ``prefers`` says so, and assignors use it to choose among
members that are otherwise equal.

Any group kind's assignor (consumer groups here, share groups elsewhere) reads topics through
``TopicsView`` and partitions through ``SubscribedTopic``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from replication.cluster_metadata import MetadataImage, TopicInfo

DISKLESS = "diskless"


@dataclass(frozen=True, slots=True)
class SubscribedTopic:
    topic_id: uuid.UUID
    name: str
    # The racks each partition is local to, by partition index (0..n-1).
    partition_racks: tuple[frozenset[str], ...]

    @property
    def partitions(self) -> int:
        return len(self.partition_racks)


class TopicsView(Protocol):
    """The cluster's topics as a group coordinator sees them."""

    def version(self) -> int:
        """Changes whenever topics, partitions or brokers may have: what a cache keys on."""

    def topic_names(self) -> Iterable[str]: ...

    def topic(self, name: str) -> SubscribedTopic | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> SubscribedTopic | None: ...


class ClusterTopics:
    """``TopicsView`` over the broker's metadata image; ``storage_mode`` names a topic's mode."""

    def __init__(self, image: MetadataImage, storage_mode: Callable[[str], str]) -> None:
        self.image = image
        self.storage_mode = storage_mode

    def version(self) -> int:
        return self.image.next_offset

    def topic_names(self) -> Iterable[str]:
        return self.image.topics.keys()

    def topic(self, name: str) -> SubscribedTopic | None:
        info = self.image.topics.get(name)
        return None if info is None else self._subscribed(info)

    def topic_by_id(self, topic_id: uuid.UUID) -> SubscribedTopic | None:
        info = self.image.topics_by_id.get(topic_id)
        return None if info is None else self._subscribed(info)

    def _subscribed(self, info: TopicInfo) -> SubscribedTopic:
        rack_of = {b.node_id: b.rack for b in self.image.brokers.values() if b.rack}
        if self.storage_mode(info.name) == DISKLESS:
            every_rack = frozenset(b.rack for b in self.image.live_brokers() if b.rack)
            racks = [every_rack] * len(info.partitions)
        else:
            racks = [frozenset(rack_of[r] for r in info.partitions[p].replicas if r in rack_of)
                     for p in sorted(info.partitions)]
        return SubscribedTopic(info.topic_id, info.name, tuple(racks))


class NoTopics:
    """A coordinator that assigns nothing (classic-only tests)."""

    def version(self) -> int:
        return 0

    def topic_names(self) -> Iterable[str]:
        return ()

    def topic(self, name: str) -> SubscribedTopic | None:
        return None

    def topic_by_id(self, topic_id: uuid.UUID) -> SubscribedTopic | None:
        return None


def prefers(member_rack: str | None, partition_racks: frozenset[str]) -> bool:
    """True when a member in ``member_rack`` reads the partition within its own AZ."""
    return member_rack is not None and member_rack in partition_racks


def rack_aware(member_racks: Iterable[str | None], topics: Iterable[SubscribedTopic]) -> bool:
    """Kafka's rule: racks matter only when members declare racks, partitions have them, and
    the two overlap without every partition being local to every member."""
    racks = {rack for rack in member_racks if rack is not None}
    if not racks:
        return False
    partition_racks = [r for topic in topics for r in topic.partition_racks]
    return any(racks & r for r in partition_racks) and not all(
        racks <= r for r in partition_racks)
