"""Consumer groups with unmodified real clients: members joining and leaving mid-stream,
committed offsets across member restarts and across a broker SIGKILL (harness.py)."""

from __future__ import annotations

import pytest

from groups.harness import (Member, assert_exactly_once, create_topic, kafkajs_member, kcat_member,
                            names, produce, python_member, run_group_scenario, wait_for_values)

CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka", "kafkajs"]


@pytest.fixture
def members():
    """Every member a test starts; any still running at teardown is killed."""
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


@pytest.mark.parametrize("client", CLIENTS)
def test_members_come_and_go_and_committed_offsets_survive(client, broker_factory, topic_name,
                                                           members, tmp_path, request):
    broker = broker_factory()
    group = f"group-{topic_name}"
    if client == "kafkajs":
        request.getfixturevalue("kafkajs")  # installs tests/js on a fresh clone
        spawn = kafkajs_member(broker.bootstrap, topic_name, group, tmp_path)
    else:
        spawn = python_member(client, broker.bootstrap, topic_name, group, tmp_path)

    def tracked(name: str) -> Member:
        members.append(spawn(name))
        return members[-1]

    run_group_scenario(broker, topic_name, tracked)


def test_kcat_balanced_consumer(broker_factory, topic_name, members, tmp_path):
    broker = broker_factory()
    spawn = kcat_member(broker.bootstrap, topic_name, f"group-{topic_name}", tmp_path)
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, range(300))
    pair = [spawn("kcat-0"), spawn("kcat-1")]
    members.extend(pair)
    wait_for_values(pair, names(range(300)))
    for m in pair:
        m.stop()
    assert_exactly_once(pair, names(range(300)))
    partitions = [{p for p, _, _ in m.records} for m in pair]
    assert all(partitions) and not partitions[0] & partitions[1], partitions

    produce(broker.bootstrap, topic_name, range(300, 400))
    members.append(spawn("kcat-2"))
    wait_for_values(members[-1:], names(range(300, 400)))
    members[-1].stop()
    assert_exactly_once(members[-1:], names(range(300, 400)))
