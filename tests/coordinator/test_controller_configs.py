"""The controller's config changes (topics, brokers, groups): IncrementalAlterConfigs
operations, AlterConfigs' replace-all semantics, validation codes, validate_only, and replay
after a restart or from a snapshot."""

from __future__ import annotations

import pytest
from support.coordinators import controller_with_brokers
from kio.schema.errors import ErrorCode

from coordinator.config_changes import ConfigChange, ConfigOp
from coordinator.controller import Controller, ControllerError, ControllerSettings
from coordinator.state_machine import Applier
from replication.cluster_metadata import MetadataImage

SET, DELETE, APPEND, SUBTRACT = ConfigOp.SET, ConfigOp.DELETE, ConfigOp.APPEND, ConfigOp.SUBTRACT


# A dynamic broker config read live (by the log cleaner).
CLEANER_IO = "log.cleaner.io.max.bytes.per.second"


@pytest.fixture
async def controller(tmp_path):
    controller = await controller_with_brokers(tmp_path, 1)
    await controller.create_topic("t", 1, 1, {"kipper.storage.mode": "classic",
                                              "retention.ms": "1000"})
    yield controller
    await controller.stop()


def configs(controller: Controller) -> dict[str, str]:
    return controller.image.topics["t"].configs


async def test_incremental_operations_change_only_what_they_name(controller):
    await controller.alter_topic_configs("t", [
        ConfigChange("retention.bytes", SET, "5000"),
        ConfigChange("retention.ms", DELETE, None),
        ConfigChange("cleanup.policy", APPEND, "compact"),
        ConfigChange("leader.replication.throttled.replicas", APPEND, "0:1,0:2")])
    assert configs(controller) == {
        "kipper.storage.mode": "classic", "retention.bytes": "5000",
        # APPEND starts from the default of an unset list config.
        "cleanup.policy": "delete,compact", "leader.replication.throttled.replicas": "0:1,0:2"}
    await controller.alter_topic_configs("t", [ConfigChange("cleanup.policy", SUBTRACT, "delete")])
    assert configs(controller)["cleanup.policy"] == "compact"


async def test_alter_configs_replaces_every_explicit_config_but_the_storage_mode(controller):
    await controller.alter_topic_configs("t", [ConfigChange("segment.bytes", SET, "100000")],
                                         replace=True)
    assert configs(controller) == {"kipper.storage.mode": "classic", "segment.bytes": "100000"}


async def test_validate_only_changes_nothing(controller):
    before = controller.image.next_offset
    await controller.alter_topic_configs("t", [ConfigChange("retention.ms", SET, "5")],
                                         validate_only=True)
    await controller.alter_broker_configs("", [ConfigChange("log.retention.ms", SET, "5")],
                                          validate_only=True)
    assert configs(controller)["retention.ms"] == "1000"
    assert controller.image.broker_configs == {}
    assert controller.image.next_offset == before


@pytest.mark.parametrize(("changes", "code", "message"), [
    ([ConfigChange("no.such.config", SET, "1")], ErrorCode.invalid_config, "Unknown topic config"),
    ([ConfigChange("retention.ms", SET, "soon")], ErrorCode.invalid_config, "retention.ms"),
    ([ConfigChange("retention.ms", APPEND, "1")], ErrorCode.invalid_config, "not a list"),
    ([ConfigChange("retention.ms", SET, "1"), ConfigChange("retention.ms", DELETE, None)],
     ErrorCode.invalid_request, "duplicate config keys"),
    ([ConfigChange("kipper.storage.mode", SET, "active-tiered")], ErrorCode.invalid_config,
     "switches between classic and diskless only"),
])
async def test_bad_topic_changes_are_refused_with_kafkas_codes(controller, changes, code, message):
    with pytest.raises(ControllerError) as refused:
        await controller.alter_topic_configs("t", changes)
    assert refused.value.error_code == code
    assert message in refused.value.message
    assert configs(controller)["retention.ms"] == "1000"


async def test_an_unknown_topic_is_unknown_topic_or_partition(controller):
    with pytest.raises(ControllerError) as refused:
        await controller.alter_topic_configs("nope", [ConfigChange("retention.ms", SET, "1")])
    assert refused.value.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize(("resource", "changes", "code"), [
    ("x", [ConfigChange("log.retention.ms", SET, "1")], ErrorCode.invalid_request),
    ("", [ConfigChange("broker.id", SET, "3")], ErrorCode.invalid_config),
    ("", [ConfigChange("log.retention.bananas", SET, "3")], ErrorCode.invalid_config),
    ("0", [ConfigChange(CLEANER_IO, SET, "many")], ErrorCode.invalid_config),
    ("0", [ConfigChange("log.cleanup.policy", SET, "shred")], ErrorCode.invalid_config),
])
async def test_bad_broker_changes_are_refused(controller, resource, changes, code):
    with pytest.raises(ControllerError) as refused:
        await controller.alter_broker_configs(resource, changes)
    assert refused.value.error_code == code
    assert controller.image.broker_configs == {}


async def test_broker_configs_are_kept_per_resource_and_replayed_after_a_restart(tmp_path):
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    await controller.alter_broker_configs("", [ConfigChange("log.retention.ms", SET, "60000")])
    await controller.alter_broker_configs("0", [ConfigChange(CLEANER_IO, SET, "2"),
                                                ConfigChange("log.cleanup.policy", APPEND,
                                                             "compact")])
    await controller.alter_broker_configs("", [ConfigChange("log.segment.bytes", SET, "100000")],
                                          replace=True)
    await controller.stop()

    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        assert restarted.image.broker_configs == {
            "": {"log.segment.bytes": "100000"},
            "0": {CLEANER_IO: "2", "log.cleanup.policy": "delete,compact"}}
        # Deleting the last config removes the resource.
        await restarted.alter_broker_configs("0", [ConfigChange(CLEANER_IO, DELETE, None),
                                                   ConfigChange("log.cleanup.policy", DELETE, None)])
        assert "0" not in restarted.image.broker_configs
    finally:
        await restarted.stop()


# --- group configs (KIP-848/KIP-932) -------------------------------------------------------------

AUTO_RESET, LOCK = "share.auto.offset.reset", "share.record.lock.duration.ms"


@pytest.mark.parametrize(("group", "changes", "code", "message"), [
    ("g", [ConfigChange("share.bananas", SET, "1")], ErrorCode.invalid_config,
     "Unknown group config name: share.bananas"),
    ("g", [ConfigChange(AUTO_RESET, SET, "middle")], ErrorCode.invalid_config,
     "String must be one of: latest, earliest"),
    ("g", [ConfigChange(LOCK, SET, "999")], ErrorCode.invalid_config,
     "Value must be at least 1000"),
    ("g", [ConfigChange(LOCK, SET, "long")], ErrorCode.invalid_config, "INT"),
    ("g", [ConfigChange(LOCK, SET, str(2**31))], ErrorCode.invalid_config, "INT"),
    ("g", [ConfigChange(LOCK, APPEND, "1000")], ErrorCode.invalid_config, "not a list"),
    ("g", [ConfigChange("share.session.timeout.ms", SET, "5000"),
           ConfigChange("share.heartbeat.interval.ms", SET, "5000")], ErrorCode.invalid_config,
     "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"),
    ("g", [ConfigChange("consumer.session.timeout.ms", SET, "3000"),
           ConfigChange("consumer.heartbeat.interval.ms", SET, "5000")],
     ErrorCode.invalid_config,
     "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms"),
    ("g", [ConfigChange("share.isolation.level", SET, "read_committed")],
     ErrorCode.invalid_config, "cannot be set on one group in kipper yet"),
    ("", [ConfigChange(AUTO_RESET, SET, "earliest")], ErrorCode.invalid_request, "empty"),
])
async def test_bad_group_changes_are_refused(controller, group, changes, code, message):
    with pytest.raises(ControllerError) as refused:
        await controller.alter_group_configs(group, changes)
    assert (refused.value.error_code, message in refused.value.message) == (code, True)
    assert controller.image.group_configs == {}


async def test_group_configs_need_no_group_and_survive_snapshots_and_restarts(tmp_path):
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    await controller.alter_group_configs("queue", [ConfigChange(AUTO_RESET, SET, "earliest")],
                                         validate_only=True)
    assert controller.image.group_configs == {}
    await controller.alter_group_configs("queue", [ConfigChange(AUTO_RESET, SET, "earliest"),
                                                   ConfigChange(LOCK, SET, "15000")])
    await controller.alter_group_configs("gone", [ConfigChange(AUTO_RESET, SET, "earliest")])
    stale = MetadataImage()  # a broker that saw "gone" get its config, then fell behind
    for offset, record in enumerate(controller.image.snapshot_records()):
        stale.apply(offset, record)
    # DELETE restores the default (the config is no longer set); the last one removes the group.
    await controller.alter_group_configs("queue", [ConfigChange(LOCK, DELETE, None)])
    await controller.alter_group_configs("gone", [ConfigChange(AUTO_RESET, DELETE, None)])
    expected = {"queue": {AUTO_RESET: "earliest"}}
    assert controller.image.group_configs == expected

    snapshot = controller.image.snapshot_records()
    rebuilt = MetadataImage()
    Applier(rebuilt).load_snapshot(controller.image.next_offset, snapshot)
    assert rebuilt.group_configs == expected
    for offset, record in enumerate(stale.snapshot_delta(snapshot), stale.next_offset):
        stale.apply(offset, record)
    assert stale.group_configs == expected
    await controller.stop()

    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        assert restarted.image.group_configs == expected
    finally:
        await restarted.stop()


async def test_alter_configs_replaces_every_config_of_a_group(controller):
    await controller.alter_group_configs("q", [ConfigChange(AUTO_RESET, SET, "earliest"),
                                               ConfigChange(LOCK, SET, "15000")])
    await controller.alter_group_configs("q", [ConfigChange(LOCK, SET, "20000")], replace=True)
    assert controller.image.group_configs == {"q": {LOCK: "20000"}}
