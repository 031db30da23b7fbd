"""Share groups' coordinator side (KIP-932) on virtual time: a share partition's acquisition
state (locks, delivery counts, the start offset), the share coordinator persisting it to an
in-memory ``__share_group_state`` and recovering it on a new owner, membership with member
epochs and session expiry, and the rack-aware assignor. Real clients against real brokers
are in tests/system/test_share_groups.py.
"""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group_config import ShareGroupSettings
from coordinator.share.assignor import MemberSubscription, assign
from coordinator.share.coordinator import (
    AcquireRequest,
    ShareCoordinator,
    ShareCoordinatorSettings,
)
from coordinator.share.membership import (
    Heartbeat,
    ShareGroupManager,
    ShareMembershipSettings,
)
from coordinator.share.records import SharePartitionKey, snapshot_from_bytes, snapshot_to_bytes
from coordinator.share.share_partition import (
    AcknowledgeType,
    AcknowledgementBatch,
    AcquiredRange,
    RecordState,
    SharePartition,
    ShareLimits,
)
from support.coordinators import MemoryCoordinatorLog

LOCK_MS = 1000
LIMITS = ShareLimits(delivery_count_limit=3, max_record_locks=100)
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
KEY = SharePartitionKey("g", uuid.UUID(int=7), 0)


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(types))


# --- a share partition ------------------------------------------------------------------------

def test_acquire_hands_each_record_to_one_member_at_a_time():
    partition = SharePartition(0, LIMITS)
    assert partition.acquire("a", 3, 0, 10, 0, LOCK_MS) == [AcquiredRange(0, 2, 1)]
    assert partition.acquire("b", 100, 0, 10, 0, LOCK_MS) == [AcquiredRange(3, 9, 1)]
    assert partition.acquire("c", 100, 0, 10, 0, LOCK_MS) == []


def test_release_and_lock_expiry_redeliver_with_a_higher_delivery_count():
    partition = SharePartition(0, LIMITS)
    partition.acquire("a", 4, 0, 4, 0, LOCK_MS)
    assert partition.acknowledge("a", [ack(0, 3, ACCEPT, RELEASE, ACCEPT, ACCEPT)]) == 0
    assert partition.start_offset == 1
    assert partition.acquire("b", 10, 0, 4, 0, LOCK_MS) == [AcquiredRange(1, 1, 2)]
    assert not partition.expire_locks(now_ms=LOCK_MS - 1)
    assert partition.expire_locks(now_ms=LOCK_MS)
    assert partition.acquire("c", 10, 0, 4, LOCK_MS, LOCK_MS) == [AcquiredRange(1, 1, 3)]
    assert partition.acknowledge("c", [ack(1, 1, ACCEPT)]) == 0
    assert partition.start_offset == partition.end_offset == 4


def test_rejected_and_over_limit_records_are_archived():
    partition = SharePartition(0, LIMITS)
    partition.acquire("a", 2, 0, 2, 0, LOCK_MS)
    partition.acknowledge("a", [ack(0, 0, REJECT)])
    for delivery in range(2, 4):  # offset 1 released until the limit of 3 deliveries
        partition.acknowledge("a", [ack(1, 1, RELEASE)])
        assert partition.acquire("a", 2, 0, 2, 0, LOCK_MS) == [AcquiredRange(1, 1, delivery)]
    partition.acknowledge("a", [ack(1, 1, RELEASE)])
    assert partition.acquire("a", 2, 0, 2, 0, LOCK_MS) == []
    assert partition.start_offset == 2


def test_acknowledging_records_not_held_is_invalid_record_state():
    partition = SharePartition(0, LIMITS)
    partition.acquire("a", 2, 0, 5, 0, LOCK_MS)
    assert partition.acknowledge("b", [ack(0, 0, ACCEPT)]) == ErrorCode.invalid_record_state
    assert partition.acknowledge("a", [ack(0, 2, ACCEPT)]) == ErrorCode.invalid_record_state
    assert partition.acknowledge("a", [ack(0, 1, 9)]) == ErrorCode.invalid_request
    # A range far past what is in flight is refused at once, not walked.
    assert partition.acknowledge("a", [ack(0, 2**62, ACCEPT)]) == ErrorCode.invalid_record_state
    # Nothing was applied: all or none.
    assert partition.state_of(0) == (RecordState.ACQUIRED, 1)
    assert partition.acknowledge("a", [ack(0, 1, ACCEPT)]) == ErrorCode.none
    assert partition.acknowledge("a", [ack(0, 0, ACCEPT)]) == ErrorCode.invalid_record_state


def test_in_flight_records_are_bounded_and_unsent_ones_given_back():
    partition = SharePartition(0, ShareLimits(5, max_record_locks=10))
    assert partition.acquire("a", 100, 0, 1000, 0, LOCK_MS) == [AcquiredRange(0, 9, 1)]
    partition.return_unsent("a", range(5, 10))
    assert partition.end_offset == 5
    assert partition.acquire("b", 100, 0, 1000, 0, LOCK_MS) == [AcquiredRange(5, 9, 1)]


def test_snapshot_round_trip_returns_acquired_records_to_available():
    partition = SharePartition(5, LIMITS)
    partition.acquire("a", 4, 0, 9, 0, LOCK_MS)
    partition.acknowledge("a", [ack(6, 6, ACCEPT)])
    snapshot = snapshot_from_bytes(snapshot_to_bytes(partition.snapshot()))
    restored = SharePartition.restore(snapshot, LIMITS)
    assert (restored.start_offset, restored.end_offset) == (5, 9)
    assert restored.state_of(5) == (RecordState.AVAILABLE, 1)
    assert restored.state_of(6) == (RecordState.ACKNOWLEDGED, 1)
    assert restored.acquire("b", 10, 0, 9, 0, LOCK_MS) == [
        AcquiredRange(5, 5, 2), AcquiredRange(7, 8, 2)]


# --- the share coordinator over __share_group_state ---------------------------------------------

def coordinator(store: MemoryCoordinatorLog, clock, reset: str = "earliest") -> ShareCoordinator:
    return ShareCoordinator(ShareCoordinatorSettings(
        LIMITS, lambda group_id: ShareGroupSettings(reset, LOCK_MS, 500, 100)), store, clock.timer)


async def test_acknowledged_state_survives_a_new_owner(clock):
    store = MemoryCoordinatorLog()
    first = coordinator(store, clock)
    await first.start()
    await clock.sleep(10)
    acquired = await first.acquire(AcquireRequest(KEY, "a", 10, 0, 6))
    assert acquired.ranges == (AcquiredRange(0, 5, 1),)
    assert await first.acknowledge(KEY, "a", [ack(0, 2, ACCEPT), ack(3, 3, RELEASE)]) == 0
    await first.stop()  # the owner goes away with offsets 3..5 delivered, 4..5 unanswered

    second = coordinator(store, clock)
    await second.start()
    await clock.sleep(10)
    assert second.start_offset(KEY) == 3
    again = await second.acquire(AcquireRequest(KEY, "b", 10, 0, 6))
    assert again.ranges == (AcquiredRange(3, 5, 2),)
    await second.stop()


async def test_lock_expiry_is_persisted_and_latest_starts_at_the_high_watermark(clock):
    store = MemoryCoordinatorLog()
    owner = coordinator(store, clock, reset="latest")
    await owner.start()
    await clock.sleep(10)
    assert (await owner.acquire(AcquireRequest(KEY, "a", 10, 0, 4))).ranges == ()
    assert (await owner.acquire(AcquireRequest(KEY, "a", 10, 0, 6))).ranges == (
        AcquiredRange(4, 5, 1),)
    await clock.sleep(LOCK_MS + 10)
    written = [r for r in store.logs[store.partition_for(KEY.coordinator_key())]]
    last = snapshot_from_bytes(written[-1].value)
    assert [(b.first_offset, b.last_offset, b.state, b.delivery_count) for b in last.batches] \
        == [(4, 5, RecordState.AVAILABLE, 1)]
    await owner.stop()


async def test_each_group_follows_its_own_group_configs(clock):
    """share.auto.offset.reset and share.record.lock.duration.ms are read per group (the
    group configs over the broker settings, coordinator.group_config.GroupConfigs)."""
    settings = {"early": ShareGroupSettings("earliest", 5 * LOCK_MS, 500, 100),
                "late": ShareGroupSettings("latest", LOCK_MS, 500, 100)}
    owner = ShareCoordinator(ShareCoordinatorSettings(LIMITS, settings.__getitem__),
                             MemoryCoordinatorLog(), clock.timer)
    await owner.start()
    await clock.sleep(10)
    early, late = (SharePartitionKey(group, KEY.topic_id, 0) for group in settings)
    assert (await owner.acquire(AcquireRequest(early, "a", 10, 2, 6))).ranges == (
        AcquiredRange(2, 5, 1),)
    assert (await owner.acquire(AcquireRequest(late, "a", 10, 2, 6))).ranges == ()
    assert (await owner.acquire(AcquireRequest(late, "a", 10, 2, 8))).ranges == (
        AcquiredRange(6, 7, 1),)
    await clock.sleep(LOCK_MS + 10)  # late's lock expired, early's holds
    assert (await owner.acquire(AcquireRequest(late, "b", 10, 2, 8))).ranges == (
        AcquiredRange(6, 7, 2),)
    assert (await owner.acquire(AcquireRequest(early, "b", 10, 2, 6))).ranges == ()
    await owner.stop()


async def test_a_broker_not_leading_the_state_partition_is_not_the_owner(clock):
    store = MemoryCoordinatorLog()
    store.led.discard(store.partition_for(KEY.coordinator_key()))
    owner = coordinator(store, clock)
    await owner.start()
    result = await owner.acquire(AcquireRequest(KEY, "a", 10, 0, 6))
    assert result.error == ErrorCode.not_coordinator
    await owner.stop()


# --- membership ---------------------------------------------------------------------------------

def group_settings(group_id: str) -> ShareGroupSettings:
    """Group "patient" has a longer share.session.timeout.ms set (a group config)."""
    return ShareGroupSettings("latest", LOCK_MS, 5000 if group_id == "patient" else 500, 100)


def manager(clock, partitions: int = 2) -> ShareGroupManager:
    return ShareGroupManager(ShareMembershipSettings(max_size=3, group_settings=group_settings),
                             clock.timer, lambda topic: partitions if topic == "t" else None,
                             lambda topic, partition: None, lambda group_id: 0)


def join(groups: ShareGroupManager, member: str, topics=("t",), group: str = "g"):
    return groups.heartbeat(Heartbeat(group, member, 0, None, tuple(topics)))


async def test_members_share_partitions_and_epochs_fence_stale_heartbeats(clock):
    groups = manager(clock)
    first = join(groups, "m1")
    assert first.error == 0 and first.assignment == {("t", 0), ("t", 1)}
    join(groups, "m2")
    join(groups, "m3")
    stale = groups.heartbeat(Heartbeat("g", "m1", first.member_epoch, None, None))
    assert stale.error == ErrorCode.fenced_member_epoch
    epoch = groups.groups["g"].members["m1"].member_epoch
    current = groups.heartbeat(Heartbeat("g", "m1", epoch, None, None))
    assert current.error == 0 and current.assignment is None  # unchanged: left out
    assigned = [m.assignment for m in groups.groups["g"].members.values()]
    assert all(len(a) == 1 for a in assigned)
    assert set().union(*assigned) == {("t", 0), ("t", 1)}
    assert join(groups, "m4").error == ErrorCode.group_max_size_reached
    unknown = groups.heartbeat(Heartbeat("g", "nobody", 3, None, None))
    assert unknown.error == ErrorCode.unknown_member_id


async def test_a_silent_member_is_removed_after_its_groups_session_timeout(clock):
    groups = manager(clock)
    join(groups, "m1")
    join(groups, "p1", group="patient")
    await clock.sleep(600)
    assert groups.groups["g"].members == {}
    assert list(groups.groups["patient"].members) == ["p1"]
    await clock.sleep(5000)
    assert groups.groups["patient"].members == {}


# --- the assignor ---------------------------------------------------------------------------------

def test_assignor_gives_every_member_a_partition_and_prefers_its_rack():
    members = {f"m{i}": MemberSubscription(f"az{i % 2}", frozenset({"t"})) for i in range(4)}
    result = assign(members, {"t": 2}, lambda topic, p: frozenset({f"az{p}"}))
    assert all(result[m] == {("t", int(members[m].rack[-1]))} for m in members)


def test_assignor_with_fewer_members_than_partitions_covers_them_all():
    members = {"a": MemberSubscription("az1", frozenset({"t"})),
               "b": MemberSubscription("az2", frozenset({"t"}))}
    result = assign(members, {"t": 5}, lambda topic, p: None)
    assert sorted(len(v) for v in result.values()) == [2, 3]
    assert result["a"] | result["b"] == {("t", p) for p in range(5)}


@pytest.mark.parametrize("members", [1, 3, 7])
def test_assignor_is_deterministic(members):
    subs = {f"m{i}": MemberSubscription(None, frozenset({"t"})) for i in range(members)}
    assert assign(subs, {"t": 4}, lambda t, p: frozenset()) == assign(
        subs, {"t": 4}, lambda t, p: frozenset())
