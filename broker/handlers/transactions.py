"""Transaction APIs of producers and admins: InitProducerId with a transactional id,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.

The request version tells the transaction protocol version the client speaks, as in Kafka:
EndTxn v5+ is version 2 (KIP-890: the epoch is bumped at every end and handed back);
AddPartitionsToTxn v4+ comes from partition leaders only (they add partitions for version 2
clients, coordinator.transaction.partition_adder, or verify them).

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
from replication.acls import AclOperation, ResourceType
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError

from ..producer_ids import ProducerIdsUnavailable
from ..security.authorize import allowed, denied_names
from .registry import RequestContext, handles

log = logging.getLogger(__name__)
NO_PRODUCER_ID = -1
# Clients older than these versions know INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
_PRODUCER_FENCED_SINCE = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                          ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}


# Transaction protocol version 2: EndTxn bumps the epoch from this version on; AddPartitionsToTxn
# is the partition leaders' from this one on.
_EPOCH_BUMPING_END_TXN = 5
_BROKER_ONLY_ADD_PARTITIONS = 4


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    return ctx.services.transaction_coordinator


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error == ErrorCode.producer_fenced \
            and ctx.version < _PRODUCER_FENCED_SINCE[ctx.header.api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


async def init_transactional_producer_id(ctx: RequestContext, request) -> object:
    """InitProducerId with a transactional id (broker.handlers.producer_id hands it here)."""
    if not _may_write(ctx, request.transactional_id):
        return ctx.response("InitProducerIdResponse", throttle_time=0,
                            error_code=ErrorCode.transactional_id_authorization_failed,
                            producer_id=-1, producer_epoch=-1)
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)
    expected = (ProducerIdAndEpoch(producer_id, request.producer_epoch)
                if producer_id != NO_PRODUCER_ID else None)
    try:
        # The coordinator takes an id without waiting: one is in hand first.
        await ctx.services.producer_ids.ready()
        result = await _coordinator(ctx).init_producer_id(
            request.transactional_id, millis(request.transaction_timeout), expected)
    except KafkaStorageError as e:
        log_storage_error(log, "InitProducerId", e)
        result = InitProducerIdResult(ErrorCode.kafka_storage_error)
    except ProducerIdsUnavailable as e:
        log.warning("InitProducerId answered COORDINATOR_LOAD_IN_PROGRESS: %s", e)
        result = InitProducerIdResult(ErrorCode.coordinator_load_in_progress)
    return ctx.response("InitProducerIdResponse", throttle_time=0,
                        error_code=_for_version(ctx, result.error),
                        producer_id=result.producer_id, producer_epoch=result.producer_epoch)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(ctx: RequestContext, request) -> object:
    if ctx.version >= _BROKER_ONLY_ADD_PARTITIONS:
        return await _add_partitions_for_brokers(ctx, request)
    requested = [(topic.name, partition) for topic in request.v3_and_below_topics
                 for partition in topic.partitions]
    if not _may_write(ctx, request.v3_and_below_transactional_id):
        errors = dict.fromkeys(requested, ErrorCode.transactional_id_authorization_failed)
    elif denied := denied_names(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                (topic for topic, _ in requested)):
        # Kafka adds none of them when one is refused.
        errors = {tp: ErrorCode.topic_authorization_failed if tp[0] in denied
                  else ErrorCode.operation_not_attempted for tp in requested}
    else:
        errors = await _add_partitions(ctx, request.v3_and_below_transactional_id,
                                       request.v3_and_below_producer_id,
                                       request.v3_and_below_producer_epoch, requested)
    return ctx.response("AddPartitionsToTxnResponse", throttle_time=0,
                        results_by_topic_v3_and_below=_topic_results(ctx, errors))


async def _add_partitions_for_brokers(ctx: RequestContext, request) -> object:
    """v4+: several transactions per request, from partition leaders only (Kafka's
    CLUSTER_ACTION); a client gets CLUSTER_AUTHORIZATION_FAILED for the whole request."""
    if ctx.broker_node is None:
        return ctx.response("AddPartitionsToTxnResponse", throttle_time=0,
                            error_code=ErrorCode.cluster_authorization_failed,
                            results_by_transaction=())
    results = []
    for transaction in request.transactions:
        requested = [(topic.name, partition) for topic in transaction.topics
                     for partition in topic.partitions]
        if transaction.verify_only:
            errors = await _coordinator(ctx).verify_partitions(
                transaction.transactional_id, transaction.producer_id,
                transaction.producer_epoch, requested)
        else:
            errors = await _add_partitions(ctx, transaction.transactional_id,
                                           transaction.producer_id, transaction.producer_epoch,
                                           requested)
        results.append(ctx.response("AddPartitionsToTxnResult",
                                    transactional_id=transaction.transactional_id,
                                    topic_results=_topic_results(ctx, errors)))
    return ctx.response("AddPartitionsToTxnResponse", throttle_time=0,
                        error_code=ErrorCode.none, results_by_transaction=tuple(results))


async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int,
                          producer_epoch: int, requested: list[TopicPartition]
                          ) -> dict[TopicPartition, ErrorCode]:
    unknown = {tp for tp in requested if not _partition_exists(ctx, tp)}
    if unknown:
        # Kafka adds none of them when any is unknown.
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                else ErrorCode.operation_not_attempted for tp in requested}
    error = await _coordinator(ctx).add_partitions(transactional_id, producer_id,
                                                   producer_epoch, requested)
    return dict.fromkeys(requested, _for_version(ctx, error))


def _topic_results(ctx: RequestContext, errors: dict[TopicPartition, ErrorCode]) -> tuple:
    by_topic: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append((partition, error))
    return tuple(
        ctx.response("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(
            ctx.response("AddPartitionsToTxnPartitionResult", partition_index=partition,
                         partition_error_code=error) for partition, error in results))
        for topic, results in by_topic.items())


def _may_write(ctx: RequestContext, transactional_id: str | None) -> bool:
    """WRITE on the transactional id: what every transactional request needs."""
    return allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _partition_exists(ctx: RequestContext, tp: TopicPartition) -> bool:
    topic = ctx.services.image.topics.get(tp[0])
    return topic is not None and tp[1] in topic.partitions


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(ctx: RequestContext, request) -> object:
    if not _may_write(ctx, request.transactional_id):
        return ctx.response("AddOffsetsToTxnResponse", throttle_time=0,
                            error_code=ErrorCode.transactional_id_authorization_failed)
    if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.response("AddOffsetsToTxnResponse", throttle_time=0,
                            error_code=ErrorCode.group_authorization_failed)
    offsets = ctx.services.group_coordinator.store
    error = await _coordinator(ctx).add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch,
        [(OFFSETS_TOPIC, offsets.partition_for(request.group_id))])
    return ctx.response("AddOffsetsToTxnResponse", throttle_time=0,
                        error_code=_for_version(ctx, error))


@handles(ApiKey.END_TXN)
async def end_txn(ctx: RequestContext, request) -> object:
    if not _may_write(ctx, request.transactional_id):
        return ctx.response("EndTxnResponse", throttle_time=0,
                            error_code=ErrorCode.transactional_id_authorization_failed,
                            producer_id=-1, producer_epoch=-1)
    bump_epoch = ctx.version >= _EPOCH_BUMPING_END_TXN
    result = await _coordinator(ctx).end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch,
        request.committed, bump_epoch=bump_epoch)
    return ctx.response("EndTxnResponse", throttle_time=0,
                        error_code=_for_version(ctx, result.error),
                        producer_id=result.producer_id, producer_epoch=result.producer_epoch)


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(ctx: RequestContext, request) -> object:
    def describe(transactional_id: str) -> object:
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                       transactional_id):
            error, snapshot = ErrorCode.transactional_id_authorization_failed, None
        else:
            error, snapshot = _coordinator(ctx).describe(transactional_id)
        if snapshot is None:
            return ctx.response("TransactionState", error_code=error,
                                transactional_id=transactional_id, transaction_state="",
                                transaction_timeout=0, transaction_start_time=-1,
                                producer_id=-1, producer_epoch=-1, topics=())
        by_topic: dict[str, list[int]] = {}
        # The transaction's topics the client may not describe are left out.
        hidden = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (topic for topic, _ in snapshot.partitions))
        for topic, partition in sorted(snapshot.partitions):
            if topic not in hidden:
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
    hidden = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                          (transactional_id for transactional_id, _ in listed))
    listed = [(tid, snapshot) for tid, snapshot in listed if tid not in hidden]
    return ctx.response("ListTransactionsResponse", throttle_time=0, error_code=error,
                        unknown_state_filters=unknown, transaction_states=tuple(
        ctx.response("TransactionState", transactional_id=transactional_id,
                     producer_id=snapshot.producer_id,
                     transaction_state=snapshot.state.display_name)
        for transactional_id, snapshot in listed))
