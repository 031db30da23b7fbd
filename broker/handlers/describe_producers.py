"""DescribeProducers (KIP-664): the producers a partition's leader keeps state for, with
the first offset of each one's open transaction (what ``kafka-transactions.sh
find-hanging`` looks for)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType
from replication.partition import PartitionError

from ..security.authorize import allowed
from .registry import RequestContext, handles


def _partition(ctx: RequestContext, topic: str, index: int) -> object:
    if not allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic):
        return ctx.response("PartitionResponse", partition_index=index,
                            error_code=ErrorCode.topic_authorization_failed, error_message=None,
                            active_producers=())
    try:
        partition = ctx.services.replicas.get(topic, index)
        partition.check_leader()
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
    return ctx.response("DescribeProducersResponse", throttle_time=0, topics=tuple(
        ctx.response("TopicResponse", name=topic.name, partitions=tuple(
            _partition(ctx, topic.name, index) for index in topic.partition_indexes))
        for topic in request.topics))
