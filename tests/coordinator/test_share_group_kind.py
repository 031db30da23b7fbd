"""Share groups as one of the group coordinator's kinds (``coordinator.group.kind``): a group id
names one group of one kind across classic, consumer and share groups, ListGroups and
unloading go through the registry, and deleting an empty share group names the share
partitions whose state goes with it; the share coordinator then forgets that state for good.
Real clients are in tests/system/test_share_groups.py.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.classic import JoinRequest
from coordinator.group.consumer import HeartbeatRequest
from coordinator.group.offsets import OffsetCommit
from coordinator.group.rack_aware import SubscribedTopic
from coordinator.group.service import GroupCoordinator
from coordinator.group.timer import ManualTimer
from coordinator.group_config import GroupConfig, ShareGroupSettings
from coordinator.share.coordinator import AcquireRequest, ShareCoordinator, ShareCoordinatorSettings
from coordinator.share.membership import (
    LEAVE_EPOCH,
    Heartbeat,
    ShareGroupManager,
    ShareMembershipSettings,
)
from coordinator.share.records import SharePartitionKey
from coordinator.share.service import ShareGroups
from coordinator.share.share_partition import AcknowledgeType, AcknowledgementBatch, ShareLimits
from support.coordinators import MemoryCoordinatorLog


TOPICS = {name: SubscribedTopic(uuid.UUID(int=i + 1), name, (frozenset(), frozenset()))
          for i, name in enumerate(("t", "u"))}


class FixedTopics:
    def version(self):
        return 0

    def topic_names(self):
        return TOPICS.keys()

    def topic(self, name):
        return TOPICS.get(name)

    def topic_by_id(self, topic_id):
        return next((t for t in TOPICS.values() if t.topic_id == topic_id), None)


async def started(store: MemoryCoordinatorLog) -> ShareGroups:
    """A group coordinator with share groups over ``store``, done loading."""
    timer = ManualTimer()
    groups = GroupCoordinator(GroupConfig(), store, timer, FixedTopics())
    manager = ShareGroupManager(
        ShareMembershipSettings(max_size=10, group_settings=lambda group_id: ShareGroupSettings(
            "latest", 30_000, session_timeout_ms=45_000, heartbeat_interval_ms=5000)),
        timer, lambda topic: 2 if topic == "t" else None, lambda topic, partition: None,
        store.partition_for)
    share = ShareGroups(groups, manager)
    await groups.start()
    for _ in range(20):  # loading runs as a task of its own
        if not groups.loader.is_loading:
            break
        await asyncio.sleep(0)
    return share


@pytest.fixture
async def share_groups() -> ShareGroups:
    share = await started(MemoryCoordinatorLog())
    yield share
    await share.groups.stop()


async def share_join(share: ShareGroups, group_id: str, member_id: str):
    return await share.heartbeat(Heartbeat(group_id, member_id, 0, None, ("t",)))


def consumer_heartbeat(group_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=group_id, member_id="c", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=60_000, subscribed_topic_names=("t",), subscribed_topic_regex=None,
        server_assignor=None, owned=None, client_id="c", client_host="/127.0.0.1",
        client_chooses_member_id=True)


def classic_join(group_id: str) -> JoinRequest:
    return JoinRequest(group_id, "", None, "c", "/127.0.0.1", 10_000, 10_000, "consumer",
                       [("range", b"")], require_known_member_id=False)


async def test_a_group_id_names_one_group_of_one_kind(share_groups: ShareGroups):
    share, coordinator = share_groups, share_groups.groups
    assert (await share_join(share, "queue", "m1")).error == ErrorCode.none
    assert coordinator.kind_of("queue") is share.manager
    # Kafka's answers for the other protocols on a share group's id.
    assert (await coordinator.join_group(classic_join("queue"))).error \
        == ErrorCode.inconsistent_group_protocol
    assert (await coordinator.consumer_group_heartbeat(consumer_heartbeat("queue"))).error \
        == ErrorCode.group_id_not_found
    committed = await coordinator.commit_offsets("queue", -1, "", None,
                                                 {("t", 0): OffsetCommit(5, None, "")})
    assert committed == {("t", 0): ErrorCode.group_id_not_found}
    assert coordinator.describe_group("queue")[0] == ErrorCode.group_id_not_found
    # ... and the share protocol on a consumer group's id.
    assert (await coordinator.consumer_group_heartbeat(consumer_heartbeat("orders"))).error \
        == ErrorCode.none
    assert (await share_join(share, "orders", "m1")).error == ErrorCode.group_id_not_found
    error, listed = coordinator.list_groups()
    assert error == ErrorCode.none
    assert {(g.group_id, g.group_type) for g in listed} == {("queue", "share"),
                                                           ("orders", "consumer")}
    assert next(g for g in listed if g.group_id == "queue").state == "Stable"


async def test_deleting_a_share_group_names_its_state_and_waits_for_it_to_be_empty(
        share_groups: ShareGroups):
    share, coordinator = share_groups, share_groups.groups
    await share_join(share, "queue", "m1")
    assert share.deletable_state("queue") is None
    assert await coordinator.delete_groups(["queue"]) == {"queue": ErrorCode.non_empty_group}
    await share.heartbeat(Heartbeat("queue", "m1", LEAVE_EPOCH, None, None))
    # Partitions once assigned keep their state after the members are gone; so do those
    # given a start offset by AlterShareGroupOffsets.
    assert await share.start_offsets_set("queue", [("u", 3)]) is None
    assert share.deletable_state("queue") == [("t", 0), ("t", 1), ("u", 3)]
    assert await coordinator.delete_groups(["queue"]) == {"queue": ErrorCode.none}
    assert coordinator.kind_of("queue") is None
    assert coordinator.list_groups()[1] == []
    # The id is free for any kind now.
    assert (await coordinator.consumer_group_heartbeat(consumer_heartbeat("queue"))).error \
        == ErrorCode.none


async def test_an_empty_share_group_outlives_its_coordinator_until_deleted():
    """The share partitions a group has state for are in its record in __consumer_offsets:
    the next coordinator has the (empty) group, lists it, and deleting it names them."""
    store = MemoryCoordinatorLog()
    first = await started(store)
    await share_join(first, "queue", "m1")
    await first.start_offsets_set("queue", [("u", 1)])
    await first.groups.stop()  # the member's broker goes away: membership with it

    second = await started(store)
    assert [(g.group_id, g.group_type, g.state) for g in second.groups.list_groups()[1]] \
        == [("queue", "share", "Empty")]
    assert second.deletable_state("queue") == [("t", 0), ("t", 1), ("u", 1)]
    assert await second.groups.delete_groups(["queue"]) == {"queue": ErrorCode.none}
    await second.groups.stop()

    third = await started(store)
    assert third.groups.list_groups()[1] == []
    await third.groups.stop()


async def test_share_groups_leave_with_their_offsets_partition(share_groups: ShareGroups):
    share, coordinator = share_groups, share_groups.groups
    await share_join(share, "queue", "m1")
    partition = coordinator.store.partition_for("queue")
    coordinator.store.led.discard(partition)
    coordinator.on_metadata_change()
    assert not share.manager.owns("queue")
    assert coordinator.list_groups()[1] == []


async def test_deleted_state_is_gone_for_a_new_owner(clock):
    """DeleteGroups' first step (the owner's ``delete_state``): a new owner of the share
    partition has no state for it and starts again from ``share.auto.offset.reset``."""
    store = MemoryCoordinatorLog()
    settings = ShareCoordinatorSettings(
        ShareLimits(delivery_count_limit=3, max_record_locks=100),
        lambda group_id: ShareGroupSettings("latest", 1000, 45_000, 5000))
    key = SharePartitionKey("queue", uuid.UUID(int=7), 0)
    first = ShareCoordinator(settings, store, clock.timer)
    await first.start()
    await clock.sleep(10)
    await first.reset_start_offset(key, 0)
    acquired = await first.acquire(AcquireRequest(key, "a", 10, 0, 6))
    assert acquired.ranges and acquired.ranges[0].first_offset == 0
    assert await first.acknowledge(key, "a", [AcknowledgementBatch(
        0, 5, (AcknowledgeType.ACCEPT,))]) == ErrorCode.none
    assert first.start_offset(key) == 6
    assert await first.delete_state(key) == ErrorCode.none
    assert first.start_offset(key) is None
    await first.stop()

    second = ShareCoordinator(settings, store, clock.timer)
    await second.start()
    await clock.sleep(10)
    assert second.start_offset(key) is None
    # 'latest': starts at the high watermark, not where the deleted state was.
    assert (await second.acquire(AcquireRequest(key, "b", 10, 0, 9))).ranges == ()
    assert second.start_offset(key) == 9
    await second.stop()
