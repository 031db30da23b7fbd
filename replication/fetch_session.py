"""Incremental fetch sessions (KIP-227), both ends.

A fetcher that follows thousands of partitions would otherwise list every one of them in
every Fetch, and the broker would read every one to answer. With a session the broker
remembers what the fetcher asked last time (``FetchSession``); a request then carries only
the partitions whose fetch position changed (and forgets those it no longer wants), and the
response only the partitions with something new: records, a moved high watermark, last
stable offset or log start offset, an error.

Kafka's broker still reads every partition of a session in every Fetch; kipper's keeps, per
session, the set of partitions that changed since it last answered (``Watchable`` tells it),
so an idle incremental fetch costs nothing per partition. ``FetchSessionCache`` holds the
broker's sessions, with Kafka's eviction; ``FetchSessionHandler`` is the fetcher's end (Kafka's
client class of that name), used by the follower fetcher.

Request fields, as KIP-227 defines them:

| session_id | session_epoch | meaning                                              |
|------------|---------------|------------------------------------------------------|
| 0          | -1            | a full fetch, no session                             |
| 0 or id    | 0             | a full fetch that creates a session (closing ``id``) |
| id         | -1            | close session ``id``; a full fetch, no session       |
| id         | n > 0         | an incremental fetch in session ``id``, ``n``-th     |
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .partition import Watchable

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# A session unused this long may be evicted for a new one whatever their kinds
# (Kafka's min.incremental.fetch.session.eviction.ms default).
EVICTION_IDLE_S = 120.0
_MAX_EPOCH = 2**31 - 1

PartitionKey = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1 after the largest (0 means a new session)."""
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


class FetchSessionError(Exception):
    """A request that names a session it cannot use (FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH)."""

    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: what the fetcher asked for last (under the request's field
    names, so a handler reads it as it reads a request's partition), and what it was last
    sent."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1
    sent_high_watermark: int | None = None
    sent_last_stable_offset: int | None = None
    sent_log_start_offset: int | None = None
    # The partition object watched for changes (it is replaced when a replica is recreated)
    # and what it calls.
    watched: Watchable | None = None
    listener: Callable[[], None] | None = None

    def ask(self, requested) -> None:
        """Take a request's new fetch position (a FetchPartition)."""
        self.fetch_offset = requested.fetch_offset
        self.partition_max_bytes = requested.partition_max_bytes
        self.current_leader_epoch = requested.current_leader_epoch
        self.log_start_offset = requested.log_start_offset
        self.last_fetched_epoch = requested.last_fetched_epoch

    def is_news(self, entry) -> bool:
        """Whether a response entry (PartitionData) tells the fetcher something it was not
        sent yet; if so, it is now."""
        news = (bool(entry.records) or entry.error_code != ErrorCode.none
                or entry.preferred_read_replica >= 0
                or entry.high_watermark != self.sent_high_watermark
                or entry.last_stable_offset != self.sent_last_stable_offset
                or entry.log_start_offset != self.sent_log_start_offset)
        self.sent_high_watermark = entry.high_watermark
        self.sent_last_stable_offset = entry.last_stable_offset
        self.sent_log_start_offset = entry.log_start_offset
        return news


@dataclass(eq=False)
class FetchSession:
    """The broker's memory of one fetcher's session."""

    session_id: int
    # A follower's session (Kafka's "privileged"): kept over consumers' when slots run out.
    privileged: bool
    epoch: int
    last_used: float
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)
    # Partitions that changed since they were last read for this session.
    changed: set[PartitionKey] = field(default_factory=set)
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def update(self, requested: Iterable[tuple[str, object]],
               forgotten: Iterable[PartitionKey]) -> None:
        """Take an incremental request's partitions (topic, FetchPartition) and forgotten ones."""
        for key in forgotten:
            self.forget(key)
        for topic, fetch in requested:
            key = (topic, fetch.partition)
            cached = self.partitions.get(key)
            if cached is None:
                cached = self.partitions[key] = CachedPartition(
                    fetch.partition, fetch.fetch_offset, fetch.partition_max_bytes)
            cached.ask(fetch)
            self.changed.add(key)

    def forget(self, key: PartitionKey) -> None:
        cached = self.partitions.pop(key, None)
        self.changed.discard(key)
        if cached is not None and cached.watched is not None:
            cached.watched.remove_listener(cached.listener)

    def close(self) -> None:
        for key in list(self.partitions):
            self.forget(key)

    def watch(self, key: PartitionKey, partition: Watchable | None) -> None:
        """Be told when ``partition`` (the object now serving ``key``) changes."""
        cached = self.partitions[key]
        if cached.watched is partition:
            return
        if cached.watched is not None:
            cached.watched.remove_listener(cached.listener)
        cached.watched = partition
        if partition is not None:
            if cached.listener is None:
                cached.listener = lambda: self._on_change(key)
            partition.add_listener(cached.listener)

    def _on_change(self, key: PartitionKey) -> None:
        self.changed.add(key)
        self._wakeup.set()

    def answered_here(self, key: PartitionKey) -> None:
        """``key`` changed while it was read for this session, by that read itself (a
        follower's acknowledgement that moved the high watermark), and that read's answer
        carries the change: no reason to read it again. Only for a key that was not
        changed before its read began."""
        self.changed.discard(key)
        if not self.changed:
            self._wakeup.clear()

    def take_changed(self) -> list[PartitionKey]:
        """The partitions to read now (then forgotten as changed until they change again)."""
        self._wakeup.clear()
        changed = [key for key in self.changed if key in self.partitions]
        self.changed.clear()
        return changed

    def still_pending(self, key: PartitionKey) -> None:
        """``key`` has data that was not sent (the response was full, or throttled): read
        it again next time, without waking a long poll for it."""
        self.changed.add(key)

    async def wait_for_change(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout_s)
        except TimeoutError:
            pass


class FetchSessionCache:
    """The broker's fetch sessions, at most ``slots`` (max.incremental.fetch.session.cache.slots).

    When full, a new session takes the slot of one unused for EVICTION_IDLE_S, or else of the
    least valuable one if it is worth more: a follower's over a consumer's, then the one with
    more partitions (Kafka's FetchSessionCache)."""

    def __init__(self, slots: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.slots = slots
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self._ids = itertools.count(1)
        self.evictions = 0
        # Fetch requests by kind: "none" (no session), "full", "incremental", or the session
        # error they were answered with.
        self.requests: Counter[str] = Counter()

    def get(self, session_id: int, epoch: int) -> FetchSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise FetchSessionError(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            raise FetchSessionError(ErrorCode.invalid_fetch_session_epoch)
        session.epoch = next_epoch(epoch)
        session.last_used = self.clock()
        return session

    def remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def create(self, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
               ) -> FetchSession | None:
        """A new session holding ``partitions``, or None if no slot could be had."""
        now = self.clock()
        if len(self.sessions) >= self.slots and not self._evict_for(privileged, len(partitions),
                                                                    now):
            return None
        session_id = next(self._ids)
        while session_id in self.sessions or session_id == INVALID_SESSION_ID:
            session_id = next(self._ids) if session_id < _MAX_EPOCH else 1
        session = FetchSession(session_id, privileged, next_epoch(INITIAL_EPOCH), now,
                               dict(partitions))
        self.sessions[session_id] = session
        return session

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        idle = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - idle.last_used >= EVICTION_IDLE_S:
            victim = idle
        else:
            victim = min(self.sessions.values(), key=lambda s: (s.privileged, len(s.partitions)))
            if (victim.privileged, len(victim.partitions)) >= (privileged, size):
                return False
        self.remove(victim.session_id)
        self.evictions += 1
        return True


@dataclass(frozen=True, slots=True)
class FetchPosition:
    """What a fetcher asks of one partition; a change of it is sent in the next request."""

    fetch_offset: int
    current_leader_epoch: int
    log_start_offset: int


@dataclass(frozen=True)
class FetchPlan:
    """One request of a session: its id and epoch, the partitions to list, those to forget."""

    session_id: int
    epoch: int
    to_send: dict[PartitionKey, FetchPosition]
    forgotten: list[PartitionKey]

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """The fetcher's end of a session (Kafka's client FetchSessionHandler): it lists a
    partition only when its position differs from what the session holds.

    It also remembers which partitions may have moved since the last request (``moved``:
    an answer appended to them, they were added or truncated), so an idle fetcher of
    thousands of partitions works out the positions of none of them. A position that moves
    unseen (retention raising a follower's log start) is caught by a sweep of every
    partition each ``SWEEP_INTERVAL_S``. A follower's log start is what only Kafka's low
    watermark across replicas (DeleteRecords) needs, which kipper's leader answers from its
    own log; with thousands of partitions a sweep every 10 s was a sixth of an idle
    follower's CPU, and every 30 s still a quarter of the idle active controller's."""

    SWEEP_INTERVAL_S = 300.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # The session's partitions as the broker holds them (None: to be listed again
        # whatever its position; still the session's, so forgetting it is still sent).
        self._held: dict[PartitionKey, FetchPosition | None] = {}
        self._moved: set[PartitionKey] = set()
        self._forgotten: set[PartitionKey] = set()
        self._clock = clock
        self._next_sweep = clock() + self.SWEEP_INTERVAL_S

    def moved(self, key: PartitionKey) -> None:
        """``key``'s position may have changed: work it out for the next request."""
        self._moved.add(key)
        self._forgotten.discard(key)

    def forget(self, key: PartitionKey) -> None:
        """The fetcher no longer follows ``key``: the next request tells the broker."""
        self._moved.discard(key)
        self._forgotten.add(key)

    def to_check(self, followed: Iterable[PartitionKey]) -> Iterable[PartitionKey]:
        """The partitions whose positions the next ``plan`` needs, out of all ``followed``:
        all of them for a full fetch or a sweep, otherwise those that may have moved."""
        now = self._clock()
        if self.session_id == INVALID_SESSION_ID or now >= self._next_sweep:
            self._next_sweep = now + self.SWEEP_INTERVAL_S
            return followed
        return self._moved

    def plan(self, wanted: dict[PartitionKey, FetchPosition]) -> FetchPlan:
        """The next request, from the positions of the partitions ``to_check`` named (with
        no session: of every followed partition)."""
        forgotten, self._forgotten = self._forgotten, set()
        self._moved = set()
        if self.session_id == INVALID_SESSION_ID:
            return FetchPlan(INVALID_SESSION_ID, INITIAL_EPOCH, dict(wanted), [])
        to_send = {key: position for key, position in wanted.items()
                   if self._held.get(key) != position}
        return FetchPlan(self.session_id, self.epoch, to_send,
                         [key for key in forgotten if key in self._held])

    def answered(self, plan: FetchPlan, error: ErrorCode, session_id: int) -> None:
        """The broker answered ``plan`` with a top-level ``error`` and ``session_id``."""
        if error != ErrorCode.none:
            self.reset()
            return
        if plan.is_full:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH)
            self._held = dict(plan.to_send) if session_id != INVALID_SESSION_ID else {}
            return
        self._held.update(plan.to_send)
        for key in plan.forgotten:
            self._held.pop(key, None)
        self.epoch = next_epoch(self.epoch)

    def resend(self, key: PartitionKey) -> None:
        """List ``key`` in the next request whatever its position (its last answer could
        not be used, or it was just added).

        A partition of the session stays in it: a partition whose leader answered an error
        (its topic just deleted there) and that this fetcher then stops following must be
        forgotten in the next request, or the leader kept reading it for the session and
        answered every fetch at once with its error, a busy loop between the two brokers."""
        if key in self._held:
            self._held[key] = None
        self.moved(key)

    def reset(self) -> None:
        """Start over with a full fetch (a session error, a lost connection)."""
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held = {}
