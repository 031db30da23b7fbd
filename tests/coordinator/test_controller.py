"""The controller's broker lifecycle: registered fenced, unfenced when ready, as in KRaft."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kio.schema.errors import ErrorCode

import coordinator.controller as controller_module
from coordinator.metadata_log import MetadataLog
from coordinator.controller import (
    FIRST_PRODUCER_ID,
    PRODUCER_ID_BLOCK_SIZE,
    Controller,
    ControllerError,
    ControllerSettings,
)
from replication.cluster_metadata import NO_LEADER, MetadataImage


async def test_a_broker_leads_nothing_until_it_is_ready_and_is_not_fenced_while_loading(
        tmp_path, caplog):
    controller = Controller(tmp_path, ControllerSettings(session_timeout_ms=200))
    await controller.start()
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        assert controller.image.brokers[0].fenced
        assert await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False) \
            == (ErrorCode.none, False)
        await controller.create_topic("t", 1, 1, {})

        def leader() -> int:
            return controller.image.topics["t"].partitions[0].leader

        assert leader() == 0

        # A restart: controlled shutdown (no other broker to move its leadership to, so
        # nothing changes), then registration while its logs load: fenced first, as after a
        # crash.
        assert await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=True) \
            == (ErrorCode.none, True)
        assert leader() == 0
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        assert leader() == NO_LEADER
        with caplog.at_level(logging.WARNING, logger="coordinator.controller"):
            # Loading takes longer than a session, heartbeats late or not at all.
            await asyncio.sleep(0.5)
            assert await controller.heartbeat(0, epoch, want_fence=True, want_shut_down=False) \
                == (ErrorCode.none, True)
            await asyncio.sleep(0.5)
        assert "fencing broker" not in caplog.text
        assert leader() == NO_LEADER

        assert await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False) \
            == (ErrorCode.none, False)
        assert leader() == 0
    finally:
        await controller.stop()


async def test_controlled_shutdowns_asked_together_are_one_commit_and_keep_the_last_isr(
        tmp_path):
    """A whole cluster stopping: the shutdowns that queue while the controller is busy are
    fenced together, one change per partition; a partition whose in-sync replicas all
    stop keeps them as its ISR, and the first of them back leads it again."""
    controller = Controller(tmp_path, ControllerSettings(auto_leader_rebalance=False))
    await controller.start()
    try:
        epochs = {}
        for node in range(4):
            epochs[node] = await controller.register_broker(node, "127.0.0.1", 9092 + node, None)
            await controller.heartbeat(node, epochs[node], want_fence=False,
                                       want_shut_down=False)
        await controller.create_topic("t", -1, -1, {}, assignments=[
            (0, [0, 1]), (1, [1, 2]), (2, [2, 3]), (3, [3, 0])])
        before = controller.image.next_offset

        async with controller._lock:  # busy with another change while the three ask
            shutdowns = [asyncio.create_task(controller.heartbeat(
                node, epochs[node], want_fence=False, want_shut_down=True)) for node in (0, 1, 2)]
            await asyncio.sleep(0.1)
        assert await asyncio.gather(*shutdowns) == [(ErrorCode.none, True)] * 3

        # Three fence records and one change per partition.
        assert controller.image.next_offset - before == 3 + 4
        partitions = controller.image.topics["t"].partitions
        assert [(partitions[p].leader, partitions[p].isr) for p in range(4)] == [
            (NO_LEADER, [0, 1]), (NO_LEADER, [1, 2]), (3, [3]), (3, [3])]

        epoch = await controller.register_broker(1, "127.0.0.1", 9093, None)
        await controller.heartbeat(1, epoch, want_fence=False, want_shut_down=False)
        assert [(partitions[p].leader, partitions[p].isr) for p in range(2)] == [
            (1, [0, 1]), (1, [1, 2])]
    finally:
        await controller.stop()


async def test_a_silent_broker_is_fenced_when_its_session_ends_and_a_heartbeating_one_is_not(
        tmp_path):
    controller = Controller(tmp_path, ControllerSettings(session_timeout_ms=300,
                                                         auto_leader_rebalance=False))
    await controller.start()
    try:
        epochs = {}
        for node in (0, 1):
            epochs[node] = await controller.register_broker(node, "127.0.0.1", 9092 + node, None)
            await controller.heartbeat(node, epochs[node], want_fence=False,
                                       want_shut_down=False)
        await controller.create_topic("t", -1, -1, {}, assignments=[(0, [0, 1])])
        for _ in range(12):  # 1.2 s: four sessions; broker 0 says nothing
            await controller.heartbeat(1, epochs[1], want_fence=False, want_shut_down=False)
            await asyncio.sleep(0.1)
        brokers = controller.image.brokers
        assert (brokers[0].fenced, brokers[1].fenced) == (True, False)
        partition = controller.image.topics["t"].partitions[0]
        assert (partition.leader, partition.isr) == (1, [1])
    finally:
        await controller.stop()


async def test_producer_id_blocks_never_repeat_across_registrations_and_controller_restarts(
        tmp_path):
    """Each block is in the metadata log before it is handed out: a broker back with an empty
    disk (a new registration) and a restarted controller go on past every block handed out."""
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        first = await controller.allocate_producer_ids(0, epoch)
        wiped_epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        with pytest.raises(ControllerError) as stale:
            await controller.allocate_producer_ids(0, epoch)
        assert stale.value.error_code == ErrorCode.stale_broker_epoch
        second = await controller.allocate_producer_ids(0, wiped_epoch)
        snapshot = MetadataImage()
        for offset, record in enumerate(controller.image.snapshot_records()):
            snapshot.apply(offset, record)
        assert snapshot.next_producer_id == second.stop
    finally:
        await controller.stop()
    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        epoch = await restarted.register_broker(1, "127.0.0.1", 9093, "az2")
        third = await restarted.allocate_producer_ids(1, epoch)
    finally:
        await restarted.stop()
    assert first == range(FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + PRODUCER_ID_BLOCK_SIZE)
    assert second.start == first.stop and third.start == second.stop
    assert len(second) == len(third) == PRODUCER_ID_BLOCK_SIZE


async def test_a_new_active_controller_elects_leaders_its_predecessor_left_out(tmp_path):
    """A controller that unfenced a broker and lost its leadership before the elections that
    go with it were committed (a separate commit): the next active controller elects them."""
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False)
        await controller.create_topic("t", 2, 1, {})
        await controller.register_broker(0, "127.0.0.1", 9092, "az1")  # a restart: fenced
        assert {p.leader for p in controller.image.topics["t"].partitions.values()} \
            == {NO_LEADER}
        epoch = controller.raft.epoch
    finally:
        await controller.stop()
    # What the predecessor committed: the unfencing, without the elections.
    metadata_log = MetadataLog(tmp_path)
    await metadata_log.append([{"type": "unfence_broker", "node_id": 0}], epoch)
    await metadata_log.log.close()

    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        assert not restarted.image.brokers[0].fenced
        partitions = restarted.image.topics["t"].partitions

        async def elected() -> None:
            while any(p.leader == NO_LEADER for p in partitions.values()):
                await restarted._wait_for_progress()

        await asyncio.wait_for(elected(), 5)
        assert [(p.leader, p.isr) for p in partitions.values()] == [(0, [0]), (0, [0])]
    finally:
        await restarted.stop()


async def test_a_topic_of_many_partitions_is_made_with_turns_in_between(tmp_path, monkeypatch):
    """Its partition records are made a slice at a time: 5,000 in one step held the
    controller's event loop 60 ms and more."""
    monkeypatch.setattr(controller_module, "WALK_SLICE_S", 0.0)  # a turn after every one
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    turns_at_record: list[int] = []
    make_record = controller_module.partition_record

    def counted(info):
        turns_at_record.append(turns)
        return make_record(info)

    monkeypatch.setattr(controller_module, "partition_record", counted)
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    counter = asyncio.create_task(count_turns())
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False)
        await controller.create_topic("t", 50, 1, {})
        assert len(controller.image.topics["t"].partitions) == 50
        assert len(turns_at_record) == 50
        assert len(set(turns_at_record)) > 25
    finally:
        counter.cancel()
        await controller.stop()
