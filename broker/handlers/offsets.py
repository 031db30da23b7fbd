"""ListOffsets, DeleteRecords and OffsetForLeaderEpoch: per-partition offset questions."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.loop_slice import LoopSlice
from replication.partition import PartitionError
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError, OffsetOutOfRange

from replication.acls import AclOperation, ResourceType

from ..security.authorize import allowed
from .registry import RequestContext, handles

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1
# How long ListOffsets and OffsetForLeaderEpoch answer partitions before they yield to the
# event loop (_answers_in_turns).
ANSWER_SLICE_S = 0.005


async def _answers_in_turns(topics, topic_name: Callable[[object], str],
                            answer: Callable[[str, object], Awaitable[object]],
                            ) -> list[tuple[str, tuple]]:
    """(topic name, its partitions' answers) of each topic asked, answered in turns of the
    event loop: an answer may open the partition's log, and at start-up every partition is
    asked at once (ListOffsets by clients and `kipper cluster up`, OffsetForLeaderEpoch by
    each follower for all it follows: a leader that opened 10,000 logs in one turn held its
    loop for seconds, and as the active controller its voters elected another)."""
    turns = LoopSlice(ANSWER_SLICE_S)
    answered = []
    for topic in topics:
        name, entries = topic_name(topic), []
        for asked in topic.partitions:
            await turns.pause()
            entries.append(await answer(name, asked))
        answered.append((name, tuple(entries)))
    return answered


async def _list_offset(ctx: RequestContext, request, topic: str, asked,
                       received_at: float) -> object:
    def answer(error=ErrorCode.none, timestamp=-1, offset=-1, epoch=-1) -> object:
        return ctx.response("ListOffsetsPartitionResponse", partition_index=asked.partition_index,
                            error_code=error, timestamp=timestamp, offset=offset,
                            leader_epoch=epoch, old_style_offsets=())
    if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
        return answer(ErrorCode.topic_authorization_failed)
    try:
        partition = ctx.services.replicas.get(topic, asked.partition_index)
        partition.check_leader(getattr(asked, "current_leader_epoch", -1))
        await partition.catch_up(received_at)
    except PartitionError as e:
        return answer(e.error_code)
    log = partition.log
    if asked.timestamp == LATEST:
        if partition.high_watermark < partition.leader_epoch_start_offset:
            # A new leader's high watermark may still be below records an earlier leader
            # acknowledged: the client retries (Kafka's answer, KIP-207).
            return answer(ErrorCode.offset_not_available)
        end = (partition.last_stable_offset if getattr(request, "isolation_level", 0) == READ_COMMITTED
               else partition.high_watermark)
        return answer(offset=end, epoch=partition.leader_epoch)
    if asked.timestamp == EARLIEST:
        return answer(offset=log.log_start_offset, epoch=partition.leader_epoch)
    found = await (log.max_timestamp() if asked.timestamp == MAX_TIMESTAMP
                   else log.offset_for_timestamp(asked.timestamp))
    if found is None or found.offset >= partition.high_watermark:
        return answer()
    return answer(timestamp=found.timestamp, offset=found.offset, epoch=found.leader_epoch)


@handles(ApiKey.LIST_OFFSETS)
async def list_offsets(ctx: RequestContext, request) -> object:
    received_at = time.monotonic()
    answered = await _answers_in_turns(
        request.topics, lambda topic: topic.name,
        lambda name, asked: _list_offset(ctx, request, name, asked, received_at))
    return ctx.response("ListOffsetsResponse", throttle_time=0, topics=tuple(
        ctx.response("ListOffsetsTopicResponse", name=name, partitions=entries)
        for name, entries in answered))


async def _delete_records(ctx: RequestContext, topic: str, asked, received_at: float) -> object:
    def answer(error=ErrorCode.none, low_watermark=-1) -> object:
        return ctx.response("DeleteRecordsPartitionResult", partition_index=asked.partition_index,
                            low_watermark=low_watermark, error_code=error)
    if not allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, topic):
        return answer(ErrorCode.topic_authorization_failed)
    try:
        partition = ctx.services.replicas.get(topic, asked.partition_index)
        partition.check_leader()
        await partition.catch_up(received_at)
    except PartitionError as e:
        return answer(e.error_code)
    # -1 means "up to the high watermark", as in Kafka's DeleteRecordsRequest.HIGH_WATERMARK.
    offset = partition.high_watermark if asked.offset == -1 else asked.offset
    if offset < 0 or offset > partition.high_watermark:
        return answer(ErrorCode.offset_out_of_range)
    try:
        return answer(low_watermark=await partition.log.delete_records_before(offset))
    except OffsetOutOfRange:
        return answer(ErrorCode.offset_out_of_range)
    except KafkaStorageError as e:
        log_storage_error(log, f"DeleteRecords of {topic}-{asked.partition_index}", e)
        return answer(ErrorCode.kafka_storage_error)


@handles(ApiKey.DELETE_RECORDS)
async def delete_records(ctx: RequestContext, request) -> object:
    received_at = time.monotonic()
    topics = []
    for topic in request.topics:
        entries = [await _delete_records(ctx, topic.name, p, received_at)
                   for p in topic.partitions]
        topics.append(ctx.response("DeleteRecordsTopicResult", name=topic.name,
                                   partitions=tuple(entries)))
    return ctx.response("DeleteRecordsResponse", throttle_time=0, topics=tuple(topics))


async def _epoch_end_offset(ctx: RequestContext, topic: str, asked) -> object:
    def answer(error=ErrorCode.none, epoch=-1, end_offset=-1) -> object:
        return ctx.response("EpochEndOffset", error_code=error, partition=asked.partition,
                            leader_epoch=epoch, end_offset=end_offset)
    # Followers hold CLUSTER_ACTION; a consumer checking for truncation (KIP-320) DESCRIBE.
    if not (allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
            or allowed(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)):
        return answer(ErrorCode.topic_authorization_failed)
    try:
        partition = ctx.services.replicas.get(topic, asked.partition)
        partition.check_leader(asked.current_leader_epoch)
    except PartitionError as e:
        return answer(e.error_code)
    found = partition.log.end_offset_for_epoch(asked.leader_epoch)
    return answer(epoch=found.leader_epoch, end_offset=found.end_offset)


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(ctx: RequestContext, request) -> object:
    answered = await _answers_in_turns(request.topics, lambda topic: topic.topic,
                                       lambda name, asked: _epoch_end_offset(ctx, name, asked))
    return ctx.response("OffsetForLeaderEpochResponse", throttle_time=0, topics=tuple(
        ctx.response("OffsetForLeaderTopicResult", topic=name, partitions=entries)
        for name, entries in answered))
