"""Transaction APIs of producers and admins (transaction protocol version 1):
InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions.

The handlers translate between kio entities and coordinator.transaction, and check what
Kafka's handlers check before the coordinator (topic existence, old versions' error codes).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from coordinator.internal_topic import OFFSETS_TOPIC
from coordinator.transaction.service import InitProducerIdResult, TransactionCoordinator
from coordinator.transaction.state import (
    ProducerIdAndEpoch,
    TopicPartition,
    TransactionState,
)
from protocol.apis import ApiKey
from protocol.build import millis
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError

from .registry import RequestContext, handles

log = logging.getLogger(__name__)
NO_PRODUCER_ID = -1
# Clients older than these versions know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
_PRODUCER_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                          ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.services.transaction_coordinator


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced \
            and ctx.version < _PRODUCER_FENCED_SINCE[ctx.header.api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


async def init_transactional_producer_id(ctx: RequestContext, request) -> object:
    """InitProducerId with a transactional id (broker.handlers.producer_id hands it here)."""
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    expected = (ProducerIdAndEpoch(producer_id, request.producer_epoch)
                if producer_id != NO_PRODUCER_ID else None)
    try:
        result = await _coordinator(ctx).init_producer_id(
            request.transactional_id, millis(request.transaction_timeout), expected)
    except KafkaStorageError as e:
        log_storage_error(log, "InitProducerId", e)
        result = InitProducerIdResult(ErrorCode.kafka_storage_error)
    return ctx.response("InitProducerIdResponse", throttle_time=0,
                        error_code=_for_version(ctx, result.error),
                        producer_id=result.producer_id, producer_epoch=result.producer_epoch)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(ctx: RequestContext, request) -> object:
    requested = [(topic.name, partition) for topic in request.v3_and_below_topics
                 for partition in topic.partitions]
    unknown = {tp for tp in requested if not _partition_exists(ctx, tp)}
    if unknown:
        # Kafka adds none of them when any is unknown.
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                  else ErrorCode.operation_not_attempted for tp in requested}
    else:
        error = await _coordinator(ctx).add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, requested)
        errors = dict.fromkeys(requested, _for_version(ctx, error))
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append((partition, error))
    return ctx.response("AddPartitionsToTxnResponse", throttle_time=0,
                        results_by_topic_v3_and_below=tuple(
        ctx.response("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(
            ctx.response("AddPartitionsToTxnPartitionResult", partition_index=partition,
                         partition_error_code=error) for partition, error in results))
        for topic, results in by_topic.items()))


def _partition_exists(ctx: RequestContext, tp: TopicPartition) -> bool:
    topic = ctx.services.image.topics.get(tp[0])
    return topic is not None and tp[1] in topic.partitions


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(ctx: RequestContext, request) -> object:
    offsets = ctx.services.group_coordinator.store
    error = await _coordinator(ctx).add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch,
        [(OFFSETS_TOPIC, offsets.partition_for(request.group_id))])
    return ctx.response("AddOffsetsToTxnResponse", throttle_time=0,
                        error_code=_for_version(ctx, error))


@handles(ApiKey.END_TXN)
async def end_txn(ctx: RequestContext, request) -> object:
    error = await _coordinator(ctx).end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.committed)
    return ctx.response("EndTxnResponse", throttle_time=0, error_code=_for_version(ctx, error))


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(ctx: RequestContext, request) -> object:
    def describe(transactional_id: str) -> object:
        error, snapshot = _coordinator(ctx).describe(transactional_id)
        if snapshot is None:
            return ctx.response("TransactionState", error_code=error,
                                transactional_id=transactional_id, transaction_state="",
                                transaction_timeout=0, transaction_start_time=-1,
                                producer_id=-1, producer_epoch=-1, topics=())
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(snapshot.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return ctx.response(
            "TransactionState", error_code=error, transactional_id=transactional_id,
            transaction_state=snapshot.state.display_name,
            transaction_timeout=snapshot.timeout_ms,
            transaction_start_time=snapshot.start_timestamp_ms,
            producer_id=snapshot.producer_id, producer_epoch=snapshot.producer_epoch,
            topics=tuple(ctx.response("TopicData", topic=topic, partitions=tuple(partitions))
                         for topic, partitions in by_topic.items()))

    return ctx.response("DescribeTransactionsResponse", throttle_time=0, transaction_states=tuple(
        describe(transactional_id) for transactional_id in request.transactional_ids))


@handles(ApiKey.LIST_TRANSACTIONS)
async def list_transactions(ctx: RequestContext, request) -> object:
    states = {name: TransactionState.from_display_name(name) for name in request.state_filters}
    error, listed = _coordinator(ctx).list_transactions(
        [state for state in states.values() if state is not None],
        request.producer_id_filters, getattr(request, "duration_filter", -1))
    unknown = tuple(name for name, state in states.items() if state is None)
    if unknown and len(unknown) == len(states):
        listed = []  # only unknown states asked for: nothing matches them
    return ctx.response("ListTransactionsResponse", throttle_time=0, error_code=error,
                        unknown_state_filters=unknown, transaction_states=tuple(
        ctx.response("TransactionState", transactional_id=transactional_id,
                     producer_id=snapshot.producer_id,
                     transaction_state=snapshot.state.display_name)
        for transactional_id, snapshot in listed))
