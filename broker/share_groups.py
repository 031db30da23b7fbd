"""A broker's share-group parts (KIP-932), built from its settings: the group coordinator's
share groups, the share coordinator owning share partitions in ``__share_group_state``, the
route to other owners, and the share sessions of the members fetching here; and the group
configs (KIP-848/KIP-932) they follow. docs/share-groups.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.group.service import GroupCoordinator
from coordinator.group.timer import AsyncioTimer
from coordinator.group_config import GroupConfig, GroupConfigs, ShareGroupConfig
from coordinator.internal_topic import InternalTopicLog, TopicCreator
from coordinator.share.coordinator import ShareCoordinator, ShareCoordinatorSettings
from coordinator.share.membership import ShareGroupManager, ShareMembershipSettings
from coordinator.share.service import ShareGroups
from coordinator.share.share_partition import ShareLimits
from protocol.internal import InternalApiKey
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ReplicaManager

from .config import BrokerConfig
from .share_owners import ShareOwners
from .share_sessions import ShareSessions

# Kafka's group.share.max.share.sessions default.
MAX_SHARE_SESSIONS = 2000


@dataclass
class ShareGroupParts:
    groups: ShareGroups
    coordinator: ShareCoordinator
    owners: ShareOwners
    sessions: ShareSessions

    async def start(self) -> None:
        await self.coordinator.start()

    async def stop(self) -> None:
        await self.coordinator.stop()

    def on_metadata_change(self) -> None:
        # Share groups themselves follow the group coordinator's partitions (its registry).
        self.coordinator.on_metadata_change()


def share_config(config: BrokerConfig) -> ShareGroupConfig:
    return ShareGroupConfig(
        record_lock_duration_ms=config.group_share_record_lock_duration_ms,
        delivery_count_limit=config.group_share_delivery_count_limit,
        partition_max_record_locks=config.group_share_partition_max_record_locks,
        session_timeout_ms=config.group_share_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        max_size=config.group_share_max_size,
        auto_offset_reset=config.group_share_auto_offset_reset,
        state_topic_num_partitions=config.share_coordinator_state_topic_num_partitions)


def group_configs(config: BrokerConfig, image: MetadataImage) -> GroupConfigs:
    """Each group's configs: set on the group (the metadata image) over these settings."""
    return GroupConfigs(image, GroupConfig(
        offsets_topic_segment_bytes=config.offsets_topic_segment_bytes,
        consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
        consumer_reconciling_heartbeat_interval_ms=(
            config.group_consumer_reconciling_heartbeat_interval_ms),
        consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
        consumer_assignors=tuple(
            a.strip() for a in config.group_consumer_assignors.split(","))),
        share_config(config))


def share_group_parts(config: BrokerConfig, image: MetadataImage, replicas: ReplicaManager,
                      create_topic: TopicCreator, nodes: NodeClient,
                      group_coordinator: GroupCoordinator,
                      configs: GroupConfigs) -> ShareGroupParts:
    settings = configs.share
    timer = AsyncioTimer()
    store = InternalTopicLog(image, create_topic, replicas, settings.state_topic())
    coordinator = ShareCoordinator(ShareCoordinatorSettings(
        ShareLimits(settings.delivery_count_limit, settings.partition_max_record_locks),
        configs.share_group), store, timer)
    manager = ShareGroupManager(
        ShareMembershipSettings(settings.max_size, configs.share_group),
        timer, _partition_count(image), _serving_racks(image, replicas),
        group_coordinator.store.partition_for)
    owners = ShareOwners(config.node_id, coordinator, store,
                         lambda host, port, body, timeout_s: nodes.connection(
                             host, port, "share-partitions").call(
                                 InternalApiKey.SHARE_PARTITION_CALL, body, timeout_s))
    return ShareGroupParts(ShareGroups(group_coordinator, manager), coordinator,
                           owners, ShareSessions(MAX_SHARE_SESSIONS,
                                                 settings.session_timeout_ms / 1000))


def _partition_count(image: MetadataImage) -> Callable[[str], int | None]:
    def count(topic: str) -> int | None:
        info = image.topics.get(topic)
        return len(info.partitions) if info is not None else None
    return count


def _serving_racks(image: MetadataImage, replicas: ReplicaManager
                   ) -> Callable[[str, int], frozenset[str] | None]:
    """The racks a member can fetch a partition from without leaving its AZ: a leader's
    partition only from its leader's; a diskless one from any (every broker serves it)."""
    def racks(topic: str, partition: int) -> frozenset[str] | None:
        if replicas.log_config(topic).storage_mode == "diskless":
            return None
        info = image.topics[topic].partitions.get(partition)
        leader = image.brokers.get(info.leader) if info is not None else None
        return frozenset({leader.rack}) if leader is not None and leader.rack else frozenset()
    return racks
