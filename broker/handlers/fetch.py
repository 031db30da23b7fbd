from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import millis
from protocol.hand_encoded import FetchAnswer, FetchedPartition, FetchedTopic
from replication.cluster_metadata import METADATA_TOPIC
from protocol.records import iter_batches
from replication.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    FetchSessionError,
    PartitionKey,
)
from replication.acls import AclOperation, ResourceType
from replication.loop_slice import LoopSlice
from replication.partition import Partition, PartitionError, wait_for_any_change
from storage.log import KafkaStorageError, OffsetOutOfRange, RecordsLost

from ..client_az import client_az
from ..diskless_routing import stable_choice
from ..security.authorize import allowed
from .controller_apis import metadata_log_fetch
from .registry import RequestContext, handles

READ_COMMITTED = 1
# How long a Fetch reads partitions before it yields to the event loop (each read may open
# the partition's log: a follower's first fetch of a new topic opens thousands).
READ_SLICE_S = 0.005
# Lookups again of a consumer's prefetched batches that moved while they came in (a merge
# of small WAL objects applied meanwhile); what moves after that is read partition by
# partition.
PREFETCH_REFRESHES = 8
# Fetch v11 (KIP-392) is the first version whose clients may fetch from followers.
FOLLOWER_FETCH_MIN_VERSION = 11


class PartitionRead(NamedTuple):
    entry: object  # the partition's response entry
    size: int  # the record bytes it carries
    watch: Partition | None  # the partition to watch for new data (None: the entry is an error)
    # A follower is sent a high watermark it does not know yet: answer without waiting.
    answer_now: bool = False
    # There were records to send and none went (the response was full, or throttled).
    more: bool = False


async def _read_partition(reads: _Reads, topic: str, fetch, budget: int,
                          first_data: bool) -> PartitionRead:
    ctx, request, replica_id = reads.ctx, reads.request, reads.replica_id
    index = fetch.partition
    answer_now = False
    if not reads.may_read(topic):
        return PartitionRead(_entry(request, index, ErrorCode.topic_authorization_failed),
                             0, None)
    try:
        partition = ctx.services.replicas.get(topic, index)
        current_epoch = getattr(fetch, "current_leader_epoch", -1)
        if replica_id >= 0:
            # A follower: its fetch offset is its log end offset; it may read to ours.
            partition.check_leader(current_epoch)
            answer_now = reads.record_follower_fetch(partition, (topic, index), fetch.fetch_offset)
            upper = partition.log.log_end_offset
        else:
            partition.check_epoch(current_epoch)
            if not partition.is_leader and ctx.version < FOLLOWER_FETCH_MIN_VERSION:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            await partition.catch_up(reads.received_at)
            preferred = (None if reads.zone is None
                         else _preferred_read_replica(ctx, partition, reads.zone))
            if preferred is not None:
                return PartitionRead(_entry(
                    request, index, ErrorCode.none, hw=partition.high_watermark,
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
        aborted = (_aborted_transactions(partition, fetch.fetch_offset, records)
                   if request.isolation_level == READ_COMMITTED and replica_id < 0 else None)
        error = ErrorCode.none
    except PartitionError as e:
        return PartitionRead(_entry(request, index, e.error_code), 0, None)
    except OffsetOutOfRange:
        return PartitionRead(_entry(request, index, ErrorCode.offset_out_of_range,
                                    hw=partition.high_watermark,
                                    log_start=partition.log.log_start_offset), 0, None)
    except RecordsLost:
        # Not KAFKA_STORAGE_ERROR, which clients retry forever without a word (see RecordsLost).
        return PartitionRead(_entry(request, index, ErrorCode.unknown_server_error), 0, None)
    except KafkaStorageError:
        return PartitionRead(_entry(request, index, ErrorCode.kafka_storage_error), 0, None)
    # A follower keeps its own last stable offset (from its log and high watermark).
    entry = _entry(request, index, error, hw=partition.high_watermark,
                   lso=partition.last_stable_offset if replica_id < 0 else -1,
                   log_start=partition.log.log_start_offset, records=records, aborted=aborted)
    return PartitionRead(entry, len(records), partition, answer_now,
                         more=not records and fetch.fetch_offset < upper)


def _aborted_transactions(partition: Partition, fetch_offset: int,
                          records: bytes) -> tuple:
    """The aborted transactions with records in what the fetch returns, which a
    read_committed consumer drops (up to their abort markers)."""
    if not records:
        return ()
    end = fetch_offset
    for header in iter_batches(records, allow_partial_tail=True):
        end = header.next_offset
    return tuple(partition.log.aborted_transactions(fetch_offset, end))


def _preferred_read_replica(ctx: RequestContext, partition: Partition,
                            zone: str) -> int | None:
    """KIP-392: a consumer in AZ ``zone`` (broker.client_az: client.rack first) that this
    broker, in another AZ, serves is sent to a broker in its AZ that can serve the partition
    too (an in-sync replica; for a diskless partition any broker), the same one every time."""
    if not partition.is_leader:
        return None
    image = ctx.services.image
    own = image.brokers.get(partition.node_id)
    if own is not None and own.rack == zone:
        return None
    in_zone = [broker for broker in map(image.brokers.get, partition.read_replicas(image))
               if broker is not None and not broker.fenced and broker.rack == zone]
    chosen = stable_choice(partition.topic, partition.index, in_zone)
    return chosen.node_id if chosen is not None else None


def _entry(request, index: int, error: ErrorCode, hw: int = -1,
           lso: int = -1, log_start: int = -1, records: bytes = b"", preferred: int = -1,
           aborted: tuple | None = None) -> FetchedPartition:
    if aborted is None and request.isolation_level == READ_COMMITTED:
        aborted = ()
    return FetchedPartition(index, error, hw, lso, log_start, aborted, preferred, records)


def response_bytes_bound(request, fetch_max_bytes: int) -> int:
    """The record bytes a Fetch may answer with (Kafka may exceed it by one batch, so that
    a consumer always progresses): the request's limits under the broker's fetch.max.bytes."""
    partitions = sum(fetch.partition_max_bytes for topic in request.topics
                     for fetch in topic.partitions)
    requested = request.max_bytes if request.max_bytes > 0 else partitions
    return min(requested, partitions, fetch_max_bytes)


class _Reads:
    """What a Fetch has read so far, by partition: a long poll reads again only what changed
    (every partition without a session), and a later read of a partition replaces the
    earlier one. It also holds what every partition's read needs from the request, worked
    out once (a fetch may list thousands of partitions)."""

    def __init__(self, ctx: RequestContext, request, budget: int, received_at: float,
                 session: FetchSession | None) -> None:
        self.ctx = ctx
        self.request = request
        self.session = session
        self.received_at = received_at
        self.replica_id = getattr(request, "replica_id", -1)
        self.zone = client_az(ctx.header.client_id, getattr(request, "rack_id", ""))
        self._may_read: dict[str, bool] = {}
        self.budget = budget
        self.by_key: dict[PartitionKey, tuple[object, PartitionRead]] = {}
        self.answer_now = False

    def may_read(self, topic: str) -> bool:
        """READ on the topic (a follower's fetch comes from a broker, broker.inter_broker:
        its CLUSTER_ACTION was checked), asked once per topic and request."""
        if self.replica_id >= 0:
            return True
        found = self._may_read.get(topic)
        if found is None:
            found = self._may_read[topic] = allowed(self.ctx, AclOperation.READ,
                                                    ResourceType.TOPIC, topic)
        return found

    def record_follower_fetch(self, partition: Partition, key: PartitionKey,
                              fetch_offset: int) -> bool:
        """Partition.record_follower_fetch. The high watermark the follower's position
        moves is in this read's answer: the change is not news for the session's next
        read, which would otherwise read the partition once more for every acks=all append
        (the last follower's acknowledgement moves the high watermark)."""
        session = self.session
        changed_before = session is None or key in session.changed
        answer_now = partition.record_follower_fetch(self.replica_id, fetch_offset)
        if not changed_before and key in session.changed:
            session.answered_here(key)
        return answer_now

    @property
    def total(self) -> int:
        return sum(read.size for _, read in self.by_key.values())

    async def read(self, targets: list[tuple[str, object]],
                   ) -> list[tuple[PartitionKey, PartitionRead]]:
        """Read ``targets`` (topic, the partition's fetch position) in order."""
        for key in {(topic, fetch.partition) for topic, fetch in targets}:
            self.by_key.pop(key, None)
        turns = LoopSlice(READ_SLICE_S)
        await self._prefetch(targets, turns)
        total = self.total
        done = []
        for topic, fetch in targets:
            await turns.pause()
            read = await _read_partition(self, topic, fetch, max(self.budget - total, 0),
                                         total == 0)
            key = (topic, fetch.partition)
            self.by_key[key] = (fetch, read)
            total += read.size
            self.answer_now = self.answer_now or read.watch is None or read.answer_now
            done.append((key, read))
        return done

    async def _prefetch(self, targets: list[tuple[str, object]], turns: LoopSlice) -> None:
        """A consumer's reads from object storage (PartitionLog.prefetch: diskless), within
        the response's budget, brought in together rather than one partition after the
        other by the reads in order, which then find them cached."""
        if self.replica_id >= 0:
            return
        left = self.budget - self.total
        hosted = self.ctx.services.replicas.partitions
        pending: list = []
        logs = []
        # In the read's turns: a diskless partition's high watermark is a batch-coordinator
        # lookup, and a consumer's first fetch lists thousands (10,000 held the loop 65 ms).
        for topic, fetch in targets:
            if left <= 0:
                break
            await turns.pause()
            partition = hosted.get((topic, fetch.partition))
            if partition is None or fetch.fetch_offset >= partition.high_watermark:
                continue
            started = partition.log.prefetch(fetch.fetch_offset,
                                             min(fetch.partition_max_bytes, left),
                                             max_offset=partition.high_watermark)
            logs.append(partition.log)
            if started is None:
                continue
            left -= started.size
            pending.append(started.done)
        await asyncio.gather(*pending)
        # What was found may have moved while it came in (PartitionLog.refresh_prefetch).
        for _ in range(PREFETCH_REFRESHES):
            pending = []
            for log in logs:
                await turns.pause()
                if (again := log.refresh_prefetch()) is not None:
                    pending.append(again.done)
            if not pending:
                break
            await asyncio.gather(*pending)

    def topics(self, include=lambda key, fetch, entry: True) -> list[FetchedTopic]:
        """The response's topics: the entries ``include`` keeps, grouped by topic."""
        by_topic: dict[str, list] = {}
        for (topic, _), (fetch, read) in self.by_key.items():
            if include((topic, fetch.partition), fetch, read.entry):
                by_topic.setdefault(topic, []).append(read.entry)
        return [FetchedTopic(topic, entries) for topic, entries in by_topic.items()]


def _requested(request) -> list[tuple[str, object]]:
    return [(topic.topic, fetch) for topic in request.topics for fetch in topic.partitions]


def _open_session(ctx: RequestContext, request) -> FetchSession | None:
    """The request's fetch session (KIP-227; see replication.fetch_session), updated with
    what the request lists and forgets; None for a fetch without one. Raises
    FetchSessionError."""
    sessions = ctx.services.fetch_sessions
    session_id, epoch = request.session_id, request.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            sessions.remove(session_id)
        if epoch == FINAL_EPOCH:
            return None
        partitions = {}
        for topic, fetch in _requested(request):
            cached = partitions[(topic, fetch.partition)] = CachedPartition(
                fetch.partition, fetch.fetch_offset, fetch.partition_max_bytes)
            cached.ask(fetch)
        session = sessions.create(getattr(request, "replica_id", -1) >= 0, partitions)
        if session is not None:
            session.changed.update(partitions)
        return session
    session = sessions.get(session_id, epoch)
    session.update(_requested(request), ((topic.topic, index)
                                         for topic in request.forgotten_topics_data
                                         for index in topic.partitions))
    return session


def _targets(session: FetchSession) -> list[tuple[str, object]]:
    return [(key[0], session.partitions[key]) for key in session.take_changed()]


def _after_session_read(ctx: RequestContext, session: FetchSession,
                        done: list[tuple[PartitionKey, PartitionRead]]) -> None:
    """Watch what was read for changes; read again next time what has data left unsent."""
    for key, read in done:
        partition = ctx.services.replicas.partitions.get(key)
        session.watch(key, partition)
        if partition is None or read.more:
            session.still_pending(key)


@handles(ApiKey.FETCH)
async def fetch(ctx: RequestContext, request) -> object:
    if any(topic.topic == METADATA_TOPIC for topic in request.topics):
        # The metadata log is the controller quorum's, served by its leader (KIP-595).
        return await metadata_log_fetch(ctx, request)
    received_at = time.monotonic()
    deadline = received_at + millis(request.max_wait) / 1000
    by_replica = getattr(request, "replica_id", -1) >= 0
    try:
        session = _open_session(ctx, request)
    except FetchSessionError as e:
        ctx.services.fetch_sessions.requests[e.error_code.name.lower()] += 1
        return FetchAnswer(0, e.error_code, INVALID_SESSION_ID, ())
    if by_replica:
        ctx.services.replicas.follower_fetched(request.replica_id)
    incremental = session is not None and request.session_epoch > INITIAL_EPOCH
    ctx.services.fetch_sessions.requests[
        "none" if session is None else "incremental" if incremental else "full"] += 1
    fetch_max_bytes = ctx.services.config.fetch_max_bytes
    reads = _Reads(ctx, request, response_bytes_bound(request, fetch_max_bytes)
                   if session is None
                   else min(request.max_bytes if request.max_bytes > 0 else fetch_max_bytes,
                            fetch_max_bytes), received_at, session)
    while True:
        if session is None:
            await reads.read(_requested(request))
        else:
            _after_session_read(ctx, session, await reads.read(_targets(session)))
        remaining = deadline - time.monotonic()
        if reads.total >= request.min_bytes or reads.answer_now or remaining <= 0:
            break
        if session is not None:
            await session.wait_for_change(remaining)  # long poll
            continue
        watched = [read.watch for _, read in reads.by_key.values() if read.watch is not None]
        if not watched:
            break
        await wait_for_any_change(watched, remaining)  # long poll
    if session is None:
        topics = reads.topics()
    else:
        # A new session's answer lists every partition; an incremental one only the news.
        topics = reads.topics(lambda key, cached, entry: (
            cached.is_news(entry) or not incremental))
    for topic in topics:
        if topic.topic != METADATA_TOPIC:  # brokers following the controller, not a topic's use
            ctx.services.topic_metrics.fetched(
                topic.topic, sum(len(p.records or b"") for p in topic.partitions), by_replica)
    return FetchAnswer(0, ErrorCode.none,
                       INVALID_SESSION_ID if session is None else session.session_id, topics)
