"""KIP-848 consumer groups in the coordinator: the assignors, reconciliation (revoke before
assign), sessions, records replayed after a restart, and groups changing protocol.

Driven over an in-memory ``CoordinatorLog`` with a ``ManualTimer`` that moves only when told,
and a fixed set of topics; real clients are in tests/system/test_consumer_protocol.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.assignors import GroupSpec, MemberSubscription, RangeAssignor, \
    UniformAssignor
from coordinator.group.classic import JoinRequest
from coordinator.group.consumer import HeartbeatRequest
from coordinator.group.offsets import OffsetCommit
from coordinator.group.rack_aware import SubscribedTopic
from coordinator.group.service import GroupCoordinator
from coordinator.group.timer import ManualTimer
from coordinator.group_config import ConsumerGroupSettings, GroupConfig
from support.coordinators import MemoryCoordinatorLog

CONFIG = GroupConfig(consumer_session_timeout_ms=45_000)
TOPIC = SubscribedTopic(uuid.UUID(int=1), "orders", tuple(
    frozenset({f"az{p % 3 + 1}"}) for p in range(6)))


class FixedTopics:
    def __init__(self, *topics: SubscribedTopic) -> None:
        self.by_name = {t.name: t for t in topics}
        self.changes = 0

    def add(self, topic: SubscribedTopic) -> None:
        self.by_name[topic.name] = topic
        self.changes += 1

    def version(self):
        return self.changes

    def topic_names(self):
        return self.by_name.keys()

    def topic(self, name):
        return self.by_name.get(name)

    def topic_by_id(self, topic_id):
        return next((t for t in self.by_name.values() if t.topic_id == topic_id), None)


@pytest.fixture
def timer():
    return ManualTimer()


@pytest.fixture
def store():
    return MemoryCoordinatorLog()


async def started(store, timer, consumer_group_settings=None) -> GroupCoordinator:
    coordinator = GroupCoordinator(CONFIG, store, timer, FixedTopics(TOPIC),
                                   consumer_group_settings)
    await coordinator.start()
    for _ in range(20):  # loading runs as a task of its own
        if not coordinator.loader.is_loading:
            break
        await asyncio.sleep(0)
    return coordinator


@pytest.fixture
async def coordinator(store, timer):
    coordinator = await started(store, timer)
    yield coordinator
    await coordinator.stop()


def heartbeat(member_id: str, epoch: int, owned=None, *, group="g", instance_id=None,
              rack=None, assignor=None, names=("orders",)) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
        rack_id=rack, rebalance_timeout_ms=60_000, subscribed_topic_names=names,
        subscribed_topic_regex=None, server_assignor=assignor,
        owned=None if owned is None else frozenset((TOPIC.topic_id, p) for p in owned),
        client_id="client", client_host="/127.0.0.1", client_chooses_member_id=True)


def partitions(result) -> set[int]:
    return set(result.assignment.get(TOPIC.topic_id, ())) if result.assignment is not None \
        else set()


def spec(*members: tuple[str, str | None, dict]) -> GroupSpec:
    return GroupSpec({m: MemberSubscription(rack, frozenset({TOPIC.topic_id}), current)
                      for m, rack, current in members}, {TOPIC.topic_id: TOPIC})


def test_uniform_is_balanced_sticky_and_rack_aware():
    three = UniformAssignor().assign(spec(("a", None, {}), ("b", None, {}), ("c", None, {})))
    assert sorted(len(a[TOPIC.topic_id]) for a in three.values()) == [2, 2, 2]
    # A fourth member takes partitions from the others; nobody loses more than needed.
    four = UniformAssignor().assign(spec(*[(m, None, three[m]) for m in "abc"], ("d", None, {})))
    assert sorted(len(a.get(TOPIC.topic_id, ())) for a in four.values()) == [1, 1, 2, 2]
    assert all(four[m][TOPIC.topic_id] <= three[m][TOPIC.topic_id] for m in "abc")
    # With racks, each member reads only partitions with a replica in its AZ.
    racked = UniformAssignor().assign(spec(("a", "az1", {}), ("b", "az2", {}), ("c", "az3", {})))
    for member, rack in (("a", "az1"), ("b", "az2"), ("c", "az3")):
        assert all(TOPIC.partition_racks[p] == {rack} for p in racked[member][TOPIC.topic_id])


def test_range_gives_consecutive_ranges_or_local_partitions():
    ranged = RangeAssignor().assign(spec(("a", None, {}), ("b", None, {}), ("c", None, {})))
    assert [sorted(ranged[m][TOPIC.topic_id]) for m in "abc"] == [[0, 1], [2, 3], [4, 5]]
    racked = RangeAssignor().assign(spec(("a", "az1", {}), ("b", "az2", {}), ("c", "az3", {})))
    for member, rack in (("a", "az1"), ("b", "az2"), ("c", "az3")):
        assert all(TOPIC.partition_racks[p] == {rack} for p in racked[member][TOPIC.topic_id])


async def test_partitions_are_revoked_before_they_are_assigned(coordinator):
    a = await coordinator.consumer_group_heartbeat(heartbeat("a", 0))
    assert a.error == ErrorCode.none and partitions(a) == set(range(6))
    b = await coordinator.consumer_group_heartbeat(heartbeat("b", 0))
    # b has the new epoch but nothing yet: a still holds everything.
    assert b.member_epoch == a.member_epoch + 1 and partitions(b) == set()
    a2 = await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch, range(6)))
    kept = partitions(a2)
    assert len(kept) == 3 and a2.member_epoch == a.member_epoch  # revoke first, same epoch
    b2 = await coordinator.consumer_group_heartbeat(heartbeat("b", b.member_epoch, []))
    assert partitions(b2) == set()  # a has not acknowledged the revocation yet
    # While it waits it is asked to come back sooner than a stable member.
    assert b2.heartbeat_interval_ms == CONFIG.consumer_reconciling_heartbeat_interval_ms
    assert a.heartbeat_interval_ms == CONFIG.consumer_heartbeat_interval_ms
    a3 = await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch, kept))
    assert a3.member_epoch == b.member_epoch and a3.assignment is not None
    b3 = await coordinator.consumer_group_heartbeat(heartbeat("b", b.member_epoch, []))
    assert partitions(b3) == set(range(6)) - kept
    group = coordinator.consumer.groups["g"]
    assert group.state.value == "Stable"


async def test_session_timeout_fences_and_reassigns(coordinator, timer):
    a = await coordinator.consumer_group_heartbeat(heartbeat("a", 0))
    b = await coordinator.consumer_group_heartbeat(heartbeat("b", 0))
    await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch, range(6)))
    timer.advance(30_000)
    await coordinator.consumer_group_heartbeat(heartbeat("b", b.member_epoch, []))
    timer.advance(30_000)  # a's session (45 s) ends; b heartbeated 30 s ago
    group = coordinator.consumer.groups["g"]
    assert set(group.members) == {"b"}
    b2 = await coordinator.consumer_group_heartbeat(heartbeat("b", b.member_epoch, []))
    assert partitions(b2) == set(range(6))
    stale = await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch))
    assert stale.error == ErrorCode.unknown_member_id


async def test_a_group_follows_its_own_session_timeout_and_heartbeat_interval(store, timer):
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms set on group "quick"
    (group configs); "g" follows the broker's."""
    quick = ConsumerGroupSettings(session_timeout_ms=10_000, heartbeat_interval_ms=300)
    coordinator = await started(store, timer, lambda group_id: quick if group_id == "quick"
                                else CONFIG.consumer_group_defaults())
    try:
        joined = await coordinator.consumer_group_heartbeat(heartbeat("a", 0, group="quick"))
        assert joined.heartbeat_interval_ms == 300
        await coordinator.consumer_group_heartbeat(heartbeat("b", 0))
        timer.advance(10_001)
        assert "a" not in coordinator.consumer.groups["quick"].members
        assert set(coordinator.consumer.groups["g"].members) == {"b"}
    finally:
        await coordinator.stop()


async def test_group_and_offsets_survive_a_new_coordinator(coordinator, store, timer):
    a = await coordinator.consumer_group_heartbeat(heartbeat("a", 0, rack="az1"))
    assert await coordinator.commit_offsets("g", a.member_epoch, "a", None, {
        ("orders", 0): OffsetCommit(42, -1, "")}) == {("orders", 0): ErrorCode.none}
    assert await coordinator.commit_offsets("g", a.member_epoch - 1, "a", None, {
        ("orders", 0): OffsetCommit(1, -1, "")}) == {("orders", 0): ErrorCode.stale_member_epoch}
    await coordinator.stop()
    reloaded = await started(store, timer)
    group = reloaded.consumer.groups["g"]
    assert group.members["a"].member_epoch == a.member_epoch
    assert group.members["a"].info.rack_id == "az1"
    again = await reloaded.consumer_group_heartbeat(heartbeat("a", a.member_epoch, range(6)))
    assert again.error == ErrorCode.none and again.member_epoch == a.member_epoch
    assert reloaded.fetch_offsets("g", [("orders", 0)])[1][("orders", 0)].offset == 42
    await reloaded.stop()


async def test_groups_change_protocol_only_when_empty(coordinator):
    # An empty classic group (offsets only) becomes a consumer group and keeps its offsets.
    assert await coordinator.commit_offsets("g", -1, "", None, {
        ("orders", 1): OffsetCommit(7, -1, "")}) == {("orders", 1): ErrorCode.none}
    a = await coordinator.consumer_group_heartbeat(heartbeat("a", 0))
    assert a.error == ErrorCode.none
    assert coordinator.fetch_offsets("g", None)[1][("orders", 1)].offset == 7
    listed = {g.group_id: g for g in coordinator.list_groups()[1]}
    assert listed["g"].group_type == "consumer"
    join = JoinRequest("g", "", None, "c", "/h", 10_000, 10_000, "consumer",
                       [("range", b"")], True)
    assert (await coordinator.join_group(join)).error == ErrorCode.inconsistent_group_protocol
    assert (await coordinator.delete_groups(["g"]))["g"] == ErrorCode.non_empty_group
    await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch, range(6)))
    left = await coordinator.consumer_group_heartbeat(heartbeat("a", -1))
    assert left.member_epoch == -1
    # Empty again: a classic member turns it back into a classic group.
    assert (await coordinator.join_group(join)).error == ErrorCode.member_id_required
    assert coordinator.kind_of("g") is coordinator.classic
    assert coordinator.fetch_offsets("g", None)[1][("orders", 1)].offset == 7


async def test_a_regex_takes_in_topics_created_later(store, timer):
    topics = FixedTopics(TOPIC)
    coordinator = GroupCoordinator(CONFIG, store, timer, topics)
    await coordinator.start()
    await asyncio.sleep(0)
    request = HeartbeatRequest(
        group_id="g", member_id="a", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=60_000, subscribed_topic_names=None,
        subscribed_topic_regex="ord.*", server_assignor="range", owned=None,
        client_id="c", client_host="/h", client_chooses_member_id=True)
    a = await coordinator.consumer_group_heartbeat(request)
    assert partitions(a) == set(range(6))
    later = SubscribedTopic(uuid.UUID(int=2), "ordinals", (frozenset(),) * 2)
    topics.add(later)
    topics.add(SubscribedTopic(uuid.UUID(int=3), "unrelated", (frozenset(),)))
    again = await coordinator.consumer_group_heartbeat(dataclasses.replace(
        request, member_epoch=a.member_epoch,
        owned=frozenset((TOPIC.topic_id, p) for p in range(6))))
    assert again.member_epoch == a.member_epoch + 1
    assert set(again.assignment) == {TOPIC.topic_id, later.topic_id}
    await coordinator.stop()


async def test_a_member_that_does_not_revoke_in_time_is_fenced(coordinator, timer):
    a = await coordinator.consumer_group_heartbeat(heartbeat("a", 0))
    await coordinator.consumer_group_heartbeat(heartbeat("b", 0))
    revoking = await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch,
                                                                     range(6)))
    assert len(partitions(revoking)) == 3
    timer.advance(40_000)
    # Both keep their sessions; a still owns what it must give up.
    await coordinator.consumer_group_heartbeat(heartbeat("a", a.member_epoch, range(6)))
    b = await coordinator.consumer_group_heartbeat(heartbeat("b", a.member_epoch + 1, []))
    assert partitions(b) == set()
    timer.advance(21_000)  # past a's 60 s rebalance timeout
    assert set(coordinator.consumer.groups["g"].members) == {"b"}
    b = await coordinator.consumer_group_heartbeat(heartbeat("b", b.member_epoch, []))
    assert partitions(b) == set(range(6))
