"""Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe (the group
coordinator's share part, coordinator.share.service), ShareFetch and ShareAcknowledge (the
broker serving the partition, with the share partition's owner deciding what is acquired:
broker.share_owners), the share-group offset admin APIs, and the owners' internal API.

ShareFetch, per partition of the member's share session: the owner acquires up to the
request's ``max_records`` for the member (redeliveries first), this broker reads those
records from its log and sends them with their acquired ranges and delivery counts; what it
could not fit in the response goes back to the owner unsent. Acknowledgements (in ShareFetch
or ShareAcknowledge) go to the owner, which writes them to ``__share_group_state`` before the
response. docs/share-groups.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from coordinator.share.coordinator import AcquireRequest
from coordinator.share.membership import Heartbeat, ShareGroupState
from coordinator.share.records import SharePartitionKey
from coordinator.share.share_partition import AcknowledgementBatch, AcquiredRange
from protocol.apis import ApiKey
from protocol.build import millis
from protocol.internal import InternalApiKey, JsonBody
from protocol.records import iter_batches
from replication.acls import AclOperation, ResourceType
from replication.partition import PartitionError, wait_for_any_change
from storage.log import KafkaStorageError, RecordsLost

from ..client_az import client_az
from ..security.authorize import OMITTED, allowed, authorized_operations
from ..share_groups import ShareGroupParts
from ..share_owners import serve_remote_call
from ..share_sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionError
from .registry import RequestContext, handles

log = logging.getLogger(__name__)

ASSIGNOR_NAME = "simple"
# How often a ShareFetch with nothing to send looks again for records released or whose
# locks expired meanwhile (new records wake it at once).
REDELIVERY_POLL_S = 0.1
OWNER_CALL_TIMEOUT_S = 10.0


def _share(ctx: RequestContext) -> ShareGroupParts | None:
    return ctx.services.share


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.peer.rsplit(":", 1)[0]


def _topic_ids(ctx: RequestContext) -> dict[uuid.UUID, str]:
    return {t.topic_id: name for name, t in ctx.services.image.topics.items()}


# --- membership -------------------------------------------------------------------------------

@handles(ApiKey.SHARE_GROUP_HEARTBEAT)
async def share_group_heartbeat(ctx: RequestContext, request) -> object:
    def answer(error: ErrorCode, message: str | None = None, member_id: str | None = None,
               epoch: int = -1, assignment=None) -> object:
        return ctx.response("ShareGroupHeartbeatResponse", throttle_time=0, error_code=error,
                            error_message=message, member_id=member_id, member_epoch=epoch,
                            heartbeat_interval=interval, assignment=assignment)

    groups = _share(ctx).groups if _share(ctx) else None
    interval = groups.heartbeat_interval_ms(request.group_id) if groups is not None else 0
    if groups is None:
        return answer(ErrorCode.coordinator_not_available)
    if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    if not request.group_id:
        return answer(ErrorCode.invalid_request, "GroupId can't be empty.")
    joining = request.member_epoch == 0
    rack = request.rack_id or (client_az(ctx.header.client_id) if joining else None)
    result = await groups.heartbeat(Heartbeat(
        request.group_id, request.member_id, request.member_epoch, rack,
        request.subscribed_topic_names, ctx.header.client_id or "", _client_host(ctx)))
    if result.error != ErrorCode.none:
        return answer(result.error, result.message)
    assignment = None
    if result.assignment is not None:
        image = ctx.services.image
        by_topic: dict[str, list[int]] = {}
        for topic, partition in result.assignment:
            by_topic.setdefault(topic, []).append(partition)
        assignment = ctx.response("Assignment", topic_partitions=tuple(
            ctx.response("TopicPartitions", topic_id=image.topics[topic].topic_id,
                         partitions=tuple(sorted(partitions)))
            for topic, partitions in sorted(by_topic.items()) if topic in image.topics))
    return answer(ErrorCode.none, None, result.member_id, result.member_epoch, assignment)


@handles(ApiKey.SHARE_GROUP_DESCRIBE)
async def share_group_describe(ctx: RequestContext, request) -> object:
    groups = _share(ctx).groups if _share(ctx) else None
    image = ctx.services.image
    described = []
    for group_id in request.group_ids:
        def entry(error: ErrorCode, message: str | None = None, **fields) -> object:
            defaults = dict(group_state=ShareGroupState.DEAD.value, group_epoch=-1, assignment_epoch=-1,
                            assignor_name="", members=(), authorized_operations=OMITTED)
            return ctx.response("DescribedGroup", error_code=error, error_message=message,
                                group_id=group_id, **{**defaults, **fields})
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(entry(ErrorCode.group_authorization_failed))
            continue
        if groups is None:
            described.append(entry(ErrorCode.coordinator_not_available))
            continue
        error, group, message = groups.describe(group_id)
        if group is None:
            described.append(entry(error, message))
            continue
        members = tuple(ctx.response(
            "Member", member_id=m.member_id, rack_id=m.rack, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=tuple(sorted(m.subscribed_topics)),
            assignment=ctx.response("Assignment", topic_partitions=tuple(
                ctx.response("TopicPartitions", topic_id=image.topics[t].topic_id,
                             topic_name=t, partitions=tuple(sorted(
                                 p for tt, p in m.assignment if tt == t)))
                for t in sorted({t for t, _ in m.assignment}) if t in image.topics)))
            for m in group.members.values())
        described.append(entry(
            ErrorCode.none, group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME,
            members=members, authorized_operations=authorized_operations(
                ctx, request.include_authorized_operations, ResourceType.GROUP, group_id)))
    return ctx.response("ShareGroupDescribeResponse", throttle_time=0, groups=tuple(described))


async def delete_share_group_state(ctx: RequestContext, group_ids: list[str]
                                   ) -> dict[str, ErrorCode]:
    """DeleteGroups' first step for share groups (Kafka deletes a share group's state, then
    the group): the state in ``__share_group_state`` of every share partition the empty
    group has, deleted by each partition's owner. The groups whose state could not be
    deleted, with the error; DeleteGroups leaves them in place."""
    share = _share(ctx)
    if share is None:
        return {}
    image = ctx.services.image
    failed: dict[str, ErrorCode] = {}
    for group_id in group_ids:
        partitions = share.groups.deletable_state(group_id)
        # A deleted topic's state cannot be named by its id any more; it goes with the topic.
        keys = [SharePartitionKey(group_id, image.topics[topic].topic_id, index)
                for topic, index in partitions or () if topic in image.topics]
        errors = await asyncio.gather(*(share.owners.delete_state(key, OWNER_CALL_TIMEOUT_S)
                                        for key in keys))
        if (error := next((e for e in errors if e != ErrorCode.none), None)) is not None:
            failed[group_id] = error
    return failed


# --- ShareFetch and ShareAcknowledge ----------------------------------------------------------

def _acknowledgements(partition) -> list[AcknowledgementBatch]:
    return [AcknowledgementBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for b in partition.acknowledgement_batches]


async def _acknowledge_all(ctx: RequestContext, group_id: str, member_id: str, topics,
                           names: dict[uuid.UUID, str]) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """Send each partition's acknowledgements to its owner; the error per partition."""
    owners = _share(ctx).owners

    async def one(topic_id: uuid.UUID, partition) -> ErrorCode:
        name = names.get(topic_id)
        if name is None:
            return ErrorCode.unknown_topic_id
        if not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
            return ErrorCode.topic_authorization_failed
        return await owners.acknowledge(
            SharePartitionKey(group_id, topic_id, partition.partition_index), member_id,
            _acknowledgements(partition), OWNER_CALL_TIMEOUT_S)

    pending = [(topic.topic_id, p) for topic in topics for p in topic.partitions
               if p.acknowledgement_batches]
    errors = await asyncio.gather(*(one(topic_id, p) for topic_id, p in pending))
    return {(topic_id, p.partition_index): error
            for (topic_id, p), error in zip(pending, errors)}


class _PartitionFetch:
    """What ShareFetch answers for one partition."""

    def __init__(self, topic_id: uuid.UUID, index: int) -> None:
        self.topic_id = topic_id
        self.index = index
        self.error = ErrorCode.none
        self.records = b""
        self.acquired: list[AcquiredRange] = []
        self.watch = None


async def _fetch_partition(ctx: RequestContext, request, topic_id: uuid.UUID, index: int,
                           names: dict[uuid.UUID, str], max_records: int, budget: int,
                           received_at: float) -> _PartitionFetch:
    out = _PartitionFetch(topic_id, index)
    name = names.get(topic_id)
    if name is None:
        out.error = ErrorCode.unknown_topic_id
        return out
    if not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, name):
        out.error = ErrorCode.topic_authorization_failed
        return out
    try:
        partition = ctx.services.replicas.get(name, index)
        partition.check_leader()
        await partition.catch_up(received_at)
    except PartitionError as e:
        out.error = e.error_code
        return out
    out.watch = partition
    if max_records <= 0 or budget <= 0:
        return out
    key = SharePartitionKey(request.group_id, topic_id, index)
    owners = _share(ctx).owners
    high_watermark = partition.high_watermark
    result = await owners.acquire(AcquireRequest(
        key, request.member_id, max_records, partition.log.log_start_offset, high_watermark),
        OWNER_CALL_TIMEOUT_S)
    if result.error != ErrorCode.none or not result.ranges:
        out.error = result.error
        return out
    chunks: list[bytes] = []
    # Offsets below ``covered`` are in the batches already added (a batch may hold
    # several acquired ranges: it goes once).
    covered = result.ranges[0].first_offset
    unsent: list[range] = []
    try:
        for i, acquired in enumerate(result.ranges):
            if acquired.last_offset >= covered and budget > 0:
                # Whole batches, as a log is read: those overlapping the range (the client
                # keeps the acquired records of each).
                read = await partition.log.read(max(acquired.first_offset, covered), budget,
                                                max_offset=high_watermark,
                                                min_one_batch=not chunks)
                size = 0
                for header in iter_batches(read.records, allow_partial_tail=True):
                    if header.base_offset > acquired.last_offset:
                        break
                    covered, size = header.next_offset, header.position + header.size
                chunks.append(bytes(read.records[:size]))
                budget -= size
            if covered <= acquired.last_offset:  # the response is full
                if covered > acquired.first_offset:
                    out.acquired.append(AcquiredRange(acquired.first_offset, covered - 1,
                                                      acquired.delivery_count))
                unsent = [range(max(covered, acquired.first_offset), acquired.last_offset + 1),
                          *(range(r.first_offset, r.last_offset + 1)
                            for r in result.ranges[i + 1:])]
                break
            out.acquired.append(acquired)
    except (KafkaStorageError, RecordsLost) as e:
        log.warning("share fetch of %s-%d: %r", name, index, e)
        out.error = ErrorCode.kafka_storage_error
        out.acquired, chunks = [], []
        unsent = [range(r.first_offset, r.last_offset + 1) for r in result.ranges]
    if unsent:
        await owners.return_unsent(key, request.member_id, unsent, OWNER_CALL_TIMEOUT_S)
    out.records = b"".join(chunks)
    return out


def _leader_entry(ctx: RequestContext, name: str | None, index: int) -> object:
    info = None
    if name is not None and (topic := ctx.services.image.topics.get(name)) is not None:
        info = topic.partitions.get(index)
    return ctx.response("LeaderIdAndEpoch", leader_id=info.leader if info else -1,
                        leader_epoch=info.leader_epoch if info else -1)


@handles(ApiKey.SHARE_FETCH)
async def share_fetch(ctx: RequestContext, request) -> object:
    received_at = time.monotonic()
    deadline = received_at + millis(request.max_wait) / 1000
    lock_ms = (ctx.services.group_configs.share_group(request.group_id)
               .record_lock_duration_ms if _share(ctx) else 0)

    def answer(error: ErrorCode, message: str | None = None, topics=()) -> object:
        return ctx.response("ShareFetchResponse", throttle_time=0, error_code=error,
                            error_message=message, acquisition_lock_timeout=lock_ms,
                            responses=tuple(topics), node_endpoints=())

    if _share(ctx) is None:
        return answer(ErrorCode.unsupported_version, "share groups are off on this broker")
    if not request.group_id or not request.member_id:
        return answer(ErrorCode.invalid_request, "GroupId and MemberId must be set.")
    if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    names = _topic_ids(ctx)
    epoch = request.share_session_epoch
    try:
        session, ended = _share(ctx).sessions.use(
            request.group_id, request.member_id, epoch,
            ((t.topic_id, p.partition_index) for t in request.topics for p in t.partitions),
            ((t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions))
    except ShareSessionError as e:
        return answer(e.error_code)
    if epoch == INITIAL_EPOCH and any(p.acknowledgement_batches for t in request.topics
                                      for p in t.partitions):
        return answer(ErrorCode.invalid_request,
                      "Acknowledge data present on initial fetch.")
    ack_errors = await _acknowledge_all(ctx, request.group_id, request.member_id,
                                        request.topics, names)
    await _release_ended(ctx, ended)
    fetched: dict[tuple[uuid.UUID, int], _PartitionFetch] = {}
    if epoch != FINAL_EPOCH:
        fetched = await _fetch_session(ctx, request, list(session.partitions), names,
                                       received_at, deadline)
    by_topic: dict[uuid.UUID, list] = {}
    for key in sorted({*fetched, *ack_errors}, key=lambda k: (str(k[0]), k[1])):
        topic_id, index = key
        out = fetched.get(key) or _PartitionFetch(topic_id, index)
        if out.error == ErrorCode.none and not out.acquired and key not in ack_errors:
            continue
        by_topic.setdefault(topic_id, []).append(ctx.response(
            "PartitionData", partition_index=index, error_code=out.error,
            acknowledge_error_code=ack_errors.get(key, ErrorCode.none),
            current_leader=_leader_entry(ctx, names.get(topic_id), index),
            records=out.records,
            acquired_records=tuple(ctx.response(
                "AcquiredRecords", first_offset=r.first_offset, last_offset=r.last_offset,
                delivery_count=r.delivery_count) for r in out.acquired)))
    topics = [ctx.response("ShareFetchableTopicResponse", topic_id=topic_id,
                           partitions=tuple(entries)) for topic_id, entries in by_topic.items()]
    for topic in topics:
        if (name := names.get(topic.topic_id)) is not None:
            ctx.services.topic_metrics.fetched(
                name, sum(len(p.records or b"") for p in topic.partitions), False)
    return answer(ErrorCode.none, topics=topics)


async def _fetch_session(ctx: RequestContext, request, partitions: list, names,
                         received_at: float, deadline: float) -> dict:
    """Acquire and read from the session's partitions, waiting (up to the deadline) until
    some records are acquired or ``min_bytes`` is reached."""
    fetched: dict = {}
    budget = min(request.max_bytes if request.max_bytes > 0 else 2**31 - 1,
                 ctx.services.config.fetch_max_bytes)
    max_records = request.max_records if request.max_records > 0 else 500
    while True:
        for topic_id, index in partitions:
            sent = sum(len(f.records) for f in fetched.values())
            taken = sum(r.last_offset - r.first_offset + 1
                        for f in fetched.values() for r in f.acquired)
            previous = fetched.get((topic_id, index))
            if previous is not None and previous.acquired:
                continue
            fetched[(topic_id, index)] = await _fetch_partition(
                ctx, request, topic_id, index, names, max_records - taken, budget - sent,
                received_at)
        total = sum(len(f.records) for f in fetched.values())
        remaining = deadline - time.monotonic()
        acquired = any(f.acquired for f in fetched.values())
        failed = any(f.error != ErrorCode.none for f in fetched.values())
        if failed or (acquired and total >= request.min_bytes) or remaining <= 0:
            return fetched
        watched = [f.watch for f in fetched.values() if f.watch is not None]
        if not watched:
            return fetched
        await wait_for_any_change(watched, min(remaining, REDELIVERY_POLL_S))


async def _release_ended(ctx: RequestContext, ended) -> None:
    """What the members of ended share sessions hold goes back for redelivery."""
    owners = _share(ctx).owners
    for session in ended:
        keys = [SharePartitionKey(session.group_id, topic_id, index)
                for topic_id, index in session.partitions]
        await owners.release_member(keys, session.member_id, OWNER_CALL_TIMEOUT_S)


@handles(ApiKey.SHARE_ACKNOWLEDGE)
async def share_acknowledge(ctx: RequestContext, request) -> object:
    def answer(error: ErrorCode, message: str | None = None, topics=()) -> object:
        return ctx.response("ShareAcknowledgeResponse", throttle_time=0, error_code=error,
                            error_message=message, responses=tuple(topics), node_endpoints=())

    if _share(ctx) is None:
        return answer(ErrorCode.unsupported_version, "share groups are off on this broker")
    if not request.group_id or not request.member_id:
        return answer(ErrorCode.invalid_request, "GroupId and MemberId must be set.")
    if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return answer(ErrorCode.invalid_share_session_epoch)
    names = _topic_ids(ctx)
    try:
        _, ended = _share(ctx).sessions.use(request.group_id, request.member_id,
                                                   epoch, (), ())
    except ShareSessionError as e:
        return answer(e.error_code)
    errors = await _acknowledge_all(ctx, request.group_id, request.member_id,
                                    request.topics, names)
    await _release_ended(ctx, ended)
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, index), error in errors.items():
        by_topic.setdefault(topic_id, []).append(ctx.response(
            "PartitionData", partition_index=index, error_code=error,
            current_leader=_leader_entry(ctx, names.get(topic_id), index)))
    return answer(ErrorCode.none, topics=[
        ctx.response("ShareAcknowledgeTopicResponse", topic_id=topic_id,
                     partitions=tuple(entries)) for topic_id, entries in by_topic.items()])


# --- share-group offsets (admin) ----------------------------------------------------------------

@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS)
async def describe_share_group_offsets(ctx: RequestContext, request) -> object:
    share = _share(ctx)
    image = ctx.services.image
    groups = []
    for asked in request.groups:
        def group_entry(error: ErrorCode, topics=(), message: str | None = None) -> object:
            return ctx.response("DescribeShareGroupOffsetsResponseGroup",
                                group_id=asked.group_id, topics=tuple(topics),
                                error_code=error, error_message=message)
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, asked.group_id):
            groups.append(group_entry(ErrorCode.group_authorization_failed))
            continue
        if share is None:
            groups.append(group_entry(ErrorCode.coordinator_not_available))
            continue
        error, group = share.groups.share_group(asked.group_id)
        if error != ErrorCode.none:
            groups.append(group_entry(error))
            continue
        if asked.topics is None:  # every topic the group's members subscribe to
            wanted = {t: range(len(image.topics[t].partitions))
                      for t in sorted(group.subscribed_topics() if group else ())
                      if t in image.topics}
        else:
            wanted = {t.topic_name: t.partitions for t in asked.topics}
        topics = []
        for name, partitions in wanted.items():
            info = image.topics.get(name)
            entries = []
            for index in partitions:
                start, part_error = -1, ErrorCode.none
                if info is None or index not in info.partitions:
                    part_error = ErrorCode.unknown_topic_or_partition
                elif not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                    part_error = ErrorCode.topic_authorization_failed
                else:
                    part_error, offset = await share.owners.start_offset(
                        SharePartitionKey(asked.group_id, info.topic_id, index),
                        OWNER_CALL_TIMEOUT_S)
                    start = -1 if offset is None else offset
                entries.append(ctx.response(
                    "DescribeShareGroupOffsetsResponsePartition", partition_index=index,
                    start_offset=start, leader_epoch=-1, error_code=part_error))
            topics.append(ctx.response(
                "DescribeShareGroupOffsetsResponseTopic", topic_name=name,
                topic_id=info.topic_id if info else None, partitions=tuple(entries)))
        groups.append(group_entry(ErrorCode.none, topics))
    return ctx.response("DescribeShareGroupOffsetsResponse", throttle_time=0,
                        groups=tuple(groups))


def _empty_group_error(ctx: RequestContext, group_id: str, operation: AclOperation
                       ) -> ErrorCode | None:
    """Why the group's offsets cannot be changed now: they can only while it has no
    members (Kafka: NON_EMPTY_GROUP)."""
    share = _share(ctx)
    if not allowed(ctx, operation, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if share is None:
        return ErrorCode.coordinator_not_available
    error, group = share.groups.share_group(group_id)
    if error != ErrorCode.none:
        return error
    if group is not None and group.members:
        return ErrorCode.non_empty_group
    return None


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS)
async def alter_share_group_offsets(ctx: RequestContext, request) -> object:
    image = ctx.services.image
    error = _empty_group_error(ctx, request.group_id, AclOperation.READ)
    topics = []
    if error is None:
        error = await _share(ctx).groups.start_offsets_set(request.group_id, [
            (t.topic_name, p.partition_index) for t in request.topics for p in t.partitions
            if t.topic_name in image.topics
            and p.partition_index in image.topics[t.topic_name].partitions])
    for topic in request.topics if error is None else ():
        info = image.topics.get(topic.topic_name)
        entries = []
        for p in topic.partitions:
            if info is None or p.partition_index not in info.partitions:
                part_error = ErrorCode.unknown_topic_or_partition
            elif not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic.topic_name):
                part_error = ErrorCode.topic_authorization_failed
            elif p.start_offset < 0:
                part_error = ErrorCode.invalid_request
            else:
                part_error = await _share(ctx).owners.reset_start_offset(
                    SharePartitionKey(request.group_id, info.topic_id, p.partition_index),
                    p.start_offset, OWNER_CALL_TIMEOUT_S)
            entries.append(ctx.response("AlterShareGroupOffsetsResponsePartition",
                                        partition_index=p.partition_index,
                                        error_code=part_error))
        topics.append(ctx.response("AlterShareGroupOffsetsResponseTopic",
                                   topic_name=topic.topic_name,
                                   topic_id=info.topic_id if info else None,
                                   partitions=tuple(entries)))
    return ctx.response("AlterShareGroupOffsetsResponse", throttle_time=0,
                        error_code=error or ErrorCode.none, responses=tuple(topics))


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS)
async def delete_share_group_offsets(ctx: RequestContext, request) -> object:
    image = ctx.services.image
    error = _empty_group_error(ctx, request.group_id, AclOperation.DELETE)
    topics = []
    for topic in request.topics if error is None else ():
        info = image.topics.get(topic.topic_name)
        if info is None:
            topic_error = ErrorCode.unknown_topic_or_partition
        elif not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic.topic_name):
            topic_error = ErrorCode.topic_authorization_failed
        else:
            errors = [await _share(ctx).owners.delete_state(
                SharePartitionKey(request.group_id, info.topic_id, index), OWNER_CALL_TIMEOUT_S)
                for index in sorted(info.partitions)]
            topic_error = next((e for e in errors if e != ErrorCode.none), ErrorCode.none)
        topics.append(ctx.response("DeleteShareGroupOffsetsResponseTopic",
                                   topic_name=topic.topic_name,
                                   topic_id=info.topic_id if info else None,
                                   error_code=topic_error))
    return ctx.response("DeleteShareGroupOffsetsResponse", throttle_time=0,
                        error_code=error or ErrorCode.none, responses=tuple(topics))


# --- the owners' internal API -----------------------------------------------------------------

@handles(InternalApiKey.SHARE_PARTITION_CALL)
async def share_partition_call(ctx: RequestContext, request: JsonBody) -> JsonBody:
    coordinator = _share(ctx).coordinator if _share(ctx) else None
    if coordinator is None:
        return JsonBody({"error_code": int(ErrorCode.coordinator_not_available)})
    try:
        return JsonBody(await serve_remote_call(coordinator, request.value))
    except (KeyError, TypeError, ValueError) as e:
        return JsonBody({"error_code": int(ErrorCode.invalid_request),
                         "error_message": f"bad share partition call: {e!r}"})
