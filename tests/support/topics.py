"""Topic creation and partition leadership, through a real client's admin API (confluent-kafka)."""

from __future__ import annotations

import re
import uuid

import pytest

from .wait import wait_until


def partition_metadata(bootstrap: str, topic: str, partition: int = 0):
    """confluent-kafka's PartitionMetadata (leader, replicas, isrs), or None if unknown
    (also when no broker answered in time: one just back from a network cut may still be
    catching up with the metadata, and callers poll)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    except KafkaException as error:
        if error.args[0].code() != KafkaError._TIMED_OUT:
            raise
        return None
    return metadata.topics[topic].partitions.get(partition)


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: dict[str, str] | None = None, *, in_sync: bool = False) -> None:
    """Create a topic and wait until every partition has a leader, and with ``in_sync`` until
    every replica is in the ISR too (tests that count replication traffic need all three)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    try:
        admin.create_topics([NewTopic(name, partitions, replication_factor,
                                      config=config or {})])[name].result(30)
    except KafkaException as error:
        # The client retried a CreateTopics whose answer it lost (the controller moved, as
        # Kafka's admin clients also do): the first attempt created it. Names are unique.
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise

    def ready() -> bool:
        topic = admin.list_topics(name, timeout=5).topics.get(name)
        return (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 and (not in_sync or len(p.isrs) == replication_factor)
                        for p in topic.partitions.values()))
    wait_until(ready, timeout=30, interval=0.2)


@pytest.fixture
def topic_name(request) -> str:
    return f"t-{re.sub(r'[^a-zA-Z0-9._-]', '-', request.node.name[:40])}-{uuid.uuid4().hex[:8]}"
