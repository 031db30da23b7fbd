"""Classic replication: a follower fetches from each leader it follows.

One fetcher per leader broker, as in Kafka's ReplicaFetcherThread. A partition that
becomes a follower first truncates its log to where it agrees with the leader's epoch
history (OffsetForLeaderEpoch, KIP-101/279), then fetches from its log end offset with
its replica id, which is how the leader learns the follower's position.

Its fetches run in an incremental fetch session (KIP-227, replication.fetch_session): each
lists only the partitions whose position moved since the last one, so an idle follower of
thousands of partitions sends (and the leader reads) next to nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
)
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from protocol.apis import ApiKey
from protocol.build import make
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError

from .fetch_session import INVALID_SESSION_ID, FetchPlan, FetchPosition, FetchSessionHandler
from .loop_slice import LoopSlice
from .node_client import NodeConnection
from .partition import ReplicatedPartition
from .throttle import ReplicationQuota

log = logging.getLogger(__name__)
FETCH_MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 1 << 20
# Epoch-history rounds before giving up on finding the divergence point.
MAX_TRUNCATION_ROUNDS = 8
# How long a fetcher whose every partition is throttled waits before measuring again.
THROTTLED_PAUSE_S = 0.1
# Answered partitions without records applied between the event loop's turns.
APPLY_SLICE_S = 0.005


class LeaderFetcher:
    def __init__(self, node_id: int, leader_id: int, connection: NodeConnection,
                 throttled: Callable[[ReplicatedPartition], bool] = lambda _: False,
                 quota: ReplicationQuota | None = None) -> None:
        """``throttled``: whether a partition's fetches count against ``quota``
        (follower.replication.throttled.rate); while that is exceeded they are left out."""
        self.node_id = node_id
        self.leader_id = leader_id
        self.connection = connection
        self.throttled = throttled
        self.quota = quota
        self.partitions: dict[tuple[str, int], ReplicatedPartition] = {}
        self._needs_truncation: set[tuple[str, int]] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.session = FetchSessionHandler()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def add(self, partition: ReplicatedPartition) -> None:
        key = (partition.topic, partition.index)
        self.partitions[key] = partition
        self._needs_truncation.add(key)
        self.session.resend(key)
        self._changed.set()

    def remove(self, topic: str, index: int) -> None:
        if self.partitions.pop((topic, index), None) is not None:
            self.session.forget((topic, index))
        self._needs_truncation.discard((topic, index))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if self._needs_truncation:
                    await self._truncate()
                await self._fetch_once()
            except (ConnectionError, OSError, asyncio.TimeoutError, KafkaStorageError) as e:
                # (A storage error here came from truncating this replica's log.)
                log.info("fetch from leader %d failed: %s", self.leader_id, e)
                self.session.reset()
                await asyncio.sleep(0.5)

    async def _truncate(self) -> None:
        for _ in range(MAX_TRUNCATION_ROUNDS):
            pending = {k: self.partitions[k] for k in self._needs_truncation if k in self.partitions}
            if not pending:
                return
            asked = {k: p.log.latest_epoch() for k, p in pending.items()}
            done = [k for k, epoch in asked.items() if epoch < 0]  # empty log: nothing to check
            request = make(OffsetForLeaderEpochRequest, replica_id=self.node_id, topics=tuple(
                make(OffsetForLeaderTopic, topic=topic, partitions=tuple(
                    make(OffsetForLeaderPartition, partition=index,
                         current_leader_epoch=pending[(topic, index)].leader_epoch,
                         leader_epoch=asked[(topic, index)])
                    for (t, index) in asked if t == topic and asked[(t, index)] >= 0))
                for topic in {t for t, _ in asked}))
            response = await self.connection.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, request, 10)
            for topic in response.topics:
                for result in topic.partitions:
                    key = (topic.topic, result.partition)
                    partition = pending.get(key)
                    if partition is None or result.error_code != ErrorCode.none:
                        continue  # retried in the next round or after a metadata update
                    log_ = partition.log
                    if result.end_offset >= 0 and result.end_offset < log_.log_end_offset:
                        log.info("truncating %s-%d from %d to %d (leader epoch %d ends there)",
                                 key[0], key[1], log_.log_end_offset, result.end_offset,
                                 result.leader_epoch)
                        await log_.truncate_to(result.end_offset)
                        self.session.moved(key)
                    if result.leader_epoch == asked[key] or result.leader_epoch < 0:
                        done.append(key)
            self._needs_truncation.difference_update(done)
        self._needs_truncation.clear()

    async def _fetch_once(self) -> None:
        # Only while a rate is set: otherwise nothing is held back, and looking at every
        # partition in every round is what an idle follower of thousands would spend on.
        limited = self.quota is not None and self.quota.rate() is not None
        throttled = {key for key, partition in self.partitions.items()
                     if self.throttled(partition)} if limited else set()
        held_back = throttled if throttled and self.quota.exceeded() else set()
        if held_back and len(held_back) == len(self.partitions):
            await asyncio.sleep(THROTTLED_PAUSE_S)
            return
        if held_back:
            # A fetch of only some partitions, outside the session, which stays as it was.
            plan = FetchPlan(INVALID_SESSION_ID, -1, self._positions(
                key for key in self.partitions if key not in held_back), [])
        else:
            plan = self.session.plan(self._positions(self.session.to_check(self.partitions)))
        request = self._request(plan)
        try:
            response = await self.connection.call(ApiKey.FETCH, request,
                                                  FETCH_MAX_WAIT_MS / 1000 + 30)
        except BaseException:
            self.session.reset()  # the broker may or may not have taken the request
            raise
        if not held_back:
            self.session.answered(plan, response.error_code, response.session_id)
        if response.error_code != ErrorCode.none:
            log.info("fetch session with leader %d: %s, starting a new one", self.leader_id,
                     response.error_code.name)
            return
        if throttled:
            self.quota.record(sum(len(data.records or b"") for topic in response.responses
                                  for data in topic.partitions
                                  if (topic.topic, data.partition_index) in throttled))
        answered = [(partition, data) for topic in response.responses
                    for data in topic.partitions
                    if (partition := self.partitions.get((topic.topic, data.partition_index)))
                    is not None]
        # Appends that wait on object storage (an active-tiered partition's downloads) run
        # concurrently, so as not to hold back the other partitions; the rest in turn, as
        # they never wait: a task each cost as much as the append (10,000 partitions).
        appending = [(partition, data) for partition, data in answered if data.records]
        ends = [partition.log.log_end_offset for partition, _ in appending]
        waits = [partition.log.follower_append_waits for partition, _ in appending]
        waiting = [i for i, wait in enumerate(waits) if wait]
        appended = [False] * len(appending)
        concurrent = asyncio.gather(*(self._apply(*appending[i]) for i in waiting))
        turns = LoopSlice(APPLY_SLICE_S)
        try:
            for i, wait in enumerate(waits):
                if not wait:
                    appended[i] = await self._apply(*appending[i])
                    await turns.pause()
        except BaseException:
            concurrent.cancel()
            raise
        for i, ok in zip(waiting, await concurrent):
            appended[i] = ok
        progressed = any(appended)
        for (partition, _), ok, end in zip(appending, appended, ends):
            # Records that did not move the log end (an active-tiered download that failed
            # falls back to the leader's records that way) are asked for again at once,
            # although this replica's position did not change.
            self._answered(partition, ok and partition.log.log_end_offset != end)
        # The rest in turn, without a task each: a first fetch of a new topic answers
        # thousands of partitions, and their tasks held the event loop for a tenth of a second.
        for partition, data in answered:
            if not data.records:
                ok = await self._apply(partition, data)
                progressed = progressed or ok
                self._answered(partition, ok)
                await turns.pause()
        if answered and not progressed:
            # Every partition is waiting for metadata that moves it: do not spin.
            await asyncio.sleep(0.1)

    def _answered(self, partition: ReplicatedPartition, moved_on: bool) -> None:
        key = (partition.topic, partition.index)
        self.session.moved(key)
        if not moved_on:
            self.session.resend(key)

    def _positions(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], FetchPosition]:
        return {key: FetchPosition(partition.log.log_end_offset, partition.leader_epoch,
                                   partition.log.log_start_offset)
                for key in keys if (partition := self.partitions.get(key)) is not None}

    def _request(self, plan: FetchPlan) -> FetchRequest:
        by_topic: dict[str, list] = {}
        for (topic, index), position in plan.to_send.items():
            # The class itself, not ``make``: one per partition of a first fetch (thousands), and
            # every field is in this version.
            by_topic.setdefault(topic, []).append(FetchPartition(
                partition=index, current_leader_epoch=position.current_leader_epoch,
                fetch_offset=position.fetch_offset,
                last_fetched_epoch=self.partitions[(topic, index)].log.latest_epoch(),
                log_start_offset=position.log_start_offset,
                partition_max_bytes=PARTITION_MAX_BYTES))
        forgotten: dict[str, list[int]] = {}
        for topic, index in plan.forgotten:
            forgotten.setdefault(topic, []).append(index)
        return make(FetchRequest, replica_id=self.node_id, max_wait=FETCH_MAX_WAIT_MS,
                    min_bytes=1, max_bytes=16 << 20, isolation_level=0,
                    session_id=plan.session_id, session_epoch=plan.epoch,
                    forgotten_topics_data=tuple(
                        make(ForgottenTopic, topic=topic, partitions=tuple(indexes))
                        for topic, indexes in forgotten.items()),
                    rack_id="",
                    topics=tuple(make(FetchTopic, topic=t, partitions=tuple(ps))
                                 for t, ps in by_topic.items()))

    async def _apply(self, partition: ReplicatedPartition, data) -> bool:
        if data.error_code == ErrorCode.none:
            if data.records:
                try:
                    await partition.log.append_as_follower(data.records)
                except KafkaStorageError as e:
                    # A full disk: this replica falls behind, out of the ISR, and catches up
                    # once space is freed; the other partitions go on replicating.
                    log_storage_error(log, f"replicating {partition.topic}-{partition.index}", e)
                    return False
            partition.update_follower_high_watermark(data.high_watermark)
            return True
        if data.error_code == ErrorCode.offset_out_of_range:
            if data.log_start_offset > partition.log.log_end_offset:
                # The leader deleted what we would fetch next: start over at its log start.
                log.info("%s-%d is behind the leader's log start %d: restarting there",
                         partition.topic, partition.index, data.log_start_offset)
                await partition.log.delete_records_before(data.log_start_offset)
            else:
                self._needs_truncation.add((partition.topic, partition.index))
            return True
        # Not leader / fenced epoch: wait for the metadata that moves this partition.
        log.debug("fetch of %s-%d from %d: %s", partition.topic, partition.index,
                  self.leader_id, data.error_code.name)
        return False
