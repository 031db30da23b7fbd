"""The controller's own APIs: broker registration, heartbeats, ISR changes and metadata
snapshots (KRaft's)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerError, IsrChange
from coordinator.metadata_log import SnapshotId
from protocol.apis import ApiKey
from replication.cluster_metadata import METADATA_TOPIC

from .registry import RequestContext, handles


@handles(ApiKey.BROKER_REGISTRATION)
async def broker_registration(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None or not request.listeners:
        error = ErrorCode.not_controller if controller is None else ErrorCode.invalid_request
        return ctx.response("BrokerRegistrationResponse", throttle_time=0, error_code=error,
                            broker_epoch=-1)
    # The first listener is the one other nodes connect to (the inter-broker listener).
    listener = request.listeners[0]
    try:
        epoch = await controller.register_broker(
            request.broker_id, listener.host, listener.port, request.rack,
            {entry.name: (entry.host, entry.port) for entry in request.listeners})
    except ControllerError as e:
        return ctx.response("BrokerRegistrationResponse", throttle_time=0,
                            error_code=e.error_code, broker_epoch=-1)
    return ctx.response("BrokerRegistrationResponse", throttle_time=0,
                        error_code=ErrorCode.none, broker_epoch=epoch)


@handles(ApiKey.BROKER_HEARTBEAT)
async def broker_heartbeat(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None:
        return ctx.response("BrokerHeartbeatResponse", throttle_time=0,
                            error_code=ErrorCode.not_controller, is_caught_up=False,
                            is_fenced=True, should_shut_down=False)
    try:
        error, fenced = await controller.heartbeat(
            request.broker_id, request.broker_epoch, request.want_fence, request.want_shut_down,
            log_dir_offline=bool(request.offline_log_dirs))
    except ControllerError as e:
        error, fenced = e.error_code, True
    return ctx.response("BrokerHeartbeatResponse", throttle_time=0, error_code=error,
                        is_caught_up=True, is_fenced=fenced,
                        should_shut_down=request.want_shut_down)


@handles(ApiKey.ALTER_PARTITION)
async def alter_partition(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None:
        return ctx.response("AlterPartitionResponse", throttle_time=0,
                            error_code=ErrorCode.not_controller, topics=())
    changes = [IsrChange(topic.topic_id, asked.partition_index, asked.leader_epoch,
                         [b.broker_id for b in asked.new_isr_with_epochs], asked.partition_epoch)
               for topic in request.topics for asked in topic.partitions]
    try:
        outcomes = iter(await controller.alter_partitions(request.broker_id, changes))
    except ControllerError as e:
        outcomes = iter([(e.error_code, None)] * len(changes))
    topics = []
    for topic in request.topics:
        results = []
        for asked in topic.partitions:
            error, info = next(outcomes)
            results.append(ctx.response(
                "PartitionData", partition_index=asked.partition_index, error_code=error,
                leader_id=info.leader if info else -1,
                leader_epoch=info.leader_epoch if info else -1,
                isr=tuple(info.isr) if info else (), leader_recovery_state=0,
                partition_epoch=info.partition_epoch if info else -1))
        topics.append(ctx.response("TopicData", topic_id=topic.topic_id, partitions=tuple(results)))
    return ctx.response("AlterPartitionResponse", throttle_time=0, error_code=ErrorCode.none,
                        topics=tuple(topics))


# Most snapshot bytes one FetchSnapshot answer carries, whatever the request allows.
SNAPSHOT_CHUNK_BYTES = 8 << 20


@handles(ApiKey.FETCH_SNAPSHOT)
async def fetch_snapshot(ctx: RequestContext, request) -> object:
    """A chunk of a metadata snapshot (KIP-630), for a broker that is sent its id in a
    Fetch of ``__cluster_metadata`` (broker.handlers.fetch)."""
    controller = ctx.services.controller
    if controller is None:
        return ctx.response("FetchSnapshotResponse", throttle_time=0,
                            error_code=ErrorCode.not_controller, topics=())
    topics = []
    for topic in request.topics:
        chunks = [await _snapshot_chunk(ctx, controller, topic.name, asked, request.max_bytes)
                  for asked in topic.partitions]
        topics.append(ctx.response("TopicSnapshot", name=topic.name, partitions=tuple(chunks)))
    return ctx.response("FetchSnapshotResponse", throttle_time=0, error_code=ErrorCode.none,
                        topics=tuple(topics))


async def _snapshot_chunk(ctx: RequestContext, controller: Controller, topic: str, asked,
                          max_bytes: int) -> object:
    def answer(error: ErrorCode, size: int = -1, data: bytes = b"") -> object:
        return ctx.response(
            "PartitionSnapshot", index=asked.partition, error_code=error,
            snapshot_id=ctx.response("SnapshotId", end_offset=asked.snapshot_id.end_offset,
                                     epoch=asked.snapshot_id.epoch),
            current_leader=ctx.response("LeaderIdAndEpoch", leader_id=ctx.services.config.node_id,
                                        leader_epoch=0),
            size=size, position=asked.position, unaligned_records=data)

    if topic != METADATA_TOPIC or asked.partition != 0:
        return answer(ErrorCode.unknown_topic_or_partition)
    path = controller.log.snapshot_path(SnapshotId(asked.snapshot_id.end_offset,
                                                   asked.snapshot_id.epoch))

    def read() -> tuple[int, bytes] | None:
        try:
            with open(path, "rb") as snapshot:
                size = snapshot.seek(0, 2)
                if not 0 <= asked.position <= size:
                    return size, b""
                snapshot.seek(asked.position)
                return size, snapshot.read(min(max(max_bytes, 1), SNAPSHOT_CHUNK_BYTES))
        except FileNotFoundError:
            return None

    found = await asyncio.to_thread(read)
    if found is None:
        return answer(ErrorCode.snapshot_not_found)
    size, data = found
    if not 0 <= asked.position <= size:
        return answer(ErrorCode.position_out_of_range, size)
    return answer(ErrorCode.none, size, data)
