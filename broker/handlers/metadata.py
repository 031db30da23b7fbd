from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from coordinator.controller import ControllerError, validate_topic_name
from protocol.apis import ApiKey
from protocol.build import entity_maker
from replication.acls import AclOperation, ResourceType
from replication.cluster_metadata import BrokerInfo, PartitionInfo, TopicInfo
from replication.leaderless_partition import diskless_servers
from replication.loop_slice import LoopSlice
from storage.manager import is_internal_topic

from ..security.authorize import OMITTED, allowed, authorized_operations, cluster_operations
from ..client_az import client_az
from ..diskless_routing import diskless_leader
from .registry import RequestContext, handles

log = logging.getLogger(__name__)
# How long the entries of thousands of partitions are built before the handler yields to the
# event loop (5,000 took 0.3-0.9 s on the loaded 2-core machine).
ENTRY_SLICE_S = 0.005
# Responses of at least this many partitions are encoded off the event loop
# (RequestContext.encode_off_loop): 25,000 took 40 ms to encode, 120 ms on a loaded machine.
ENCODE_OFF_LOOP_PARTITIONS = 1000


def broker_entries(ctx: RequestContext, entity: str, id_field: str = "node_id") -> tuple:
    """The live brokers as clients of this listener reach them (brokers without it left
    out, as Kafka does)."""
    return tuple(ctx.response(entity, **{id_field: b.node_id}, host=host, port=port,
                              rack=b.rack)
                 for b in ctx.services.image.live_brokers()
                 if (endpoint := b.endpoint(ctx.listener_name)) is not None
                 for host, port in (endpoint,))


async def _topic_entry(ctx: RequestContext, topic: TopicInfo, with_operations: bool,
                       turns: LoopSlice) -> object:
    return ctx.response("MetadataResponseTopic", error_code=ErrorCode.none, name=topic.name,
                        topic_id=topic.topic_id, is_internal=is_internal_topic(topic.name),
                        partitions=await _partition_entries(ctx, topic, turns),
                        topic_authorized_operations=authorized_operations(
                            ctx, with_operations, ResourceType.TOPIC, topic.name))


async def _partition_entries(ctx: RequestContext, topic: TopicInfo, turns: LoopSlice) -> tuple:
    """The topic's partition entries, kept from an earlier answer if it has not changed
    (broker.metadata_entries)."""
    # From ``topic`` as it was, not the image: the topic may be deleted between two turns.
    version = topic.version
    storage_mode = ctx.services.replicas.configs.log_config(topic).storage_mode
    entry_class = ctx.response_class("MetadataResponsePartition")
    # Who may serve a leaderless partition, and where the client is: once per topic.
    servers = diskless_servers(ctx.services.image)
    az = client_az(ctx.header.client_id)
    variant = (entry_class, storage_mode, tuple((b.node_id, b.rack) for b in servers), az)
    kept = ctx.services.metadata_entries.get(topic, variant)
    if kept is not None:
        return kept
    # Built without ``make``'s per-entity work: 10,000 partitions' entries took 90 ms.
    entry = entity_maker(entry_class, *PARTITION_FIELDS)
    partitions = []
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
        await turns.pause()
        partitions.append(_partition_entry(entry, p, storage_mode, servers, az))
    entries = tuple(partitions)
    ctx.services.metadata_entries.put(topic, version, variant, entries,
                                      ctx.services.image.topics)
    return entries


PARTITION_FIELDS = ("error_code", "partition_index", "leader_id", "leader_epoch", "replica_nodes",
                    "isr_nodes", "offline_replicas")


def _partition_entry(entry: Callable[..., object], p: PartitionInfo, storage_mode: str,
                     servers: list[BrokerInfo], az: str | None) -> object:
    """``entry``: builds a MetadataResponsePartition from PARTITION_FIELDS' values."""
    leader, replicas, isr = p.leader, tuple(p.replicas), tuple(p.isr)
    if p.served_anywhere(storage_mode):
        # Leaderless: name the broker this client should use (KIP-1181); a Metadata
        # request has no rack, so only the client id (``az``) can say where the client is.
        leader = diskless_leader(p.topic, p.partition, servers, az)
        # Every broker serving the partition is a replica a Fetch may send a consumer to
        # (KIP-392); clients such as kafka-python follow only a replica listed here.
        replicas = isr = (leader, *(b.node_id for b in servers if b.node_id != leader))
    return entry(ErrorCode.none, p.partition, leader, p.leader_epoch, replicas, isr, ())


def _error_entry(ctx: RequestContext, name: str | None, error: ErrorCode, topic_id=None) -> object:
    return ctx.response("MetadataResponseTopic", error_code=error, name=name,
                        topic_id=topic_id, is_internal=False, partitions=(),
                        topic_authorized_operations=OMITTED)


@handles(ApiKey.METADATA)
async def metadata(ctx: RequestContext, request) -> object:
    image = ctx.services.image
    # v0 asks for all topics with an empty list; v1+ with null.
    wants_all = request.topics is None or (ctx.version == 0 and not request.topics)
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)
    # v8+ (Metadata asks for the cluster's operations in v8-v10 only; DescribeCluster since).
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    topics = []
    # Thousands of partitions' entries are built between turns of the event loop.
    turns = LoopSlice(ENTRY_SLICE_S)
    if wants_all:
        # The topics the client may not describe are left out.
        topics = [await _topic_entry(ctx, t, with_operations, turns)
                  for t in sorted(image.topics.values(), key=lambda t: t.name)
                  if _describable(ctx, t.name)]
    else:
        for requested in request.topics:
            name = requested.name
            topic_id = getattr(requested, "topic_id", None)
            if name is None and topic_id is not None:
                found = image.topics_by_id.get(topic_id)
                if found is not None and not _describable(ctx, found.name):
                    topics.append(_error_entry(ctx, None, ErrorCode.topic_authorization_failed,
                                               topic_id))
                    continue
                topics.append(await _topic_entry(ctx, found, with_operations, turns) if found
                              else _error_entry(ctx, None, ErrorCode.unknown_topic_id, topic_id))
                continue
            if not _describable(ctx, name):
                # Whether it exists is not revealed either.
                topics.append(_error_entry(ctx, name, ErrorCode.topic_authorization_failed))
                continue
            topics.append(await _lookup_or_create(ctx, name, allow_auto_create,
                                                  with_operations, turns))
    ctx.encode_off_loop = sum(len(t.partitions) for t in topics) >= ENCODE_OFF_LOOP_PARTITIONS
    return ctx.response("MetadataResponse", throttle_time=0,
                        brokers=broker_entries(ctx, "MetadataResponseBroker"),
                        cluster_id=ctx.services.config.cluster_id,
                        controller_id=ctx.services.controller_id, topics=tuple(topics),
                        cluster_authorized_operations=cluster_operations(ctx, getattr(
                            request, "include_cluster_authorized_operations", False)))


def _describable(ctx: RequestContext, topic: str) -> bool:
    return allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)


async def _lookup_or_create(ctx: RequestContext, name: str, allow_auto_create: bool,
                            with_operations: bool, turns: LoopSlice) -> object:
    topic = ctx.services.image.topics.get(name)
    if topic is not None:
        return await _topic_entry(ctx, topic, with_operations, turns)
    try:
        validate_topic_name(name)
    except ControllerError:
        return _error_entry(ctx, name, ErrorCode.invalid_topic_exception)
    # An internal topic is created by what owns it, with its own replication factor and
    # configs: one auto-created with the defaults (e.g. __diskless-metadata on a single
    # replica) would tie that state to one broker's disk.
    if not (allow_auto_create and ctx.services.config.auto_create_topics) \
            or is_internal_topic(name):
        return _error_entry(ctx, name, ErrorCode.unknown_topic_or_partition)
    if not (allowed(ctx, AclOperation.CREATE, ResourceType.CLUSTER)
            or allowed(ctx, AclOperation.CREATE, ResourceType.TOPIC, name)):
        return _error_entry(ctx, name, ErrorCode.topic_authorization_failed)
    error = await ctx.services.controller_channel.create_topic(name)
    if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
        log.warning("auto-creating topic %r failed: %s", name, error.name)
        return _error_entry(ctx, name, error)
    log.info("auto-created topic %r", name)
    # Kafka answers LEADER_NOT_AVAILABLE right after creation; the client retries.
    return _error_entry(ctx, name, ErrorCode.leader_not_available)
