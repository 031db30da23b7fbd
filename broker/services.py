"""What the request handlers may use of their node, named and typed.

A handler gets a ``BrokerServices`` (through ``RequestContext.services``), never the
``Broker`` itself, so what it depends on is declared here and a handler can be run
in-process against services built from fakes (tests/broker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.errors import ErrorCode

from coordinator.diskless import BatchCoordinator
from coordinator.controller import Controller, ControllerError
from coordinator.group.service import GroupCoordinator
from coordinator.group_config import GroupConfigs
from coordinator.transaction.partition_adder import TransactionPartitionAdder
from coordinator.transaction.service import TransactionCoordinator
from protocol.apis import ApiKey
from protocol.build import make
from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs
from replication.fetch_session import FetchSessionCache
from replication.raft.leader_connection import LeaderConnection
from replication.replica_manager import ReplicaManager

from .broker_metrics import TopicMetrics
from .config import BrokerConfig
from .metadata_entries import MetadataEntries
from .metadata_follower import MetadataFollower
from .producer_ids import ProducerIdAllocator, ProducerIdsUnavailable
from .security.authorize import configure
from .share_groups import ShareGroupParts

if TYPE_CHECKING:  # pyarrow, which the capture loads, only where one is made
    from .capture import TraceCapture

log = logging.getLogger(__name__)


# How long a request waits for this node's newly elected controller to be active.
ACTIVATION_WAIT_S = 5.0


class ControllerChannel:
    """How this node asks the controller for changes: in-process when it is the active
    controller, over the network to the active one otherwise (``connection`` follows the
    quorum's leadership); a change counts once this node's metadata shows it."""

    def __init__(self, controller: Controller | None, connection: LeaderConnection,
                 follower: MetadataFollower | None) -> None:
        self.controller = controller
        self.connection = connection
        self.follower = follower
        # Topic name -> its creation under way (create_topic).
        self._creating: dict[str, asyncio.Future[ErrorCode]] = {}

    async def becomes_local(self) -> bool:
        """This node is the active controller, or its voter has just won an election and
        the controller becomes active within ACTIVATION_WAIT_S (it applies the log first).
        The node's connections already name it as the leader then: a request forwarded to
        itself would be answered on the connection it came in on only after the request
        that forwarded it, which waits for that answer."""
        if self.controller is None:
            return False
        return self.controller.active or await self.controller.wait_until_active(
            ACTIVATION_WAIT_S)

    async def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                           configs: dict[str, str] | None = None) -> ErrorCode:
        """Create a topic for the broker's own needs (auto-creation, internal topics); return
        the outcome once this broker's metadata shows it. Concurrent calls for one name
        share one creation: the first produces to a diskless topic ask for the batch
        coordinator's topic hundreds at a time, and each went to the controller (500
        CreateTopics queued on its connection, the loops of both held 0.4 s at a time)."""
        creating = self._creating.get(name)
        if creating is None:
            creating = asyncio.ensure_future(
                self._create_topic(name, partitions, replication_factor, configs))
            self._creating[name] = creating
            creating.add_done_callback(lambda _: self._creating.pop(name, None))
        # Shielded: one caller given up on (its request timed out) does not end the others'.
        return await asyncio.shield(creating)

    async def _create_topic(self, name: str, partitions: int, replication_factor: int,
                            configs: dict[str, str] | None) -> ErrorCode:
        if await self.becomes_local():
            try:
                await self.controller.create_topic(name, partitions, replication_factor,
                                                   configs or {})
                error = ErrorCode.none
            except ControllerError as e:
                error = e.error_code
        else:
            request = make(CreateTopicsRequest, timeout=30_000, validate_only=False, topics=(
                make(CreatableTopic, name=name, num_partitions=partitions,
                     replication_factor=replication_factor, assignments=(),
                     configs=tuple(make(CreatableTopicConfig, name=k, value=v)
                                   for k, v in (configs or {}).items())),))
            response = await self.connection.call(ApiKey.CREATE_TOPICS, request, 60)
            error = response.topics[0].error_code
        await self.catch_up()
        return error

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> range:
        """The next block of producer ids for this broker (broker.producer_ids); raises
        ProducerIdsUnavailable when the controller refuses (not registered yet, moving)."""
        if await self.becomes_local():
            try:
                return await self.controller.allocate_producer_ids(broker_id, broker_epoch)
            except ControllerError as e:
                raise ProducerIdsUnavailable(str(e)) from e
        response = await self.connection.call(ApiKey.ALLOCATE_PRODUCER_IDS, make(
            AllocateProducerIdsRequest, broker_id=broker_id, broker_epoch=broker_epoch), 30)
        if response.error_code != ErrorCode.none:
            raise ProducerIdsUnavailable(f"AllocateProducerIds: {response.error_code.name}")
        return range(response.producer_id_start,
                     response.producer_id_start + response.producer_id_len)

    async def forward(self, header: Any, request: Any) -> Any:
        """Send an admin request to the active controller unchanged; return its response."""
        return await self.connection.call(header.api_key, request, 60, header.api_version)

    async def catch_up(self) -> None:
        """Wait until this node has applied the controller's latest metadata (a
        controller-only node has no metadata to wait for), for at most the follower's
        timeout: past it the change an admin request made still stands (committed by the
        controller), so its answer goes out, as Kafka's does without waiting for brokers."""
        if self.follower is None:
            return
        try:
            await self.follower.catch_up()
        except TimeoutError:
            log.warning("answering before this broker applied the latest metadata (still "
                        "applying after the timeout)")


@dataclass(slots=True)
class BrokerServices:
    config: BrokerConfig
    # What this broker knows of the cluster, as applied from the metadata log.
    image: MetadataImage
    # The partitions this broker hosts.
    replicas: ReplicaManager
    # Effective broker configs and topic defaults (static settings and dynamic configs).
    dynamic_configs: DynamicConfigs
    # Each group's configs as they apply (set on the group, else the broker settings).
    group_configs: GroupConfigs
    # This node's controller role, or None when the controller runs elsewhere.
    controller: Controller | None
    controller_channel: ControllerChannel
    group_coordinator: GroupCoordinator | None
    transaction_coordinator: TransactionCoordinator | None
    batch_coordinator: BatchCoordinator | None
    producer_ids: ProducerIdAllocator
    capture: TraceCapture | None
    # The kipper.storage.mode values this broker can open.
    storage_modes: Collection[str]
    # Bytes and records per topic, counted by Produce and Fetch.
    topic_metrics: TopicMetrics = field(default_factory=TopicMetrics)
    # Metadata answers' partition entries, per topic (broker/metadata_entries.py).
    metadata_entries: MetadataEntries = field(default_factory=MetadataEntries)
    # Incremental fetch sessions (KIP-227) of consumers and followers fetching here.
    fetch_sessions: FetchSessionCache = field(default_factory=lambda: FetchSessionCache(1000))
    # How this broker, as a partition leader, adds partitions to transactions of producers
    # on transaction protocol version 2 (Produce v12+, TxnOffsetCommit v5+).
    transaction_partitions: TransactionPartitionAdder | None = None
    # Share groups (KIP-932): membership, share partitions' owner, share sessions.
    share: ShareGroupParts | None = None

    def __post_init__(self) -> None:
        # The ACLs arrive through the metadata; what they mean here is this node's setting.
        configure(self.image.acls, self.config)
        if self.controller is not None:
            configure(self.controller.image.acls, self.config)

    @property
    def controller_id(self) -> int:
        """What Metadata and DescribeCluster report as the controller: a live broker, as
        KRaft does (clients cannot reach controllers; every broker forwards their requests
        to the active one) — this one, which is certainly up: a broker that died stays
        registered (and would be named) until it is fenced, and clients wait for it."""
        live = [b.node_id for b in self.image.live_brokers()]
        if self.config.node_id in live or not live:
            return self.config.node_id
        return live[0]
