"""The controller's side of a live storage-mode switch (docs/mode-switch.md): the config
change seals every partition, each leader's STORAGE_SPAN records the next span, and the
last one changes the topic's mode; the state survives snapshots and restarts."""

from __future__ import annotations

import pytest
from support.coordinators import controller_with_brokers
from kio.schema.errors import ErrorCode

from coordinator.config_changes import ConfigChange, ConfigOp
from coordinator.controller import Controller, ControllerError, ControllerSettings
from coordinator.state_machine import Applier
from replication.cluster_metadata import MetadataImage, StorageSpan

MODE = "kipper.storage.mode"


@pytest.fixture
async def controller(tmp_path):
    controller = await controller_with_brokers(tmp_path, 1)
    await controller.create_topic("t", 2, 1, {MODE: "classic"})
    yield controller
    await controller.stop()


def _topic(controller: Controller):
    return controller.image.topics["t"]


async def _span(controller: Controller, partition: int, mode: str, base: int,
                epoch: int | None = None, broker: int = 0) -> ErrorCode:
    info = _topic(controller).partitions[partition]
    return await controller.record_storage_span(
        broker, _topic(controller).topic_id, partition,
        info.leader_epoch if epoch is None else epoch, mode, base)


async def test_a_switch_seals_then_records_a_span_per_partition_then_the_mode(controller):
    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "diskless")])
    topic = _topic(controller)
    assert topic.configs[MODE] == "classic"
    assert [p.switch_to for p in topic.partitions.values()] == ["diskless", "diskless"]
    with pytest.raises(ControllerError, match="already switching"):
        await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "classic")])

    epoch = topic.partitions[0].leader_epoch
    assert await _span(controller, 0, "diskless", 10, broker=1) == ErrorCode.not_leader_or_follower
    assert await _span(controller, 0, "diskless", 10, epoch=epoch - 1) == ErrorCode.fenced_leader_epoch
    assert await _span(controller, 0, "classic", 10) == ErrorCode.invalid_request
    assert await _span(controller, 0, "diskless", 10) == ErrorCode.none
    first = _topic(controller).partitions[0]
    assert first.spans == [StorageSpan("classic", 0), StorageSpan("diskless", 10)]
    assert (first.switch_to, first.leader_epoch) == (None, epoch + 1)
    assert _topic(controller).configs[MODE] == "classic"  # partition 1 is still sealed
    # A retry of a recorded span (the leader lost the answer) is answered the same.
    assert await _span(controller, 0, "diskless", 10, epoch=epoch) == ErrorCode.none

    assert await _span(controller, 1, "diskless", 0) == ErrorCode.none
    assert _topic(controller).configs[MODE] == "diskless"

    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "classic")])
    assert await _span(controller, 0, "classic", 25) == ErrorCode.none
    assert _topic(controller).partitions[0].spans == [
        StorageSpan("classic", 0), StorageSpan("diskless", 10), StorageSpan("classic", 25)]


async def test_the_switch_state_survives_snapshots_and_restarts(tmp_path, controller):
    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "diskless")])
    assert await _span(controller, 0, "diskless", 7) == ErrorCode.none
    expected = {p: (info.spans, info.switch_to) for p, info in _topic(controller).partitions.items()}

    rebuilt = MetadataImage()
    Applier(rebuilt).load_snapshot(controller.image.next_offset, controller.image.snapshot_records())
    assert {p: (i.spans, i.switch_to) for p, i in rebuilt.topics["t"].partitions.items()} == expected
    await controller.stop()

    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        assert {p: (i.spans, i.switch_to)
                for p, i in restarted.image.topics["t"].partitions.items()} == expected
        # The switch goes on where it was: partition 1 is still sealed, then recorded.
        assert await _span(restarted, 1, "diskless", 0) == ErrorCode.none
        assert restarted.image.topics["t"].configs[MODE] == "diskless"
    finally:
        await restarted.stop()


async def test_deleting_the_mode_config_of_a_topic_in_the_default_mode_changes_nothing(controller):
    before = controller.image.next_offset
    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.DELETE, None)])
    assert _topic(controller).configs[MODE] == "classic"
    assert controller.image.next_offset == before


async def test_alter_configs_switches_and_replaces_the_other_configs(controller):
    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "diskless"),
                                               ConfigChange("retention.ms", ConfigOp.SET, "5")],
                                         replace=True)
    assert _topic(controller).configs == {MODE: "classic", "retention.ms": "5"}
    assert {p.switch_to for p in _topic(controller).partitions.values()} == {"diskless"}


async def test_no_partition_is_added_while_the_topic_switches(controller):
    """A new partition would start in the mode the topic is leaving; once switched, new
    partitions are of the new mode (one implicit span)."""
    await controller.alter_topic_configs("t", [ConfigChange(MODE, ConfigOp.SET, "diskless")])
    with pytest.raises(ControllerError) as refused:
        await controller.create_partitions("t", 3)
    assert refused.value.error_code == ErrorCode.reassignment_in_progress
    for partition in (0, 1):
        assert await _span(controller, partition, "diskless", 0) == ErrorCode.none
    await controller.create_partitions("t", 3)
    added = _topic(controller).partitions[2]
    assert added.write_mode(_topic(controller).configs[MODE]) == "diskless"
    assert (added.spans, added.switch_to) == ([], None)
