"""Consumer groups with unmodified real clients: members joining and leaving mid-stream,
committed offsets across member restarts and (confluent-kafka's run) across a SIGKILL of the
broker (of every broker, on a cluster) (support/groups.py); in every storage mode
(support.storage_modes)."""

from __future__ import annotations

import pytest

from support.groups import (PARTITIONS, Member, assert_exactly_once, kafkajs_member, kcat_member,
                            names, produce, python_member, run_group_scenario,
                            wait_for_assigned_members, wait_for_values)
from support.topics import create_topic

CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka", "kafkajs"]


@pytest.fixture
def members():
    """Every member a test starts; any still running at teardown is killed."""
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


@pytest.mark.parametrize("client", CLIENTS)
def test_members_come_and_go_and_committed_offsets_survive(client, storage_mode, broker_factory,
                                                           topic_name, members, tmp_path, request):
    # What a SIGKILL of every broker tests is kept by the broker, whichever client committed:
    # once per mode, with confluent-kafka (and test_consumer_protocol's members), is enough.
    kill_broker = client == "confluent-kafka"
    broker = storage_mode.restartable(broker_factory) if kill_broker else storage_mode
    group = f"group-{topic_name}"
    if client == "kafkajs":
        request.getfixturevalue("kafkajs")  # installs tests/js on a fresh clone
        spawn = kafkajs_member(broker.bootstrap, topic_name, group, tmp_path)
    else:
        spawn = python_member(client, broker.bootstrap, topic_name, group, tmp_path)

    def tracked(name: str) -> Member:
        members.append(spawn(name))
        return members[-1]

    run_group_scenario(broker, topic_name, tracked, storage_mode.replication_factor, kill_broker)


def test_kcat_balanced_consumer(storage_mode, topic_name, members, tmp_path):
    bootstrap = storage_mode.bootstrap
    spawn = kcat_member(bootstrap, topic_name, f"group-{topic_name}", tmp_path)
    create_topic(bootstrap, topic_name, PARTITIONS, storage_mode.replication_factor)
    pair = [spawn("kcat-0"), spawn("kcat-1")]
    members.extend(pair)
    # Produce once both share the partitions: records already there could all go to the
    # first member before the second joins (seen on a cluster just restarted).
    wait_for_assigned_members(bootstrap, f"group-{topic_name}", 2)
    produce(bootstrap, topic_name, range(300))
    wait_for_values(pair, names(range(300)))
    for m in pair:
        m.stop()
    assert_exactly_once(pair, names(range(300)))
    partitions = [{p for p, _, _ in m.records} for m in pair]
    assert all(partitions) and not partitions[0] & partitions[1], partitions

    produce(bootstrap, topic_name, range(300, 400))
    members.append(spawn("kcat-2"))
    wait_for_values(members[-1:], names(range(300, 400)))
    members[-1].stop()
    assert_exactly_once(members[-1:], names(range(300, 400)))
