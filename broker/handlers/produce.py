from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import millis
from protocol.records import (
    CorruptRecordBatch,
    InvalidRecordBatch,
    UnsupportedMagic,
    validate_produce_records,
)
from replication.partition import PartitionError
from storage.disk_space import log_storage_error
from storage.log import AppendResult, KafkaStorageError, RecordTooLarge
from storage.producer_state import ProducerStateError

from .registry import RequestContext, handles

log = logging.getLogger(__name__)


def _batch_error(error: InvalidRecordBatch) -> ErrorCode:
    if isinstance(error, CorruptRecordBatch):
        return ErrorCode.corrupt_message
    if isinstance(error, UnsupportedMagic):
        return ErrorCode.unsupported_for_message_format
    return ErrorCode.invalid_record


async def _append(ctx: RequestContext, topic: str, partition_index: int, records: bytes | None,
                  acks: int, timeout_s: float) -> AppendResult | tuple[ErrorCode, str | None]:
    """Validate and append one partition's records; an error becomes (code, message)."""
    try:
        partition = ctx.services.replicas.get(topic, partition_index)
        partition.check_leader()
        batches = validate_produce_records(records or b"")
        if ctx.services.capture is not None:
            ctx.services.capture.record(ctx.header.client_id, topic, partition_index, batches,
                                        len(records), acks)
        result = await partition.append_as_leader(bytearray(records), batches, acks, timeout_s)
        ctx.services.topic_metrics.produced(topic, len(records),
                                            sum(batch.record_count for batch in batches))
        return result
    except PartitionError as e:
        return e.error_code, str(e)
    except InvalidRecordBatch as e:
        log.info("rejecting produce to %s-%d from %s: %s", topic, partition_index, ctx.peer, e)
        return _batch_error(e), str(e)
    except RecordTooLarge as e:
        return ErrorCode.message_too_large, str(e)
    except ProducerStateError as e:
        return e.error_code, str(e)
    except KafkaStorageError as e:
        log_storage_error(log, f"appending to {topic}-{partition_index}", e)
        return ErrorCode.kafka_storage_error, str(e)


@handles(ApiKey.PRODUCE)
async def produce(ctx: RequestContext, request) -> object | None:
    acks = request.acks
    fixed_error = ErrorCode.invalid_required_acks if acks not in (0, 1, -1) else None

    keys = [(t.name, p.index) for t in request.topic_data for p in t.partition_data]
    if fixed_error is not None:
        outcomes: list = [(fixed_error, None)] * len(keys)
    else:
        # gather starts the appends in request order before any of them can suspend,
        # which keeps pipelined requests' batches in order (see broker.connection).
        outcomes = await asyncio.gather(*(
            _append(ctx, t.name, p.index, p.records, acks, millis(request.timeout) / 1000)
            for t in request.topic_data for p in t.partition_data))
    if acks == 0:
        return None

    by_topic: dict[str, list] = {}
    for (topic, index), outcome in zip(keys, outcomes):
        if isinstance(outcome, AppendResult):
            entry = ctx.response("PartitionProduceResponse", index=index,
                                 error_code=ErrorCode.none, base_offset=outcome.base_offset,
                                 log_append_time=outcome.log_append_time_ms,
                                 log_start_offset=outcome.log_start_offset, record_errors=())
        else:
            code, message = outcome
            entry = ctx.response("PartitionProduceResponse", index=index, error_code=code,
                                 base_offset=-1, log_append_time=-1, log_start_offset=-1,
                                 record_errors=(), error_message=message)
        by_topic.setdefault(topic, []).append(entry)
    return ctx.response("ProduceResponse", throttle_time=0, responses=tuple(
        ctx.response("TopicProduceResponse", name=topic, partition_responses=tuple(entries))
        for topic, entries in by_topic.items()))
