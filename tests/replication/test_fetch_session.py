"""Incremental fetch sessions (KIP-227): the broker's cache and sessions, the fetcher's handler."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from replication.fetch_session import (
    EVICTION_IDLE_S,
    CachedPartition,
    FetchPosition,
    FetchSessionCache,
    FetchSessionError,
    FetchSessionHandler,
    next_epoch,
)
from replication.partition import Watchable


def requested(offset: int, index: int = 0) -> SimpleNamespace:
    return SimpleNamespace(partition=index, fetch_offset=offset, partition_max_bytes=1024,
                           current_leader_epoch=3, log_start_offset=0, last_fetched_epoch=2)


def cached(index: int = 0) -> CachedPartition:
    return CachedPartition(index, 0, 1024)


def entry(hw: int, records: bytes = b"", error: ErrorCode = ErrorCode.none) -> SimpleNamespace:
    return SimpleNamespace(records=records, error_code=error, preferred_read_replica=-1,
                           high_watermark=hw, last_stable_offset=hw, log_start_offset=0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_epochs_run_from_one_and_wrap_past_the_largest():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1


def test_a_session_is_used_at_its_epoch_only():
    cache = FetchSessionCache(slots=2)
    session = cache.create(False, {("t", 0): cached()})
    assert session.epoch == 1
    with pytest.raises(FetchSessionError) as wrong_epoch:
        cache.get(session.session_id, 5)
    assert wrong_epoch.value.error_code == ErrorCode.invalid_fetch_session_epoch
    assert cache.get(session.session_id, 1) is session
    assert session.epoch == 2
    with pytest.raises(FetchSessionError) as unknown:
        cache.get(session.session_id + 100, 1)
    assert unknown.value.error_code == ErrorCode.fetch_session_id_not_found


def test_a_full_cache_evicts_an_idle_session_then_a_less_valuable_one():
    clock = Clock()
    cache = FetchSessionCache(slots=2, clock=clock)
    consumer = cache.create(False, {("t", 0): cached()})
    assert consumer is not None
    follower = cache.create(True, {("t", i): cached(i) for i in range(3)})
    # Full: another consumer with one partition is worth no more than the consumer there.
    assert cache.create(False, {("t", 1): cached(1)}) is None
    # A follower's session is worth more than a consumer's.
    newcomer = cache.create(True, {("t", 1): cached(1)})
    assert newcomer is not None
    assert set(cache.sessions) == {follower.session_id, newcomer.session_id}
    assert cache.evictions == 1
    # Unused for the eviction delay, even a follower's session gives way.
    clock.now += EVICTION_IDLE_S
    cache.get(newcomer.session_id, newcomer.epoch)
    assert cache.create(False, {}) is not None
    assert follower.session_id not in cache.sessions


def test_a_session_reads_only_what_changed_or_was_asked():
    cache = FetchSessionCache(slots=1)
    session = cache.create(False, {("t", 0): cached(0), ("t", 1): cached(1)})
    partitions = {0: Watchable(), 1: Watchable()}
    for index, partition in partitions.items():
        session.watch(("t", index), partition)
    assert session.take_changed() == []
    partitions[1].notify_waiters()
    assert session.take_changed() == [("t", 1)]
    session.update([("t", requested(7, index=0))], forgotten=[("t", 1)])
    assert session.take_changed() == [("t", 0)]
    assert session.partitions[("t", 0)].fetch_offset == 7
    partitions[1].notify_waiters()  # forgotten: no longer watched
    assert session.take_changed() == []
    assert not partitions[1]._listeners
    cache.remove(session.session_id)
    assert not partitions[0]._listeners


async def test_a_long_poll_wakes_for_a_change_not_for_data_left_unsent():
    session = FetchSessionCache(slots=1).create(False, {("t", 0): cached()})
    partition = Watchable()
    session.watch(("t", 0), partition)
    session.still_pending(("t", 0))
    await session.wait_for_change(0.01)  # times out: nothing changed
    assert session.take_changed() == [("t", 0)]
    partition.notify_waiters()
    await session.wait_for_change(5)  # returns at once
    assert session.take_changed() == [("t", 0)]


async def test_a_change_made_by_a_partitions_own_read_is_not_news_for_the_next_one():
    """A follower's acknowledgement moves the high watermark while its fetch reads the
    partition; that read's answer carries it, so the session need not read it again."""
    session = FetchSessionCache(slots=1).create(True, {("t", 0): cached(), ("t", 1): cached(1)})
    partitions = {0: Watchable(), 1: Watchable()}
    for index, partition in partitions.items():
        session.watch(("t", index), partition)
    partitions[0].notify_waiters()  # by the read of ("t", 0) itself
    session.answered_here(("t", 0))
    assert session.take_changed() == []
    started = time.monotonic()
    await session.wait_for_change(0.05)  # not woken: no news
    assert time.monotonic() - started >= 0.05
    partitions[0].notify_waiters()
    partitions[1].notify_waiters()
    session.answered_here(("t", 0))
    assert session.take_changed() == [("t", 1)]


def test_an_answer_is_news_when_something_moved():
    partition = cached()
    assert partition.is_news(entry(hw=5))
    assert not partition.is_news(entry(hw=5))
    assert partition.is_news(entry(hw=5, records=b"x"))
    assert partition.is_news(entry(hw=5, error=ErrorCode.not_leader_or_follower))
    assert partition.is_news(entry(hw=6))


def test_the_fetcher_lists_only_moved_partitions_and_forgets_removed_ones():
    handler = FetchSessionHandler()
    wanted = {("t", 0): FetchPosition(10, 1, 0), ("t", 1): FetchPosition(20, 1, 0)}
    full = handler.plan(wanted)
    assert (full.session_id, full.epoch, full.is_full) == (0, 0, True)
    assert full.to_send == wanted
    handler.answered(full, ErrorCode.none, session_id=9)
    idle = handler.plan(wanted)
    assert (idle.session_id, idle.epoch, idle.to_send, idle.forgotten) == (9, 1, {}, [])
    handler.answered(idle, ErrorCode.none, session_id=9)
    handler.moved(("t", 0))
    handler.forget(("t", 1))
    assert handler.to_check(wanted) == {("t", 0)}
    moved = handler.plan({("t", 0): FetchPosition(11, 1, 0)})
    assert moved.to_send == {("t", 0): FetchPosition(11, 1, 0)}
    assert moved.forgotten == [("t", 1)]
    assert moved.epoch == 2
    handler.answered(moved, ErrorCode.none, session_id=9)
    handler.resend(("t", 0))
    assert handler.plan({("t", 0): FetchPosition(11, 1, 0)}).to_send == {
        ("t", 0): FetchPosition(11, 1, 0)}


def test_a_partition_listed_again_after_an_error_is_still_forgotten_when_no_longer_followed():
    """A deleted topic's partition: its leader answered an error (so the fetcher lists it
    again), then the fetcher stops following it. Unless forgotten, the leader's session
    kept it and answered every fetch at once with its error."""
    handler = FetchSessionHandler()
    wanted = {("t", 0): FetchPosition(10, 1, 0), ("t", 1): FetchPosition(20, 1, 0)}
    handler.answered(handler.plan(wanted), ErrorCode.none, session_id=9)
    handler.resend(("t", 1))
    listed = handler.plan(wanted)
    assert listed.to_send == {("t", 1): FetchPosition(20, 1, 0)}
    handler.answered(listed, ErrorCode.none, session_id=9)
    handler.resend(("t", 1))  # its answer was an error again
    handler.forget(("t", 1))
    forgetting = handler.plan({("t", 0): FetchPosition(10, 1, 0)})
    assert (forgetting.to_send, forgetting.forgotten) == ({}, [("t", 1)])
    handler.answered(forgetting, ErrorCode.none, session_id=9)
    assert handler.plan({("t", 0): FetchPosition(10, 1, 0)}).forgotten == []


def test_the_fetcher_checks_every_position_in_a_periodic_sweep():
    now = [0.0]
    handler = FetchSessionHandler(clock=lambda: now[0])
    followed = {("t", 0): FetchPosition(10, 1, 0), ("t", 1): FetchPosition(20, 1, 0)}
    handler.answered(handler.plan(followed), ErrorCode.none, session_id=3)
    assert set(handler.to_check(followed)) == set()
    now[0] += FetchSessionHandler.SWEEP_INTERVAL_S
    assert set(handler.to_check(followed)) == set(followed)  # e.g. a log start moved by retention
    assert set(handler.to_check(followed)) == set()


def test_the_fetcher_starts_over_after_a_session_error_or_without_a_session():
    handler = FetchSessionHandler()
    wanted = {("t", 0): FetchPosition(10, 1, 0)}
    handler.answered(handler.plan(wanted), ErrorCode.none, session_id=4)
    handler.answered(handler.plan(wanted), ErrorCode.fetch_session_id_not_found, session_id=0)
    assert handler.plan(wanted).is_full
    # A broker without a free slot answers session id 0: every fetch stays full.
    handler.answered(handler.plan(wanted), ErrorCode.none, session_id=0)
    assert handler.plan(wanted).to_send == wanted
