"""ISR changes go to the controller together: after a restart the leader of thousands of
partitions takes its followers back into every ISR at once, and one AlterPartition per
partition queued thousands of round trips (on the connection heartbeats used: brokers were
fenced)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kio.schema.alter_partition.v3.response import AlterPartitionResponse, PartitionData, TopicData
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.static_configs import dynamic_configs
from protocol.apis import ApiKey
from protocol.build import make
from protocol.internal import ClusterCredentials
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ISR_PROPOSALS_PER_REQUEST, ReplicaManager
from storage.manager import LogManager

LEADER, FOLLOWER = 1, 2
TOPIC = "isr-proposals"


class Controller:
    """Accepts every ISR change, as the controller would, and keeps the requests."""

    def __init__(self) -> None:
        self.requests: list = []

    async def call(self, api_key, request, timeout: float):
        assert api_key == ApiKey.ALTER_PARTITION
        self.requests.append(request)
        await asyncio.sleep(0.01)
        return make(AlterPartitionResponse, throttle_time=0, error_code=ErrorCode.none, topics=tuple(
            make(TopicData, topic_id=topic.topic_id, partitions=tuple(
                make(PartitionData, partition_index=asked.partition_index,
                     error_code=ErrorCode.none, leader_id=LEADER,
                     leader_epoch=asked.leader_epoch,
                     isr=tuple(b.broker_id for b in asked.new_isr_with_epochs),
                     leader_recovery_state=0, partition_epoch=asked.partition_epoch + 1)
                for asked in topic.partitions))
            for topic in request.topics))


def broker_records(fenced: frozenset[int] = frozenset()) -> list[dict]:
    return [{"type": "broker", "node_id": node, "host": "127.0.0.1", "port": 9000 + node,
             "epoch": 1, "fenced": node in fenced} for node in (LEADER, FOLLOWER)]


async def test_caught_up_followers_of_many_partitions_join_their_isrs_in_few_requests(
        tmp_path: Path):
    count = ISR_PROPOSALS_PER_REQUEST + 100
    image = MetadataImage()
    config = BrokerConfig(node_id=LEADER, data_dir=tmp_path)
    controller = Controller()
    replicas = ReplicaManager(LEADER, image, LogManager(tmp_path), dynamic_configs(config, image),
                              NodeClient("test", ClusterCredentials(LEADER, "unused"), traffic=None),
                              controller)
    records = [*broker_records(), {"type": "topic", "name": TOPIC, "id": str(uuid.uuid4()),
                                   "configs": {}}] + [
        {"type": "partition", "topic": TOPIC, "partition": index,
         "replicas": [LEADER, FOLLOWER], "isr": [LEADER], "leader": LEADER,
         "leader_epoch": 0, "partition_epoch": 0} for index in range(count)]
    for offset, record in enumerate(records):
        image.apply(offset, record)
        replicas.on_metadata_record(record)
    try:
        partitions = [replicas.get(TOPIC, index) for index in range(count)]
        for partition in partitions:  # the follower fetches at the leader's log end
            partition.record_follower_fetch(FOLLOWER, partition.log.log_end_offset)
        async with asyncio.timeout(10):
            while any(partition.isr != [LEADER, FOLLOWER] for partition in partitions):
                await asyncio.sleep(0.01)
        assert [sum(len(t.partitions) for t in r.topics) for r in controller.requests] == [
            ISR_PROPOSALS_PER_REQUEST, 100]
        assert all(partition.partition_epoch == 1 for partition in partitions)
    finally:
        await replicas.close()


async def test_a_fenced_follower_is_not_proposed_for_the_isr(tmp_path: Path):
    """A fenced broker's empty replica of an empty partition holds "everything": the leader
    proposed it, the controller refused (INELIGIBLE_REPLICA), every round while it stayed
    fenced. As in Kafka, the leader proposes only eligible replicas, and proposes them as
    soon as their broker is unfenced."""
    image = MetadataImage()
    config = BrokerConfig(node_id=LEADER, data_dir=tmp_path)
    controller = Controller()
    replicas = ReplicaManager(LEADER, image, LogManager(tmp_path), dynamic_configs(config, image),
                              NodeClient("test", ClusterCredentials(LEADER, "unused"), traffic=None),
                              controller)
    records = [*broker_records(fenced=frozenset({FOLLOWER})),
               {"type": "topic", "name": TOPIC, "id": str(uuid.uuid4()), "configs": {}},
               {"type": "partition", "topic": TOPIC, "partition": 0, "replicas": [LEADER, FOLLOWER],
                "isr": [LEADER], "leader": LEADER, "leader_epoch": 0, "partition_epoch": 0}]
    for offset, record in enumerate(records):
        image.apply(offset, record)
        replicas.on_metadata_record(record)
    try:
        partition = replicas.get(TOPIC, 0)
        partition.record_follower_fetch(FOLLOWER, 0)
        partition.maybe_expand_isr()
        await asyncio.sleep(0.05)
        assert controller.requests == [] and partition.isr == [LEADER]
        # Unfenced: the leader proposes it at once, not at its next periodic check.
        unfenced = {"type": "unfence_broker", "node_id": FOLLOWER}
        image.apply(len(records), unfenced)
        replicas.on_metadata_record(unfenced)
        async with asyncio.timeout(5):
            while partition.isr != [LEADER, FOLLOWER]:
                await asyncio.sleep(0.01)
    finally:
        await replicas.close()
