"""DescribeProducers (KIP-664): the producers a partition's leader keeps state for, with
the first offset of each one's open transaction (what ``kafka-transactions.sh
find-hanging`` looks for)."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType
from replication.partition import PartitionError

from ..security.authorize import allowed
from .registry import RequestContext, handles


async def _partition(ctx: RequestContext, topic: str, index: int, received_at: float) -> object:
    if not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic):
        return ctx.response("PartitionResponse", partition_index=index,
                            error_code=ErrorCode.topic_authorization_failed, error_message=None,
                            active_producers=())
    try:
        partition = ctx.services.replicas.get(topic, index)
        partition.check_leader()
        # Read your writes through any broker (a diskless partition's producer state is this
        # broker's copy of the batch coordinator's), as ListOffsets and Fetch do.
        await partition.catch_up(received_at)
    except PartitionError as e:
        return ctx.response("PartitionResponse", partition_index=index, error_code=e.error_code,
                            error_message=str(e), active_producers=())
    return ctx.response("PartitionResponse", partition_index=index, error_code=ErrorCode.none,
                        error_message=None, active_producers=tuple(
        ctx.response("ProducerState", producer_id=entry.producer_id,
                     producer_epoch=entry.epoch, last_sequence=entry.last_sequence,
                     last_timestamp=entry.last_timestamp,
                     coordinator_epoch=entry.coordinator_epoch,
                     current_txn_start_offset=entry.txn_first_offset)
        for entry in partition.log.active_producers()))


@handles(ApiKey.DESCRIBE_PRODUCERS)
async def describe_producers(ctx: RequestContext, request) -> object:
    received_at = time.monotonic()
    return ctx.response("DescribeProducersResponse", throttle_time=0, topics=tuple([
        ctx.response("TopicResponse", name=topic.name, partitions=tuple([
            await _partition(ctx, topic.name, index, received_at)
            for index in topic.partition_indexes]))
        for topic in request.topics]))
