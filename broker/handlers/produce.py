from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.transaction.partition_adder import RETRIABLE_ADD_ERRORS
from protocol.apis import ApiKey
from protocol.build import millis
from protocol.hand_encoded import ProduceAnswer, ProducedPartition, ProducedTopic
from protocol.records import (
    BatchHeader,
    CorruptRecordBatch,
    InvalidRecordBatch,
    UnsupportedMagic,
    validate_produce_records,
)
from replication.acls import AclOperation, ResourceType
from replication.partition import Partition, PartitionError
from storage.disk_space import log_storage_error
from storage.log import AppendResult, KafkaStorageError, RecordListTooLarge, RecordTooLarge
from storage.producer_state import NO_OFFSET, ProducerStateError

from ..security.authorize import allowed
from .registry import RequestContext, handles

TopicPartition = tuple[str, int]

log = logging.getLogger(__name__)


def _batch_error(error: InvalidRecordBatch) -> ErrorCode:
    if isinstance(error, CorruptRecordBatch):
        return ErrorCode.corrupt_message
    if isinstance(error, UnsupportedMagic):
        return ErrorCode.unsupported_for_message_format
    return ErrorCode.invalid_record


# Produce v12+ speaks transaction protocol version 2 (KIP-890): the producer sends no
# AddPartitionsToTxn, the partition leader adds its partition to the transaction itself.
_ADDS_PARTITIONS_SINCE = 12
# Producers know TRANSACTION_ABORTABLE from Produce v11 on; older ones get INVALID_TXN_STATE.
_TRANSACTION_ABORTABLE_SINCE = 11

Outcome = AppendResult | tuple[ErrorCode, str | None]


@dataclass(frozen=True, slots=True)
class _Validated:
    """One partition's records, checked and ready to append on this leader."""
    partition: Partition
    records: bytes
    batches: list[BatchHeader]


def _validate(ctx: RequestContext, topic: str, partition_index: int, records: bytes | None,
              acks: int) -> _Validated | tuple[ErrorCode, str | None]:
    if not allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic):
        return ErrorCode.topic_authorization_failed, None
    try:
        partition = ctx.services.replicas.get(topic, partition_index)
        partition.check_leader()
        batches = validate_produce_records(records or b"")
    except PartitionError as e:
        return e.error_code, str(e)
    except InvalidRecordBatch as e:
        log.info("rejecting produce to %s-%d from %s: %s", topic, partition_index, ctx.peer, e)
        return _batch_error(e), str(e)
    if ctx.services.capture is not None:
        ctx.services.capture.record(ctx.header.client_id, topic, partition_index, batches,
                                    len(records), acks)
    return _Validated(partition, records, batches)


async def _append(ctx: RequestContext, topic: str, partition_index: int,
                  validated: _Validated | tuple[ErrorCode, str | None], acks: int,
                  timeout_s: float) -> Outcome:
    """Append one partition's validated records; an error becomes (code, message)."""
    if not isinstance(validated, _Validated):
        return validated
    try:
        result = await validated.partition.append_as_leader(
            bytearray(validated.records), validated.batches, acks, timeout_s)
        ctx.services.topic_metrics.produced(topic, len(validated.records), sum(
            batch.record_count for batch in validated.batches))
        return result
    except PartitionError as e:
        return e.error_code, str(e)
    except InvalidRecordBatch as e:
        log.info("rejecting produce to %s-%d from %s: %s", topic, partition_index, ctx.peer, e)
        return _batch_error(e), str(e)
    except RecordListTooLarge as e:
        return ErrorCode.record_list_too_large, str(e)
    except RecordTooLarge as e:
        return ErrorCode.message_too_large, str(e)
    except ProducerStateError as e:
        return e.error_code, str(e)
    except KafkaStorageError as e:
        log_storage_error(log, f"appending to {topic}-{partition_index}", e)
        return ErrorCode.kafka_storage_error, str(e)


def _in_open_transaction(partition: Partition, batch: BatchHeader) -> bool:
    """Kafka's hasOngoingTransaction: the producer's transaction at this epoch is open here."""
    entry = partition.log.producer(batch.producer_id)
    return (entry is not None and entry.epoch == batch.producer_epoch
            and entry.txn_first_offset != NO_OFFSET)


async def _add_to_transaction(ctx: RequestContext, transactional_id: str | None,
                              validated: dict[TopicPartition, _Validated | tuple]
                              ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    """Produce v12+: add every partition whose transactional batches open a transaction here
    to the producer's transaction at its coordinator, in one call; the partitions that could
    not be added, with the error their producer gets."""
    if ctx.version < _ADDS_PARTITIONS_SINCE or not transactional_id:
        return {}
    adder = ctx.services.transaction_partitions
    first: BatchHeader | None = None
    to_add = []
    for tp, checked in validated.items():
        if not isinstance(checked, _Validated):
            continue
        batch = next((b for b in checked.batches if b.is_transactional), None)
        if batch is None:
            continue
        first = first or batch
        if not _in_open_transaction(checked.partition, batch):
            to_add.append(tp)
    if not to_add:
        return {}
    errors = await adder.add(transactional_id, first.producer_id, first.producer_epoch, to_add)
    return {tp: (_for_producer(ctx, error),
                 f"partition not added to the transaction: {error.name}")
            for tp, error in errors.items()}


def _for_producer(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error in RETRIABLE_ADD_ERRORS:
        # NOT_ENOUGH_REPLICAS does not make the producer refresh its metadata.
        return ErrorCode.not_enough_replicas
    if error == ErrorCode.transaction_abortable and ctx.version < _TRANSACTION_ABORTABLE_SINCE:
        return ErrorCode.invalid_txn_state
    return error


@handles(ApiKey.PRODUCE)
async def produce(ctx: RequestContext, request) -> object | None:
    acks = request.acks
    fixed_error = ErrorCode.invalid_required_acks if acks not in (0, 1, -1) else None
    if (fixed_error is None and request.transactional_id is not None
            and not allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                            request.transactional_id)):
        fixed_error = ErrorCode.transactional_id_authorization_failed

    keys = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
    if fixed_error is not None:
        outcomes: list = [(fixed_error, None)] * len(keys)
    else:
        validated = {(t.name, p.index): _validate(ctx, t.name, p.index, p.records, acks)
                     for t in request.topic_data for p in t.partition_data}
        validated |= await _add_to_transaction(ctx, request.transactional_id, validated)
        timeout_s = millis(request.timeout) / 1000
        if len(keys) == 1:  # a librdkafka producer's every request: no task to gather
            (topic, index), = keys
            outcomes = [await _append(ctx, topic, index, validated[(topic, index)], acks,
                                      timeout_s)]
        else:
            # gather starts the appends in request order before any of them can suspend,
            # which keeps pipelined requests' batches in order (see broker.connection).
            outcomes = await asyncio.gather(*(
                _append(ctx, topic, index, validated[(topic, index)], acks, timeout_s)
                for topic, index in keys))
    if acks == 0:
        return None

    by_topic: dict[str, list[ProducedPartition]] = {}
    for (topic, index), outcome in zip(keys, outcomes):
        if isinstance(outcome, AppendResult):
            entry = ProducedPartition(index, ErrorCode.none, outcome.base_offset,
                                      outcome.log_append_time_ms, outcome.log_start_offset)
        else:
            code, message = outcome
            entry = ProducedPartition(index, code, error_message=message)
        by_topic.setdefault(topic, []).append(entry)
    return ProduceAnswer([ProducedTopic(topic, entries) for topic, entries in by_topic.items()])
