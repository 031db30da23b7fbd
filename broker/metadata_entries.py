"""The partition entries of Metadata answers, kept per topic until the topic changes.

Clients ask for every topic's metadata again and again (an admin client waiting for a
deletion polls it, every client refreshes it), and each answer built an entry per partition
anew: at 25,000 partitions that was most of a broker's CPU while a topic was deleted. An
entry depends only on its partition, the answer's version (the entity class), the topic's
storage mode and, for a partition any broker serves, the brokers serving it and the
client's AZ: the variant. A topic's entries are kept per variant while its ``version`` holds.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, field

from replication.cluster_metadata import TopicInfo


@dataclass
class _TopicEntries:
    topic: TopicInfo
    version: int
    by_variant: dict[Hashable, tuple] = field(default_factory=dict)


class MetadataEntries:
    def __init__(self) -> None:
        self._topics: dict[str, _TopicEntries] = {}

    def get(self, topic: TopicInfo, variant: Hashable) -> tuple | None:
        kept = self._topics.get(topic.name)
        if kept is None or kept.topic is not topic or kept.version != topic.version:
            return None
        return kept.by_variant.get(variant)

    def put(self, topic: TopicInfo, version: int, variant: Hashable, entries: tuple,
            topics: Collection[str]) -> None:
        """Keep ``entries``, built from ``topic`` at ``version``, unless it changed since;
        ``topics``: the names that exist (those of deleted topics are dropped)."""
        if topic.version != version:
            return
        kept = self._topics.get(topic.name)
        if kept is None or kept.topic is not topic or kept.version != version:
            kept = self._topics[topic.name] = _TopicEntries(topic, version)
            if len(self._topics) > len(topics):
                for name in [name for name in self._topics if name not in topics]:
                    del self._topics[name]
        kept.by_variant[variant] = entries
