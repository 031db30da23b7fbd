"""The controller's replica management: manual assignment, reassignment (KIP-455),
ElectLeaders (KIP-460) and preferred-leader rebalancing, with Kafka's error codes."""

from __future__ import annotations

import pytest
from support.coordinators import controller_with_brokers
from kio.schema.errors import ErrorCode

from coordinator.controller import (
    Controller,
    ControllerError,
    ControllerSettings,
    Election,
    IsrChange,
)
from replication.cluster_metadata import NO_LEADER


@pytest.fixture
async def controller(tmp_path):
    """A controller with four ready brokers, 0..3."""
    controller = await controller_with_brokers(
        tmp_path, 4, ControllerSettings(auto_leader_rebalance=False))
    yield controller
    await controller.stop()


def partition(controller: Controller, topic: str, index: int = 0):
    return controller.image.topics[topic].partitions[index]


async def fence(controller: Controller, node: int) -> None:
    await controller.heartbeat(node, controller.image.brokers[node].epoch, want_fence=False,
                               want_shut_down=True)


async def unfence(controller: Controller, node: int) -> None:
    epoch = await controller.register_broker(node, "127.0.0.1", 9092 + node, None)
    await controller.heartbeat(node, epoch, want_fence=False, want_shut_down=False)


async def test_manual_assignment_is_honoured_at_creation_and_when_adding_partitions(controller):
    await controller.create_topic("t", -1, -1, {}, assignments=[(1, [3, 2]), (0, [1, 0])])
    assert partition(controller, "t", 0).replicas == [1, 0]
    assert partition(controller, "t", 0).leader == 1
    assert partition(controller, "t", 1).replicas == [3, 2]
    await controller.create_partitions("t", 3, assignments=[[2, 0]])
    assert partition(controller, "t", 2).replicas == [2, 0]
    assert partition(controller, "t", 2).leader == 2


async def test_a_fenced_broker_may_be_named_but_does_not_lead(controller):
    await fence(controller, 1)
    await controller.create_topic("t", -1, -1, {}, assignments=[(0, [1, 2])])
    assert (partition(controller, "t").leader, partition(controller, "t").isr) == (2, [2])


@pytest.mark.parametrize("num_partitions, replication_factor, assignments, error", [
    (1, -1, [(0, [0])], ErrorCode.invalid_request),
    (-1, 1, [(0, [0])], ErrorCode.invalid_request),
    (-1, -1, [(0, [])], ErrorCode.invalid_replica_assignment),
    (-1, -1, [(0, [0, 9])], ErrorCode.invalid_replica_assignment),
    (-1, -1, [(0, [1, 1])], ErrorCode.invalid_replica_assignment),
    (-1, -1, [(0, [0, 1]), (1, [2])], ErrorCode.invalid_replica_assignment),
    (-1, -1, [(0, [0]), (0, [1])], ErrorCode.invalid_replica_assignment),
    (-1, -1, [(0, [0]), (2, [1])], ErrorCode.invalid_replica_assignment),
])
async def test_bad_manual_assignments_are_refused(controller, num_partitions, replication_factor,
                                                 assignments, error):
    with pytest.raises(ControllerError) as refused:
        await controller.create_topic("t", num_partitions, replication_factor, {},
                                      assignments=assignments)
    assert refused.value.error_code == error
    assert "t" not in controller.image.topics


@pytest.mark.parametrize("assignments", [[], [[0, 1], [1, 2]], [[0]], [[0, 7]], [[3, 3]]])
async def test_bad_assignments_of_new_partitions_are_refused(controller, assignments):
    await controller.create_topic("t", 1, 2, {})
    with pytest.raises(ControllerError) as refused:
        await controller.create_partitions("t", 2, assignments=assignments)
    assert refused.value.error_code == ErrorCode.invalid_replica_assignment
    assert len(controller.image.topics["t"].partitions) == 1


async def test_a_reassignment_completes_once_the_new_replicas_are_in_sync(controller):
    await controller.create_topic("t", -1, -1, {}, assignments=[(0, [0, 1, 2])])
    await controller.alter_partition_reassignment("t", 0, [1, 2, 3])
    moving = partition(controller, "t")
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == \
        ([1, 2, 3, 0], [3], [0])
    assert controller.ongoing_reassignments(None) == [moving]
    assert controller.ongoing_reassignments([("t", [1]), ("unknown", [0])]) == []

    # The leader (0, being removed) adds 3 to the ISR: the partition becomes the target
    # and leadership moves to its first replica.
    error, _ = await controller.alter_partition(0, controller.image.topics["t"].topic_id, 0,
                                                   moving.leader_epoch, [0, 1, 2, 3],
                                                   moving.partition_epoch)
    assert error == ErrorCode.none
    done = partition(controller, "t")
    assert (done.replicas, done.isr, done.leader) == ([1, 2, 3], [1, 2, 3], 1)
    assert done.leader_epoch == moving.leader_epoch + 1
    assert (done.adding_replicas, done.removing_replicas) == ([], [])
    assert controller.ongoing_reassignments(None) == []


async def test_a_reassignment_within_the_isr_completes_at_once(controller):
    await controller.create_topic("t", -1, -1, {}, assignments=[(0, [0, 1, 2])])
    await controller.alter_partition_reassignment("t", 0, [2, 1])
    done = partition(controller, "t")
    assert (done.replicas, done.isr, done.leader) == ([2, 1], [1, 2], 2)


async def test_cancelling_a_reassignment_reverts_it(controller):
    await controller.create_topic("t", -1, -1, {}, assignments=[(0, [0, 1])])
    await controller.alter_partition_reassignment("t", 0, [2, 3])
    assert partition(controller, "t").replicas == [2, 3, 0, 1]
    await controller.alter_partition_reassignment("t", 0, None)
    reverted = partition(controller, "t")
    assert (reverted.replicas, reverted.isr, reverted.leader) == ([0, 1], [0, 1], 0)
    assert (reverted.adding_replicas, reverted.removing_replicas) == ([], [])


async def test_a_diskless_reassignment_only_changes_metadata(controller):
    await controller.create_topic("d", -1, -1, {"kipper.storage.mode": "diskless"},
                                  assignments=[(0, [0, 1, 2])])
    await controller.alter_partition_reassignment("d", 0, [1, 2, 3])
    done = partition(controller, "d")
    assert (done.replicas, done.isr, done.leader, done.adding_replicas) == \
        ([1, 2, 3], [1, 2, 3], 1, [])


@pytest.mark.parametrize("topic, index, target, error", [
    ("t", 0, None, ErrorCode.no_reassignment_in_progress),
    ("t", 5, [0], ErrorCode.unknown_topic_or_partition),
    ("unknown", 0, [0], ErrorCode.unknown_topic_or_partition),
    ("t", 0, [], ErrorCode.invalid_replica_assignment),
    ("t", 0, [0, 0], ErrorCode.invalid_replica_assignment),
    ("t", 0, [0, 8], ErrorCode.invalid_replica_assignment),
])
async def test_bad_reassignments_are_refused(controller, topic, index, target, error):
    await controller.create_topic("t", 1, 2, {})
    before = partition(controller, "t")
    with pytest.raises(ControllerError) as refused:
        await controller.alter_partition_reassignment(topic, index, target)
    assert refused.value.error_code == error
    assert partition(controller, "t") == before


async def test_preferred_and_unclean_elections(controller):
    await controller.create_topic("t", -1, -1, {}, assignments=[(0, [0, 1]), (1, [2, 3])])
    await fence(controller, 0)
    assert partition(controller, "t", 0).leader == 1

    def outcome(results):
        return {(r.topic, r.partition): r.error for r in results}

    assert outcome(await controller.elect_leaders(Election.PREFERRED, [("t", 0), ("t", 1),
                                                                     ("t", 9)])) == {
        ("t", 0): ErrorCode.preferred_leader_not_available,
        ("t", 1): ErrorCode.election_not_needed,
        ("t", 9): ErrorCode.unknown_topic_or_partition}
    await unfence(controller, 0)
    # Back but out of sync: still not available until it rejoins the ISR.
    assert outcome(await controller.elect_leaders(Election.PREFERRED, None)) == {
        ("t", 0): ErrorCode.preferred_leader_not_available}
    info = partition(controller, "t", 0)
    await controller.alter_partition(1, controller.image.topics["t"].topic_id, 0,
                                     info.leader_epoch, [1, 0], info.partition_epoch)
    assert outcome(await controller.elect_leaders(Election.PREFERRED, None)) == {
        ("t", 0): ErrorCode.none}
    assert partition(controller, "t", 0).leader == 0
    # Everything is led by its preferred replica: nothing is reported for "all".
    assert await controller.elect_leaders(Election.PREFERRED, None) == []

    assert outcome(await controller.elect_leaders(Election.UNCLEAN, [("t", 1)])) == {
        ("t", 1): ErrorCode.election_not_needed}
    await fence(controller, 2)  # partition 1: ISR [3], leader 3
    await fence(controller, 3)  # no leader, ISR [3]
    assert partition(controller, "t", 1).leader == NO_LEADER
    assert outcome(await controller.elect_leaders(Election.UNCLEAN, [("t", 1)])) == {
        ("t", 1): ErrorCode.eligible_leaders_not_available}
    await unfence(controller, 2)  # out of sync, unclean election off: stays leaderless
    assert partition(controller, "t", 1).leader == NO_LEADER
    assert outcome(await controller.elect_leaders(Election.UNCLEAN, [("t", 1)])) == {
        ("t", 1): ErrorCode.none}
    assert (partition(controller, "t", 1).leader, partition(controller, "t", 1).isr) == (2, [2])


async def test_leaders_move_back_to_preferred_replicas_past_the_imbalance_threshold(controller):
    controller.settings.leader_imbalance_per_broker_percentage = 40
    await controller.create_topic("t", -1, -1, {}, assignments=[
        (p, [p % 2, 1 - p % 2]) for p in range(6)])  # broker 0 prefers 0, 2, 4
    await fence(controller, 0)
    await unfence(controller, 0)
    for p in (0, 2):  # two of three back in sync: 1/3 led elsewhere would be under 40 %
        info = partition(controller, "t", p)
        await controller.alter_partition(1, controller.image.topics["t"].topic_id, p,
                                         info.leader_epoch, [1, 0], info.partition_epoch)
    assert controller.imbalanced_partitions() == [("t", 0), ("t", 2)]  # 3/3 led by 1
    await controller.balance_leaders()
    assert [partition(controller, "t", p).leader for p in range(6)] == [0, 1, 0, 1, 1, 1]
    # Now 1/3 of broker 0's partitions is led elsewhere: under the threshold.
    assert controller.imbalanced_partitions() == []


async def test_elections_over_many_partitions_commit_in_batches(controller, monkeypatch):
    monkeypatch.setattr("coordinator.controller.PARTITION_CHANGES_PER_COMMIT", 2)
    await controller.create_topic("t", -1, -1, {}, assignments=[(p, [0, 1]) for p in range(5)])
    await fence(controller, 0)
    await unfence(controller, 0)
    topic_id = controller.image.topics["t"].topic_id
    for p in range(5):
        info = partition(controller, "t", p)
        await controller.alter_partition(1, topic_id, p, info.leader_epoch, [1, 0],
                                         info.partition_epoch)
    commits = []
    commit = controller._commit

    async def counting_commit(records):
        commits.append(len(records))
        return await commit(records)

    monkeypatch.setattr(controller, "_commit", counting_commit)
    results = await controller.elect_leaders(Election.PREFERRED, None)
    assert [r.error for r in results] == [ErrorCode.none] * 5
    assert commits == [2, 2, 1]


async def test_isr_changes_of_one_request_commit_together_and_each_gets_its_answer(
        controller, monkeypatch):
    await controller.create_topic("t", -1, -1, {}, assignments=[(p, [1, 0]) for p in range(4)])
    await fence(controller, 0)
    await unfence(controller, 0)
    topic_id = controller.image.topics["t"].topic_id
    commits = []
    commit = controller._commit

    async def counting_commit(records):
        commits.append(len(records))
        return await commit(records)

    monkeypatch.setattr(controller, "_commit", counting_commit)
    changes = [IsrChange(topic_id, p, partition(controller, "t", p).leader_epoch, [1, 0],
                         partition(controller, "t", p).partition_epoch) for p in range(3)]
    changes.append(IsrChange(topic_id, 3, partition(controller, "t", 3).leader_epoch, [1, 0],
                             partition(controller, "t", 3).partition_epoch + 5))
    results = await controller.alter_partitions(1, changes)
    assert commits == [3]
    assert [error for error, _ in results] == [ErrorCode.none] * 3 + [
        ErrorCode.invalid_update_version]
    assert all(info.isr == [1, 0] for _, info in results[:3])
    assert partition(controller, "t", 3).isr == [1]
