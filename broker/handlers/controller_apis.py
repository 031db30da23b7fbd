"""The controller's own APIs: broker registration, heartbeats, producer id blocks, ISR changes
and metadata snapshots (KRaft's), shared partitions' stream commits (KIP-1183, internal), answered by the active controller (NOT_CONTROLLER elsewhere); and the
controller quorum's (KIP-595): Vote, BeginQuorumEpoch, EndQuorumEpoch, the Fetch of
``__cluster_metadata`` (voters and brokers alike) and DescribeQuorum."""

from __future__ import annotations

import asyncio
import time
import uuid

from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerError, IsrChange
from coordinator.metadata_log import SnapshotId
from protocol.apis import ApiKey
from protocol.build import millis
from protocol.internal import InternalApiKey, JsonBody
from replication.acls import AclOperation, ResourceType
from replication.cluster_metadata import METADATA_TOPIC
from replication.raft import RaftFetchResponse
from replication.raft.wire import (
    decode_request,
    encode_ack,
    encode_vote_response,
    fetch_partition_fields,
    refusal,
)
from storage.shared import StreamCommit

from ..security.authorize import allowed
from .admin import ClusterGate, handles_on_controller
from .registry import RequestContext, handles


def _active(ctx: RequestContext) -> Controller | None:
    controller = ctx.services.controller
    return controller if controller is not None and controller.active else None


@handles(ApiKey.BROKER_REGISTRATION)
async def broker_registration(ctx: RequestContext, request) -> object:
    controller = _active(ctx)
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
    controller = _active(ctx)
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


@handles(ApiKey.ALLOCATE_PRODUCER_IDS)
async def allocate_producer_ids(ctx: RequestContext, request) -> object:
    controller = _active(ctx)
    block, error = range(-1, -1), ErrorCode.not_controller
    if controller is not None:
        try:
            block, error = await controller.allocate_producer_ids(
                request.broker_id, request.broker_epoch), ErrorCode.none
        except ControllerError as e:
            error = e.error_code
    return ctx.response("AllocateProducerIdsResponse", throttle_time=0, error_code=error,
                        producer_id_start=block.start, producer_id_len=len(block))


@handles(ApiKey.ALTER_PARTITION)
async def alter_partition(ctx: RequestContext, request) -> object:
    controller = _active(ctx)
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


@handles(InternalApiKey.STORAGE_SPAN)
async def storage_span(ctx: RequestContext, request: JsonBody) -> JsonBody:
    """A partition leader's next storage span of a live mode switch (docs/mode-switch.md)."""
    controller = _active(ctx)
    if controller is None:
        return JsonBody({"error_code": int(ErrorCode.not_controller)})
    try:
        asked = request.value
        error = await controller.record_storage_span(
            int(asked["broker_id"]), uuid.UUID(asked["topic_id"]), int(asked["partition"]),
            int(asked["leader_epoch"]), str(asked["mode"]), int(asked["base_offset"]))
    except (KeyError, TypeError, ValueError):
        error = ErrorCode.invalid_request
    except ControllerError as e:
        error = e.error_code
    return JsonBody({"error_code": int(error)})


@handles(InternalApiKey.SHARED_STREAM_COMMIT)
async def shared_stream_commit(ctx: RequestContext, request: JsonBody) -> JsonBody:
    """A shared partition leader's commits of WAL or data-object ranges (docs/shared.md)."""
    controller = _active(ctx)
    if controller is None:
        return JsonBody({"error_code": int(ErrorCode.not_controller)})
    try:
        broker_id = int(request.value["broker_id"])
        commits = [StreamCommit.from_wire(wire) for wire in request.value["commits"]]
    except (KeyError, TypeError, ValueError) as e:
        return JsonBody({"error_code": int(ErrorCode.invalid_request),
                         "error_message": f"cannot decode the commits: {e!r}"})
    try:
        outcomes = await controller.commit_shared_streams(broker_id, commits)
    except ControllerError as e:
        return JsonBody({"error_code": int(e.error_code), "error_message": str(e)})
    return JsonBody({"error_code": int(ErrorCode.none),
                     "outcomes": [outcome.to_wire() for outcome in outcomes]})


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
            current_leader=ctx.response("LeaderIdAndEpoch", leader_id=controller.leader_id,
                                        leader_epoch=controller.raft.epoch),
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


# --- the controller quorum (KIP-595) ------------------------------------------------------

def _quorum_partition(request) -> bool:
    """The request names ``__cluster_metadata-0`` alone (the quorum's one partition)."""
    return (len(request.topics) == 1 and request.topics[0].topic_name == METADATA_TOPIC
            and [p.partition_index for p in request.topics[0].partitions] == [0])


async def _quorum_request(ctx: RequestContext, request) -> object:
    api_key = ApiKey(ctx.header.api_key)
    controller = ctx.services.controller
    if controller is None:
        return refusal(api_key, ctx.header.api_version, ErrorCode.inconsistent_voter_set)
    if not _quorum_partition(request):
        return refusal(api_key, ctx.header.api_version, ErrorCode.invalid_request)
    answer = await controller.raft.handle(decode_request(api_key, request))
    if api_key == ApiKey.VOTE:
        return encode_vote_response(answer, ctx.header.api_version)
    return encode_ack(api_key, answer)


for _api in (ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH):
    handles(_api)(_quorum_request)


async def metadata_log_fetch(ctx: RequestContext, request) -> object:
    """A Fetch of ``__cluster_metadata``: a voter's (its fetch offset counts towards the
    high watermark; it may be told where its log diverges) or a broker's (only committed
    records), long-polled by the leader; any other node answers NOT_LEADER_OR_FOLLOWER
    naming the leader it knows."""
    controller = ctx.services.controller
    topic = request.topics[0]
    if len(request.topics) != 1 or len(topic.partitions) != 1 or topic.partitions[0].partition:
        answer = RaftFetchResponse(ErrorCode.invalid_request, -1, -1)
    elif request.replica_id < 0 and not allowed(ctx, AclOperation.READ, ResourceType.TOPIC,
                                                METADATA_TOPIC):
        # A voter's fetch comes from a broker of the cluster (broker.inter_broker).
        answer = RaftFetchResponse(ErrorCode.topic_authorization_failed, -1, -1)
    elif controller is None:
        answer = RaftFetchResponse(ErrorCode.not_leader_or_follower, -1, -1)
    else:
        answer = await controller.raft.long_poll_fetch(
            decode_request(ApiKey.FETCH, request), millis(request.max_wait) / 1000)
    fields = fetch_partition_fields(answer)
    extra = {}
    if fields["diverging_epoch"] is not None:
        epoch, end_offset = fields["diverging_epoch"]
        extra["diverging_epoch"] = ctx.response("EpochEndOffset", epoch=epoch,
                                                end_offset=end_offset)
    if fields["snapshot_id"] is not None:
        end_offset, epoch = fields["snapshot_id"]
        extra["snapshot_id"] = ctx.response("SnapshotId", end_offset=end_offset, epoch=epoch)
    leader_id, leader_epoch = fields["current_leader"]
    entry = ctx.response(
        "PartitionData", partition_index=0, error_code=fields["error_code"],
        high_watermark=fields["high_watermark"], last_stable_offset=fields["last_stable_offset"],
        log_start_offset=fields["log_start_offset"],
        aborted_transactions=() if request.isolation_level else None,
        preferred_read_replica=-1, records=fields["records"],
        current_leader=ctx.response("LeaderIdAndEpoch", leader_id=leader_id,
                                    leader_epoch=leader_epoch), **extra)
    return ctx.response("FetchResponse", throttle_time=0, error_code=ErrorCode.none,
                        session_id=0, responses=(ctx.response(
                            "FetchableTopicResponse", topic=topic.topic, partitions=(entry,)),))


@handles_on_controller(ApiKey.DESCRIBE_QUORUM, ClusterGate(
    AclOperation.DESCRIBE, lambda ctx: ctx.response(
        "DescribeQuorumResponse", error_code=ErrorCode.cluster_authorization_failed,
        topics=())))
async def describe_quorum(ctx: RequestContext, request) -> object:
    """The quorum as its leader sees it: leader, epoch, high watermark, each voter's log end
    offset and last fetch (what ``kafka-metadata-quorum.sh describe`` prints)."""
    if not _quorum_partition(request):
        return ctx.response("DescribeQuorumResponse", error_code=ErrorCode.invalid_request,
                            topics=())
    quorum = ctx.services.controller.raft.describe()
    now_ms = int(time.time() * 1000)

    def state(voter) -> object:
        fetched = (-1 if voter.seconds_since_fetch is None
                   else now_ms - int(voter.seconds_since_fetch * 1000))
        caught_up = fetched if voter.log_end_offset >= quorum.high_watermark else -1
        return ctx.response("ReplicaState", replica_id=voter.node_id,
                            log_end_offset=voter.log_end_offset, last_fetch_timestamp=fetched,
                            last_caught_up_timestamp=caught_up)

    return ctx.response("DescribeQuorumResponse", error_code=ErrorCode.none, topics=(
        ctx.response("TopicData", topic_name=METADATA_TOPIC, partitions=(ctx.response(
            "PartitionData", partition_index=0, error_code=ErrorCode.none,
            leader_id=quorum.leader_id, leader_epoch=quorum.epoch,
            high_watermark=quorum.high_watermark,
            current_voters=tuple(state(v) for v in quorum.voters), observers=()),)),))
