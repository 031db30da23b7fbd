"""Snapshots of the cluster metadata (KIP-630): the image they rebuild, how the controller
writes and loads them, and what is left of the log."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from coordinator.config_changes import ConfigChange, ConfigOp
from coordinator.controller import Controller, ControllerSettings
from coordinator.metadata_log import SNAPSHOTS_KEPT, MetadataLog, SnapshotId
from coordinator.state_machine import Applier
from replication.cluster_metadata import MetadataImage

# Small enough that every few changes make a snapshot.
SNAPSHOT_BYTES = 2_000


def settings() -> ControllerSettings:
    return ControllerSettings(auto_leader_rebalance=False,
                              snapshot_max_new_record_bytes=SNAPSHOT_BYTES)


async def busy_controller(tmp_path) -> Controller:
    """A controller with brokers (one fenced, one with a full log dir), topics with
    configs, a deleted topic and dynamic broker configs."""
    controller = Controller(tmp_path, settings())
    await controller.start()
    for node in range(3):
        epoch = await controller.register_broker(node, "127.0.0.1", 9092 + node, f"az{node}")
        await controller.heartbeat(node, epoch, want_fence=False, want_shut_down=False)
    for i in range(12):
        await controller.create_topic(f"t{i}", 4, 3, {"retention.ms": str(1000 + i)})
    await controller.delete_topic("t3")
    await controller.alter_broker_configs("", [ConfigChange("log.retention.ms", ConfigOp.SET,
                                                            "60000")])
    await controller.heartbeat(1, controller.image.brokers[1].epoch, want_fence=False,
                               want_shut_down=False, log_dir_offline=True)
    await controller.heartbeat(2, controller.image.brokers[2].epoch, want_fence=False,
                               want_shut_down=True)
    if controller._snapshot_task is not None:
        await controller._snapshot_task
    return controller


def same_image(a: MetadataImage, b: MetadataImage) -> bool:
    """The same state; a restarted quorum's image is one record further (the new leader's
    leader_change record, which changes nothing)."""
    return (a.topics == b.topics and a.brokers == b.brokers
            and a.broker_configs == b.broker_configs and a.next_offset - b.next_offset in (0, 1))


async def test_a_snapshot_rebuilds_the_image(tmp_path):
    controller = await busy_controller(tmp_path)
    try:
        rebuilt = MetadataImage()
        Applier(rebuilt).load_snapshot(controller.image.next_offset,
                                       controller.image.snapshot_records())
        assert same_image(rebuilt, controller.image)
        assert rebuilt.brokers[1].log_dir_offline and rebuilt.brokers[2].fenced
    finally:
        await controller.stop()


async def test_a_snapshot_built_in_turns_is_the_image_as_it_was_taken(tmp_path):
    """The controller turns its image into records between turns of the event loop: what
    is applied meanwhile (leaders moved, a topic deleted, another created) is not in it."""
    controller = await busy_controller(tmp_path)
    try:
        image = controller.image
        taken = image.snapshot()
        expected = json.loads(json.dumps(image.snapshot_records()))
        building = asyncio.create_task(taken.records_in_turns(0))
        offset = image.next_offset
        for topic in [t for t in image.topics.values() if t.name != "t0"]:
            for info in list(topic.partitions.values()):
                image.apply(offset, {"type": "partition", "topic": info.topic,
                                     "partition": info.partition, "replicas": info.replicas,
                                     "isr": info.isr[:1], "leader": info.isr[0],
                                     "leader_epoch": info.leader_epoch + 1,
                                     "partition_epoch": info.partition_epoch + 1})
                offset += 1
                await asyncio.sleep(0)
        image.apply(offset, {"type": "remove_topic", "name": "t0"})
        image.apply(offset + 1, {"type": "topic", "name": "later", "id": str(uuid.uuid4()),
                                 "configs": {}})
        assert not building.done()  # the changes came while it was being built
        assert json.loads(json.dumps(await building)) == expected
        assert json.loads(json.dumps(image.snapshot_records())) != expected
    finally:
        await controller.stop()


async def test_a_restart_loads_the_newest_snapshot_and_the_log_after_it(tmp_path):
    controller = await busy_controller(tmp_path)
    await controller.create_topic("after", 1, 1, {})  # in the log's tail
    await controller.stop()
    log = MetadataLog(tmp_path)
    snapshots = log.snapshots()
    assert len(snapshots) == SNAPSHOTS_KEPT
    # The log below the older snapshot is gone: a restart cannot replay from 0.
    assert log.log.log_start_offset == snapshots[0].end_offset > 0
    await log.log.close()

    restarted = Controller(tmp_path, settings())
    await restarted.start()
    try:
        assert same_image(restarted.image, controller.image)
        assert "after" in restarted.image.topics and "t3" not in restarted.image.topics
    finally:
        await restarted.stop()


async def test_a_clean_stop_snapshots_what_a_restart_would_replay(tmp_path):
    """Past snapshot_on_stop_min_bytes applied since the last snapshot, a stop writes one
    (below the size that snapshots while running), and the next start loads it."""
    quiet = ControllerSettings(auto_leader_rebalance=False,
                               snapshot_max_new_record_bytes=1 << 30,
                               snapshot_on_stop_min_bytes=SNAPSHOT_BYTES)
    controller = Controller(tmp_path, quiet)
    await controller.start()
    epoch = await controller.register_broker(0, "127.0.0.1", 9092, None)
    await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False)
    assert controller.log.log.size_bytes < SNAPSHOT_BYTES
    await controller.stop()
    assert not MetadataLog(tmp_path).snapshots()  # too little to replay

    controller = Controller(tmp_path, quiet)
    await controller.start()
    for i in range(12):
        await controller.create_topic(f"t{i}", 4, 1, {})
    assert controller._snapshot_task is None
    await controller.stop()
    log = MetadataLog(tmp_path)
    assert log.latest_snapshot().end_offset == controller.image.next_offset
    await log.log.close()

    restarted = Controller(tmp_path, quiet)
    await restarted.start()
    try:
        assert same_image(restarted.image, controller.image)
    finally:
        await restarted.stop()


async def test_a_torn_or_unreadable_snapshot_is_passed_over(tmp_path):
    controller = await busy_controller(tmp_path)
    await controller.stop()
    log = MetadataLog(tmp_path)
    newest = log.latest_snapshot()
    await log.log.close()
    # A crash while writing the next one leaves its temporary file; the newest is damaged.
    (log.snapshot_dir / (SnapshotId(newest.end_offset + 5, 0).file_name + ".tmp")).write_bytes(
        b"torn")
    log.snapshot_path(newest).write_bytes(b"\x00" * 10)

    restarted = Controller(tmp_path, settings())
    await restarted.start()
    try:
        assert same_image(restarted.image, controller.image)
    finally:
        await restarted.stop()


async def test_snapshots_are_written_off_the_event_loop_path_of_commits(tmp_path):
    """A commit does not wait for the snapshot it triggers."""
    controller = Controller(tmp_path, settings())
    await controller.start()
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, None)
        await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False)
        await controller.create_topic("big", 200, 1, {})
        assert controller._snapshot_task is not None
        await asyncio.wait_for(controller._snapshot_task, 10)
        assert controller.log.latest_snapshot().end_offset == controller.image.next_offset
    finally:
        await controller.stop()


async def test_a_controller_restarted_again_and_again_still_snapshots(tmp_path, caplog):
    """What a restart replays counts toward the next snapshot: no process appends enough
    for one on its own, together they do, and the start after that loads it."""
    appended_by_run = []
    ended_at = 0
    while not MetadataLog(tmp_path).snapshots():
        assert len(appended_by_run) < 30, f"no snapshot after runs appending {appended_by_run}"
        controller = Controller(tmp_path, settings())
        await controller.start()
        run = len(appended_by_run)
        await controller.alter_broker_configs("", [ConfigChange(
            "log.retention.ms", ConfigOp.SET, str(60_000 + run))])
        if controller._snapshot_task is not None:
            await controller._snapshot_task
        size = controller.log.log.size_bytes
        appended_by_run.append(size - ended_at)
        ended_at = size
        await controller.stop()
    assert len(appended_by_run) > 2 and max(appended_by_run) < SNAPSHOT_BYTES

    restarted = Controller(tmp_path, settings())
    with caplog.at_level(logging.INFO, logger="coordinator.controller"):
        await restarted.start()
    try:
        assert "loaded metadata snapshot" in caplog.text
        assert restarted.image.broker_configs[""]["log.retention.ms"] == str(
            60_000 + len(appended_by_run) - 1)
    finally:
        await restarted.stop()
