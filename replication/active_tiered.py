"""What the active-tiered engine (storage.active_tiered) needs from the broker around it:
partition state (ISR, waking waiters) and the ``__remote_wal_log_metadata`` topic, which
the ``topic`` scheme writes with ordinary Produce requests and reads with ordinary Fetch
requests to the leader of its partition, like KIP-405's ProducerManager/ConsumerManager.

The follower side of replication needs nothing here: LeaderFetcher hands every fetched
record set to the log, and the engine's ``append_as_follower`` turns pointers into
downloads. Nor does leadership: the partition tells its log (``ReplicatedPartition.
update_info`` → ``PartitionLog.on_leadership_change``).
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v11.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.apis import ApiKey
from protocol.build import make
from protocol.records import build_batch
from storage.active_tiered import WAL_METADATA_TOPIC

from .cluster_metadata import MetadataImage
from .node_client import NodeClient, NodeConnection
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)
METADATA_TOPIC_PARTITION = 0
FETCH_MAX_WAIT_MS = 500
# Refs older than the WAL objects they name are useless; a day bounds a topic nobody reads.
# Classic whatever the broker's default mode: the metadata cannot travel by itself.
METADATA_TOPIC_CONFIGS = {"kipper.storage.mode": "classic", "retention.ms": str(24 * 3600 * 1000),
                          "segment.ms": str(3600 * 1000)}


# (name, partitions, replication factor, configs) -> the controller's answer.
CreateTopic = Callable[[str, int, int, dict[str, str]], Awaitable[ErrorCode]]


class BrokerReplicaLink:
    def __init__(self, replicas: ReplicaManager, image: MetadataImage, nodes: NodeClient,
                 create_topic: CreateTopic) -> None:
        self.replicas = replicas
        self.image = image
        self.nodes = nodes
        self.create_topic = create_topic

    # -- partition state -----------------------------------------------------------------

    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        found = self.replicas.partitions.get((topic, partition))
        if found is None or not found.is_leader:
            return []
        return [r for r in found.isr if r != self.replicas.node_id]

    def uploaded(self, topic: str, partition: int) -> None:
        found = self.replicas.partitions.get((topic, partition))
        if found is not None:
            found.maybe_advance_high_watermark()
            found.notify_waiters()

    # -- the metadata topic --------------------------------------------------------------

    async def _leader(self, create: bool, purpose: str = "wal-metadata-produce") -> NodeConnection:
        """A connection to the partition's leader; produce and fetch get one each, as a
        connection answers in request order and the fetch long-polls."""
        image = self.image
        topic = image.topics.get(WAL_METADATA_TOPIC)
        if topic is None:
            if not create:
                raise LookupError(f"{WAL_METADATA_TOPIC} does not exist yet")
            replication = min(3, len(image.live_brokers()))
            error = await self.create_topic(WAL_METADATA_TOPIC, 1, replication,
                                                   METADATA_TOPIC_CONFIGS)
            if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
                raise LookupError(f"cannot create {WAL_METADATA_TOPIC}: {error.name}")
            topic = image.topics[WAL_METADATA_TOPIC]
        leader = image.brokers.get(topic.partitions[METADATA_TOPIC_PARTITION].leader)
        if leader is None:
            raise LookupError(f"{WAL_METADATA_TOPIC} has no leader")
        return self.nodes.connection(leader.host, leader.port, purpose)

    async def ensure_topic(self) -> None:
        await self._leader(create=True)

    async def produce(self, values: list[bytes]) -> None:
        """One batch of records (acks=all, as metadata must survive the leader)."""
        batch = build_batch([(None, value) for value in values],
                            time.time_ns() // 1_000_000)
        request = make(ProduceRequest, transactional_id=None, acks=-1, timeout=30_000,
                       topic_data=(make(TopicProduceData, name=WAL_METADATA_TOPIC, partition_data=(
                           make(PartitionProduceData, index=METADATA_TOPIC_PARTITION,
                                records=bytes(batch)),)),))
        connection = await self._leader(create=True)
        response = await connection.call(ApiKey.PRODUCE, request, 35)
        error = response.responses[0].partition_responses[0].error_code
        if error != ErrorCode.none:
            raise LookupError(f"producing to {WAL_METADATA_TOPIC}: {error.name}")

    async def fetch(self, offset: int) -> tuple[bytes, int]:
        connection = await self._leader(create=False, purpose="wal-metadata-fetch")
        request = make(FetchRequest, replica_id=-1, max_wait=FETCH_MAX_WAIT_MS, min_bytes=1,
                       max_bytes=4 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       forgotten_topics_data=(), rack_id="", topics=(make(
                           FetchTopic, topic=WAL_METADATA_TOPIC, partitions=(make(
                               FetchPartition, partition=METADATA_TOPIC_PARTITION,
                               current_leader_epoch=-1, fetch_offset=offset,
                               last_fetched_epoch=-1, log_start_offset=-1,
                               partition_max_bytes=1 << 20),)),))
        response = await connection.call(ApiKey.FETCH, request, FETCH_MAX_WAIT_MS / 1000 + 30)
        data = response.responses[0].partitions[0]
        if data.error_code == ErrorCode.offset_out_of_range:
            return b"", max(data.log_start_offset, 0)
        if data.error_code != ErrorCode.none:
            raise LookupError(f"fetching {WAL_METADATA_TOPIC}: {data.error_code.name}")
        return data.records or b"", offset
