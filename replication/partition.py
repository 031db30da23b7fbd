"""A partition as this broker sees it: its log, its role, its high watermark.

``Partition`` is what the request handlers and coordinators use; two kinds implement it:

- ``ReplicatedPartition`` (classic and active-tiered topics): the log (any engine) stores
  batches; the partition decides what is committed. As leader it tracks each follower's
  fetch position: the high watermark is the smallest log end offset in the ISR, followers
  that keep up join the ISR, followers that fall behind for ``replica.lag.time.max.ms``
  leave it. ISR changes go to the controller (AlterPartition) and take effect once it
  accepts them.
- ``LeaderlessPartition`` (diskless topics, replication.leaderless_partition): every broker
  serves it as if it led it.
"""

from __future__ import annotations

import abc
import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader
from replication.cluster_metadata import NO_LEADER, MetadataImage, PartitionInfo
from storage.append_rules import AppendOrigin
from storage.log import AppendResult, Leadership, PartitionLog

# (partition, proposed ISR) -> the controller's answer, applied by the caller.
IsrProposer = Callable[["ReplicatedPartition", list[int]], Awaitable[None]]


@dataclass(slots=True)
class IsrChanges:
    """ISR changes of the partitions a broker leads, whoever made them: the leader's own
    AlterPartition, or the controller dropping a replica whose broker it fenced."""
    shrinks: int = 0
    expands: int = 0

    def count(self, before: int, after: int) -> None:
        if after < before:
            self.shrinks += 1
        elif after > before:
            self.expands += 1


class PartitionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str = "") -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code


@dataclass
class FollowerState:
    log_end_offset: int = -1
    # When the follower last fetched at (or past) the leader's log end offset.
    caught_up_at: float = 0.0
    # The high watermark the follower's latest fetch was answered with (as far as we know).
    high_watermark_sent: int = -1


class Watchable:
    """Something long polls and acks=all wait on: new data, high watermark, leadership."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future] = set()
        # Called at every change, for as long as they are registered (fetch sessions).
        self._listeners: list[Callable[[], None]] = []

    def notify_waiters(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        for listener in self._listeners:
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.remove(listener)

    def add_waiter(self, waiter: asyncio.Future) -> None:
        self._waiters.add(waiter)

    def remove_waiter(self, waiter: asyncio.Future) -> None:
        self._waiters.discard(waiter)

    async def wait_for_change(self, timeout_s: float) -> None:
        await wait_for_any_change([self], timeout_s)


class Partition(Watchable, abc.ABC):
    """One partition hosted by this broker, whatever its storage mode."""

    def __init__(self, node_id: int, log: PartitionLog, info: PartitionInfo) -> None:
        super().__init__()
        self.node_id = node_id
        self.log = log
        self.topic = info.topic
        self.index = info.partition
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        # A live storage-mode switch under way (PartitionInfo.switch_to): no appends until
        # the next span is recorded (docs/mode-switch.md).
        self.sealed = False
        # Where this broker's log ended when it became the leader (-1: not the leader).
        # Until the high watermark reaches it, records of earlier leaders that were
        # acknowledged may still lie above it (Kafka's leaderEpochStartOffset, KIP-207).
        self.leader_epoch_start_offset = -1

    @abc.abstractmethod
    def update_info(self, info: PartitionInfo) -> None:
        """Apply the partition's latest metadata (leader, epochs, replicas, ISR)."""

    @property
    @abc.abstractmethod
    def is_leader(self) -> bool:
        """Whether this broker takes produce requests for the partition."""

    @property
    @abc.abstractmethod
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read up to (transactions, storage.producer_state)."""
        return self.log.last_stable_offset(self.high_watermark)

    @abc.abstractmethod
    def check_epoch(self, current_leader_epoch: int) -> None:
        """Raise the error Kafka gives a client whose leader epoch is not this one."""

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raise the error Kafka gives a client that talks to the wrong replica or epoch."""
        self.check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise PartitionError(ErrorCode.not_leader_or_follower)

    def check_not_sealed(self) -> None:
        """Refuse an append while the partition switches storage mode: retriable, and a
        client refreshes its metadata on it, as during a reassignment in Kafka; the switch
        bumps the leader epoch when the next span takes appends."""
        if self.sealed:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"{self.topic}-{self.index} is switching its storage mode")

    async def drain(self, timeout_s: float) -> None:
        """Once sealed: return when every append taken is committed, so the log's end is
        the sealed span's end (raises PartitionError when no longer the leader). A partition
        whose engine orders appends itself (diskless: the batch coordinator's seal) has
        nothing to wait for."""

    @abc.abstractmethod
    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float = 30.0,
                               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        """Append a produce request's validated batches (or a coordinator's, ``origin``);
        return once ``required_acks`` holds (-1: the ISR, or what the mode promises
        instead)."""

    async def catch_up(self, since: float) -> None:
        """Wait until this broker's view of the partition is at least as new as anything
        acknowledged to any client before ``since`` (time.monotonic()), so that ListOffsets,
        Fetch and DeleteRecords read their own writes through any broker. A leader's
        partition is, as is the view a follower serves under KIP-392 (Kafka does not promise
        it): nothing to wait for. Raises PartitionError(OFFSET_NOT_AVAILABLE) if it cannot
        catch up in time."""

    @abc.abstractmethod
    def record_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower replica fetched from ``fetch_offset``; True if the high watermark it
        is about to be sent is news to it (then its fetch is answered at once)."""

    @abc.abstractmethod
    def read_replicas(self, image: MetadataImage) -> list[int]:
        """The brokers that can serve consumers' reads of this partition: where a consumer
        in another AZ may be sent (KIP-392's preferred read replica)."""


class ReplicatedPartition(Partition):
    """A partition with a leader and follower replicas (classic, active-tiered)."""

    def __init__(self, node_id: int, log: PartitionLog, info: PartitionInfo,
                 propose_isr: IsrProposer | None = None,
                 isr_changes: IsrChanges | None = None,
                 last_fetch_by: Callable[[int], float] = lambda replica_id: 0.0,
                 committed_offset: int = 0,
                 isr_eligible: Callable[[int], bool] = lambda replica_id: True,
                 unsettled: Callable[["ReplicatedPartition"], None] = lambda partition: None,
                 ) -> None:
        """``last_fetch_by``: when a follower broker last fetched anything from this one.
        ``isr_eligible``: whether a follower's broker may join an ISR (not fenced, as
        Kafka's leader checks before it proposes: the controller refuses it otherwise).
        ``unsettled``: called when this partition, led here, may stop being ``isr_settled``
        (leadership or ISR changed, an append, a follower behind).
        ``committed_offset``: what is committed already (the base of a span that follows a
        diskless one: everything below it was committed by the batch coordinator)."""
        super().__init__(node_id, log, info)
        self.propose_isr = propose_isr
        self.isr_changes = isr_changes
        self.last_fetch_by = last_fetch_by
        self.isr_eligible = isr_eligible
        self.unsettled = unsettled
        self._followers: dict[int, FollowerState] = {}
        self._isr_change: asyncio.Task | None = None
        # Appends between the seal check and the log (an engine's append may await).
        self._appending = 0
        # acks=all appends waiting for the high watermark: (offset it must reach, order,
        # waiter), a heap, so that a change wakes only the appends it commits. Woken by
        # every change, the thousands of pipelined requests a producer has in flight to one
        # partition each went back to sleep on every append and every follower fetch:
        # a third of the leader's time, with 10,000 in flight.
        self._commit_waiters: list[tuple[int, int, asyncio.Future]] = []
        self._commit_order = itertools.count()
        # Waiters that stopped waiting (timed out, cancelled) but are still in the heap.
        self._abandoned_waiters = 0
        self._high_watermark = max(log.log_start_offset, committed_offset)
        self.update_info(info)

    def update_info(self, info: PartitionInfo) -> None:
        """Also where the log learns its role: whenever the leader or its epoch changes
        (Kafka's makeLeader/makeFollower), this tells it that this broker now leads or
        follows, before anything is appended in the new role."""
        new_leadership = info.leader != self.leader or info.leader_epoch != self.leader_epoch
        became_leader = new_leadership and info.leader == self.node_id
        if self.isr_changes is not None and self.is_leader and not new_leadership:
            self.isr_changes.count(len(self.isr), len(info.isr))
        self.leader = info.leader
        self.leader_epoch = info.leader_epoch
        self.partition_epoch = info.partition_epoch
        self.replicas = list(info.replicas)
        self.isr = list(info.isr)
        self.sealed = info.switch_to is not None
        if became_leader:
            now = time.monotonic()
            self._followers = {r: FollowerState(caught_up_at=now)
                               for r in self.replicas if r != self.node_id}
            self.leader_epoch_start_offset = self.log.log_end_offset
        elif self.is_leader:
            # A reassignment adds replicas to follow this leader and removes others.
            self._followers = {r: self._followers.get(r) or FollowerState()
                               for r in self.replicas if r != self.node_id}
        elif new_leadership:
            self.leader_epoch_start_offset = -1
        if new_leadership:
            self.log.on_leadership_change(
                Leadership.LEADER if became_leader else Leadership.FOLLOWER, self.leader_epoch)
        if self.is_leader:
            self.maybe_advance_high_watermark()
            self.unsettled(self)
        self.notify_waiters()  # fetches waiting here re-check their leader/epoch

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def check_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise PartitionError(ErrorCode.fenced_leader_epoch)
            if current_leader_epoch > self.leader_epoch:
                raise PartitionError(ErrorCode.unknown_leader_epoch)

    # --- leader ---------------------------------------------------------------------------

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float = 30.0,
                               origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendResult:
        self.check_leader()
        min_isr = self.log.config.min_insync_replicas
        if required_acks == -1 and len(self.isr) < min_isr:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"ISR {self.isr} is smaller than min.insync.replicas={min_isr}")
        self.check_not_sealed()
        self._note_caught_up_followers()
        self._appending += 1
        try:
            result = await self.log.append(records, batches, self.leader_epoch, origin)
        finally:
            self._appending -= 1
        self.maybe_advance_high_watermark()
        self.unsettled(self)  # its followers are behind until they fetch the append
        self._notify_progress()  # followers long-polling for new data
        if required_acks == -1:
            await self._wait_committed(result.last_offset + 1, timeout_s, min_isr)
        return result

    async def drain(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        epoch = self.leader_epoch
        while self._appending or self.high_watermark < self.log.log_end_offset:
            if not self.is_leader or self.leader_epoch != epoch:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PartitionError(ErrorCode.request_timed_out,
                                     "the ISR did not catch up with the sealed log in time")
            await self.wait_for_change(min(remaining, 0.1))

    async def _wait_committed(self, offset: int, timeout_s: float, min_isr: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        epoch = self.leader_epoch
        waiter = None
        while self.high_watermark < offset:
            if not self.is_leader or self.leader_epoch != epoch:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            remaining = deadline - loop.time()
            if remaining <= 0:
                if waiter is not None:  # ended by its timer: still in the heap
                    self._abandon_commit_waiter()
                raise PartitionError(ErrorCode.request_timed_out,
                                     "the ISR did not acknowledge the records in time")
            waiter = loop.create_future()
            heapq.heappush(self._commit_waiters, (offset, next(self._commit_order), waiter))
            timer = loop.call_later(remaining, _end_wait, waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                self._abandon_commit_waiter()
                raise
            finally:
                timer.cancel()
        if len(self.isr) < min_isr:
            raise PartitionError(ErrorCode.not_enough_replicas_after_append)

    def notify_waiters(self) -> None:
        """Everything waiting here looks again, the acks=all appends too: leadership, the
        ISR or the partition's place on this broker changed."""
        super().notify_waiters()
        self._release_commit_waiters(everyone=True)

    def _notify_progress(self) -> None:
        """New records or a higher high watermark: long polls look again, and of the acks=all
        appends those it commits."""
        super().notify_waiters()
        self._release_commit_waiters(everyone=False)

    def _release_commit_waiters(self, *, everyone: bool) -> None:
        waiters = self._commit_waiters
        if everyone:
            self._commit_waiters, self._abandoned_waiters = [], 0
            for _, _, waiter in waiters:
                _end_wait(waiter)
            return
        while waiters and waiters[0][0] <= self.high_watermark:
            _end_wait(heapq.heappop(waiters)[2])

    def _abandon_commit_waiter(self) -> None:
        """A waiter timed out or was cancelled (its connection closed) and may still be in the
        heap until the high watermark passes it: the heap is rebuilt without such waiters
        once they are half of it, so a stuck high watermark does not keep them all."""
        self._abandoned_waiters += 1
        if self._abandoned_waiters * 2 > len(self._commit_waiters):
            self._commit_waiters = [entry for entry in self._commit_waiters
                                    if not entry[2].done()]
            heapq.heapify(self._commit_waiters)
            self._abandoned_waiters = 0

    def read_replicas(self, image: MetadataImage) -> list[int]:
        return list(self.isr)

    def record_follower_fetch(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from ``fetch_offset``: it holds everything below it.

        A follower learns the high watermark only from fetch responses, and the fetch that
        moves it (the last ISR member's) would otherwise long-poll for new data with it:
        the follower would apply committed records up to replica fetch wait later (the
        batch coordinator's followers answered reads from state that old). So a fetch whose
        answer carries a high watermark the follower was not sent yet is answered at once
        (KIP-1166's idea, without its request field)."""
        state = self._followers.get(replica_id)
        if state is None:
            return False
        state.log_end_offset = fetch_offset
        if fetch_offset >= self.log.log_end_offset:
            state.caught_up_at = time.monotonic()
        else:  # behind, whatever appended what it lacks
            self.unsettled(self)
        if self._joins_isr(replica_id, fetch_offset):
            self._propose(self.isr + [replica_id])
        if fetch_offset > self._high_watermark:  # else it cannot be what holds it back
            self.maybe_advance_high_watermark()
        news = self._high_watermark > state.high_watermark_sent
        state.high_watermark_sent = self._high_watermark
        return news

    def maybe_advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        ends = [self.log.log_end_offset] + [
            self._followers[r].log_end_offset if r in self._followers else -1
            for r in self.isr if r != self.node_id]
        new_hw = max(min(ends), min(self.log.durable_end_offset(), self.log.log_end_offset))
        if new_hw > self._high_watermark:
            self._high_watermark = new_hw
            self.log.on_high_watermark_updated(new_hw)
            self._notify_progress()

    def maybe_shrink_isr(self, max_lag_s: float) -> None:
        if not self.is_leader:
            return
        now = time.monotonic()
        lagging = [r for r in self.isr if r != self.node_id and
                   now - self._caught_up_at(r) > max_lag_s]
        if lagging:
            self._propose([r for r in self.isr if r not in lagging])

    def isr_settled(self) -> bool:
        """Nothing for the periodic ISR check to do here as long as the follower brokers
        keep fetching (from any partition: see ``_caught_up_at``): not led here, or every
        replica in the ISR holding the whole log."""
        if not self.is_leader:
            return True
        end = self.log.log_end_offset
        return (set(self.isr) == set(self.replicas)
                and all(state.log_end_offset >= end for state in self._followers.values()))

    def maybe_expand_isr(self, max_lag_s: float) -> None:
        """Propose the caught-up followers for the ISR. A fetch that lists the partition
        does that too, but a partition idle in the follower's fetch session (KIP-227) is no
        longer listed once caught up, so a proposal that could not be sent then (another
        ISR change in flight) is made here, periodically."""
        if self.is_leader and (joiners := self._joiners(max_lag_s)):
            self._propose(self.isr + joiners)

    def isr_to_send(self, new_isr: list[int], max_lag_s: float) -> list[int]:
        """A proposed ISR as it is sent, maybe later than proposed: an expansion takes in
        every other follower that may join by then. After a restart the leader proposes
        each partition's first caught-up follower, and the second follower's proposal had
        to wait for that change: 20,000 ISR changes for 10,000 partitions RF=3, queued on
        one broker at the controller while it also served the clients."""
        if not set(self.isr) <= set(new_isr):
            return new_isr  # a shrink, as proposed
        return new_isr + [r for r in self._joiners(max_lag_s) if r not in new_isr]

    def _joiners(self, max_lag_s: float) -> list[int]:
        """The followers that may join the ISR: holding everything, and caught up within
        ``max_lag_s`` (one that stopped fetching still holds what it fetched, and was
        proposed again at every check after the one that removed it)."""
        now = time.monotonic()
        return [replica_id for replica_id, state in self._followers.items()
                if self._joins_isr(replica_id, state.log_end_offset)
                and now - self._caught_up_at(replica_id) <= max_lag_s]

    def _joins_isr(self, replica_id: int, log_end_offset: int) -> bool:
        """A follower out of the ISR holding everything, on an eligible broker: a fenced
        one's empty replica of an empty partition "holds everything" too, and its
        proposal was refused every round while it stayed fenced."""
        return (replica_id not in self.isr and log_end_offset >= self.high_watermark
                and log_end_offset >= self.log.log_end_offset and self.isr_eligible(replica_id))

    def _note_caught_up_followers(self) -> None:
        """Before the log end moves: a follower holding all of it was caught up as of its
        latest fetch (which an idle partition of its session was part of unlisted), not
        only as of the last fetch that listed this partition."""
        for replica_id, state in self._followers.items():
            if state.log_end_offset >= self.log.log_end_offset:
                state.caught_up_at = max(state.caught_up_at, self.last_fetch_by(replica_id))

    def _caught_up_at(self, replica_id: int) -> float:
        """When the follower last held everything this log holds. One that holds it now held
        it at its latest fetch of any partition: an idle partition of its fetch session
        (KIP-227) is fetched by every fetch without being listed."""
        state = self._followers.get(replica_id, FollowerState())
        if state.log_end_offset >= self.log.log_end_offset:
            return max(state.caught_up_at, self.last_fetch_by(replica_id))
        return state.caught_up_at

    def _propose(self, new_isr: list[int]) -> None:
        if self.propose_isr is None or (self._isr_change and not self._isr_change.done()):
            return
        self._isr_change = asyncio.ensure_future(self.propose_isr(self, new_isr))

    # --- follower -------------------------------------------------------------------------

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        new_hw = min(leader_high_watermark, self.log.log_end_offset)
        if new_hw != self._high_watermark:
            self._high_watermark = new_hw
            self.log.on_high_watermark_updated(new_hw)
            self._notify_progress()


async def wait_for_any_change(partitions: list[Watchable], timeout_s: float) -> None:
    """Sleep until any of ``partitions`` changes (new data, high watermark, leadership)
    or ``timeout_s`` passes."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()
    for partition in partitions:
        partition.add_waiter(waiter)
    # A timer ends the wait, not asyncio.wait_for: that wraps it in another future and a
    # callback, two more turns for each of the thousands of acks=all produce requests that
    # one follower fetch commits.
    timer = loop.call_later(timeout_s, _end_wait, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
        for partition in partitions:
            partition.remove_waiter(waiter)


def _end_wait(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
