from __future__ import annotations

import time
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import millis
from replication.cluster_metadata import METADATA_TOPIC
from protocol.records import iter_batches
from replication.partition import Partition, PartitionError, wait_for_any_change
from storage.log import KafkaStorageError, OffsetOutOfRange, RecordsLost

from ..client_az import client_az
from ..diskless_routing import stable_choice
from .registry import RequestContext, handles

READ_COMMITTED = 1
# Fetch v11 (KIP-392) is the first version whose clients may fetch from followers.
FOLLOWER_FETCH_MIN_VERSION = 11


class PartitionRead(NamedTuple):
    entry: object  # the partition's response entry
    size: int  # the record bytes it carries
    watch: Partition | None  # the partition to watch for new data (None: the entry is an error)
    # A follower is sent a high watermark it does not know yet: answer without waiting.
    answer_now: bool = False


async def _read_partition(ctx: RequestContext, request, topic: str, fetch, budget: int,
                          first_data: bool, received_at: float) -> PartitionRead:
    index = fetch.partition
    replica_id = getattr(request, "replica_id", -1)
    answer_now = False
    try:
        partition = ctx.services.replicas.get(topic, index)
        current_epoch = getattr(fetch, "current_leader_epoch", -1)
        if replica_id >= 0:
            # A follower: its fetch offset is its log end offset; it may read to ours.
            partition.check_leader(current_epoch)
            answer_now = partition.record_follower_fetch(replica_id, fetch.fetch_offset)
            upper = partition.log.log_end_offset
        else:
            partition.check_epoch(current_epoch)
            if not partition.is_leader and ctx.version < FOLLOWER_FETCH_MIN_VERSION:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            await partition.catch_up(received_at)
            preferred = _preferred_read_replica(
                ctx, partition, client_az(ctx.header.client_id, getattr(request, "rack_id", "")))
            if preferred is not None:
                return PartitionRead(_entry(
                    ctx, request, index, ErrorCode.none, hw=partition.high_watermark,
                    lso=partition.last_stable_offset, log_start=partition.log.log_start_offset,
                    preferred=preferred), 0, None)
            upper = (partition.last_stable_offset if request.isolation_level == READ_COMMITTED
                     else partition.high_watermark)
        if fetch.fetch_offset > partition.log.log_end_offset:
            raise OffsetOutOfRange()
        max_bytes = min(fetch.partition_max_bytes, budget)
        if replica_id >= 0:
            replicas = ctx.services.replicas
            throttled = replicas.leader_throttled(partition, replica_id)
            if throttled and replicas.leader_quota.exceeded():
                records = b""  # leader.replication.throttled.rate: later (replication.throttle)
            else:
                # Also when caught up: the engine may track what its followers hold.
                result = await partition.log.read_for_replica(
                    replica_id, fetch.fetch_offset, max_bytes, max_offset=upper,
                    min_one_batch=first_data)
                records = result.records
            if throttled:
                replicas.leader_quota.record(len(records))
        elif fetch.fetch_offset >= upper:
            records = b""
            # An offset below the log start is out of range even when nothing is readable.
            if fetch.fetch_offset < partition.log.log_start_offset:
                raise OffsetOutOfRange()
        else:
            result = await partition.log.read(fetch.fetch_offset, max_bytes,
                                              max_offset=upper, min_one_batch=first_data)
            records = result.records
        aborted = (_aborted_transactions(ctx, partition, fetch.fetch_offset, records)
                   if request.isolation_level == READ_COMMITTED and replica_id < 0 else None)
        error = ErrorCode.none
    except PartitionError as e:
        return PartitionRead(_entry(ctx, request, index, e.error_code), 0, None)
    except OffsetOutOfRange:
        return PartitionRead(_entry(ctx, request, index, ErrorCode.offset_out_of_range,
                                    hw=partition.high_watermark,
                                    log_start=partition.log.log_start_offset), 0, None)
    except RecordsLost:
        # Not KAFKA_STORAGE_ERROR, which clients retry forever without a word (see RecordsLost).
        return PartitionRead(_entry(ctx, request, index, ErrorCode.unknown_server_error), 0, None)
    except KafkaStorageError:
        return PartitionRead(_entry(ctx, request, index, ErrorCode.kafka_storage_error), 0, None)
    entry = _entry(ctx, request, index, error, hw=partition.high_watermark,
                   lso=partition.last_stable_offset, log_start=partition.log.log_start_offset,
                   records=records, aborted=aborted)
    return PartitionRead(entry, len(records), partition, answer_now)


def _aborted_transactions(ctx: RequestContext, partition: Partition, fetch_offset: int,
                          records: bytes) -> tuple:
    """The aborted transactions with records in what the fetch returns, which a
    read_committed consumer drops (up to their abort markers)."""
    if not records:
        return ()
    end = fetch_offset
    for header in iter_batches(records, allow_partial_tail=True):
        end = header.next_offset
    return tuple(ctx.response("AbortedTransaction", producer_id=t.producer_id,
                              first_offset=t.first_offset)
                 for t in partition.log.aborted_transactions(fetch_offset, end))


def _preferred_read_replica(ctx: RequestContext, partition: Partition,
                            zone: str | None) -> int | None:
    """KIP-392: a consumer in AZ ``zone`` (broker.client_az: client.rack first) that this
    broker, in another AZ, serves is sent to a broker in its AZ that can serve the partition
    too (an in-sync replica; for a diskless partition any broker), the same one every time."""
    if zone is None or not partition.is_leader:
        return None
    image = ctx.services.image
    own = image.brokers.get(partition.node_id)
    if own is not None and own.rack == zone:
        return None
    in_zone = [broker for broker in map(image.brokers.get, partition.read_replicas(image))
               if broker is not None and not broker.fenced and broker.rack == zone]
    chosen = stable_choice(partition.topic, partition.index, in_zone)
    return chosen.node_id if chosen is not None else None


def _entry(ctx: RequestContext, request, index: int, error: ErrorCode, hw: int = -1,
           lso: int = -1, log_start: int = -1, records: bytes = b"", preferred: int = -1,
           aborted: tuple | None = None) -> object:
    if aborted is None and request.isolation_level == READ_COMMITTED:
        aborted = ()
    return ctx.response(
        "PartitionData", partition_index=index, error_code=error, high_watermark=hw,
        last_stable_offset=lso, log_start_offset=log_start, aborted_transactions=aborted,
        preferred_read_replica=preferred, records=records)


def response_bytes_bound(request, fetch_max_bytes: int) -> int:
    """The record bytes a Fetch may answer with (Kafka may exceed it by one batch, so that
    a consumer always progresses): the request's limits under the broker's fetch.max.bytes."""
    partitions = sum(fetch.partition_max_bytes for topic in request.topics
                     for fetch in topic.partitions)
    requested = request.max_bytes if request.max_bytes > 0 else partitions
    return min(requested, partitions, fetch_max_bytes)


async def _read_all(ctx: RequestContext, request,
                    received_at: float) -> tuple[list, int, bool, list[Partition]]:
    """The response's topics, their record bytes, whether it should be sent now regardless
    of them (an error, or news for a follower), and the partitions to watch."""
    budget = response_bytes_bound(request, ctx.services.config.fetch_max_bytes)
    total = 0
    answer_now = False
    watched: list[Partition] = []
    topics = []
    for fetch_topic in request.topics:
        entries = []
        for fetch in fetch_topic.partitions:
            read = await _read_partition(ctx, request, fetch_topic.topic, fetch,
                                         max(budget - total, 0), total == 0, received_at)
            entries.append(read.entry)
            total += read.size
            if read.watch is None:
                answer_now = True
            else:
                watched.append(read.watch)
                answer_now = answer_now or read.answer_now
        topics.append(ctx.response("FetchableTopicResponse", topic=fetch_topic.topic,
                                   partitions=tuple(entries)))
    return topics, total, answer_now, watched


@handles(ApiKey.FETCH)
async def fetch(ctx: RequestContext, request) -> object:
    received_at = time.monotonic()
    deadline = received_at + millis(request.max_wait) / 1000
    while True:
        topics, total, answer_now, watched = await _read_all(ctx, request, received_at)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or answer_now or remaining <= 0 or not watched:
            break
        await wait_for_any_change(watched, remaining)  # long poll
    by_replica = getattr(request, "replica_id", -1) >= 0
    for topic in topics:
        if topic.topic != METADATA_TOPIC:  # brokers following the controller, not a topic's use
            ctx.services.topic_metrics.fetched(
                topic.topic, sum(len(p.records or b"") for p in topic.partitions), by_replica)
    # Fetch sessions (KIP-227) are answered sessionless: id 0 means "send full requests".
    return ctx.response("FetchResponse", throttle_time=0, error_code=ErrorCode.none,
                        session_id=0, responses=tuple(topics))
