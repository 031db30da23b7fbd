from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import millis
from replication.partition import Partition, PartitionError, wait_for_any_change
from storage.log import KafkaStorageError, OffsetOutOfRange, RecordsLost

from .registry import RequestContext, handles

READ_COMMITTED = 1
# Fetch v11 (KIP-392) is the first version whose clients may fetch from followers.
FOLLOWER_FETCH_MIN_VERSION = 11


async def _read_partition(ctx: RequestContext, request, topic: str, fetch, budget: int,
                          first_data: bool) -> tuple[object, int, Partition | None]:
    """One partition's response entry, the record bytes it carries, and the partition to
    watch for new data (None when the entry is an error)."""
    index = fetch.partition
    replica_id = getattr(request, "replica_id", -1)
    try:
        partition = ctx.services.replicas.get(topic, index)
        current_epoch = getattr(fetch, "current_leader_epoch", -1)
        if replica_id >= 0:
            # A follower: its fetch offset is its log end offset; it may read to ours.
            partition.check_leader(current_epoch)
            partition.record_follower_fetch(replica_id, fetch.fetch_offset)
            upper = partition.log.log_end_offset
        else:
            partition.check_epoch(current_epoch)
            if not partition.is_leader and ctx.version < FOLLOWER_FETCH_MIN_VERSION:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            preferred = _preferred_read_replica(ctx, partition, getattr(request, "rack_id", ""))
            if preferred is not None:
                return _entry(ctx, request, index, ErrorCode.none, hw=partition.high_watermark,
                              lso=partition.last_stable_offset,
                              log_start=partition.log.log_start_offset,
                              preferred=preferred), 0, None
            upper = (partition.last_stable_offset if request.isolation_level == READ_COMMITTED
                     else partition.high_watermark)
        if fetch.fetch_offset > partition.log.log_end_offset:
            raise OffsetOutOfRange()
        max_bytes = min(fetch.partition_max_bytes, budget)
        if replica_id >= 0:
            # Also when caught up: the engine may track what its followers hold.
            result = await partition.log.read_for_replica(
                replica_id, fetch.fetch_offset, max_bytes, max_offset=upper,
                min_one_batch=first_data)
            records = result.records
        elif fetch.fetch_offset >= upper:
            records = b""
            # An offset below the log start is out of range even when nothing is readable.
            if fetch.fetch_offset < partition.log.log_start_offset:
                raise OffsetOutOfRange()
        else:
            result = await partition.log.read(fetch.fetch_offset, max_bytes,
                                              max_offset=upper, min_one_batch=first_data)
            records = result.records
        error = ErrorCode.none
    except PartitionError as e:
        return _entry(ctx, request, index, e.error_code), 0, None
    except OffsetOutOfRange:
        return _entry(ctx, request, index, ErrorCode.offset_out_of_range,
                      hw=partition.high_watermark,
                      log_start=partition.log.log_start_offset), 0, None
    except RecordsLost:
        # Not KAFKA_STORAGE_ERROR, which clients retry forever without a word (see RecordsLost).
        return _entry(ctx, request, index, ErrorCode.unknown_server_error), 0, None
    except KafkaStorageError:
        return _entry(ctx, request, index, ErrorCode.kafka_storage_error), 0, None
    entry = _entry(ctx, request, index, error, hw=partition.high_watermark,
                   lso=partition.last_stable_offset, log_start=partition.log.log_start_offset,
                   records=records)
    return entry, len(records), partition


def _preferred_read_replica(ctx: RequestContext, partition: Partition, client_rack: str) -> int | None:
    """KIP-392: the leader sends a consumer that names its rack to an in-sync replica in
    that rack, unless the leader is in it."""
    if not client_rack or not partition.is_leader:
        return None
    brokers = ctx.services.image.brokers
    own = brokers.get(partition.node_id)
    if own is not None and own.rack == client_rack:
        return None
    for replica in partition.isr:
        broker = brokers.get(replica)
        if broker is not None and not broker.fenced and broker.rack == client_rack:
            return replica
    return None


def _entry(ctx: RequestContext, request, index: int, error: ErrorCode, hw: int = -1,
           lso: int = -1, log_start: int = -1, records: bytes = b"", preferred: int = -1) -> object:
    return ctx.response(
        "PartitionData", partition_index=index, error_code=error, high_watermark=hw,
        last_stable_offset=lso, log_start_offset=log_start,
        aborted_transactions=() if request.isolation_level == READ_COMMITTED else None,
        preferred_read_replica=preferred, records=records)


async def _read_all(ctx: RequestContext, request) -> tuple[list, int, bool, list[Partition]]:
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    has_error = False
    watched: list[Partition] = []
    topics = []
    for fetch_topic in request.topics:
        entries = []
        for fetch in fetch_topic.partitions:
            entry, size, partition = await _read_partition(
                ctx, request, fetch_topic.topic, fetch, max(budget - total, 0), total == 0)
            entries.append(entry)
            total += size
            if partition is None:
                has_error = True
            else:
                watched.append(partition)
        topics.append(ctx.response("FetchableTopicResponse", topic=fetch_topic.topic,
                                   partitions=tuple(entries)))
    return topics, total, has_error, watched


@handles(ApiKey.FETCH)
async def fetch(ctx: RequestContext, request) -> object:
    deadline = time.monotonic() + millis(request.max_wait) / 1000
    while True:
        topics, total, has_error, watched = await _read_all(ctx, request)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or has_error or remaining <= 0 or not watched:
            break
        await wait_for_any_change(watched, remaining)  # long poll
    # Fetch sessions (KIP-227) are answered sessionless: id 0 means "send full requests".
    return ctx.response("FetchResponse", throttle_time=0, error_code=ErrorCode.none,
                        session_id=0, responses=tuple(topics))
