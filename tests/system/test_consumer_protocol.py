"""The KIP-848 consumer group protocol with an unmodified real client: confluent-kafka
consumers with ``group.protocol=consumer``, the broker assigning.

- The group scenario (support/groups.py) in every storage mode: three members, a fourth joins
  and one leaves mid-stream, every record exactly once; committed offsets and the group hold
  across new members and a SIGKILL of the coordinator (every broker, on a cluster).
- Coordinator failover: the coordinator broker of a three-broker cluster is killed with
  SIGKILL while members consume; another broker loads the group from its records, and the
  same members (same ids, no rejoin) go on, every record exactly once.
- Rack-aware assignment: members in az1..az3 (``client.rack``) on three brokers in those AZs
  read without crossing an AZ, from a classic topic with one replica per partition (only
  the assignment keeps them local) and from a diskless one (any broker serves it).
- Bad heartbeats get Kafka's error codes.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka import (ConsumerGroupState, ConsumerGroupType, KafkaException,
                             TopicCollection)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from bench.local_cluster import LocalCluster
from protocol.apis import ApiKey
from support.groups import (STEP_TIMEOUT, Member, assert_exactly_once, names, produce,
                            python_member, run_group_scenario, wait_for_assigned_members,
                            wait_for_values)
from support.metrics import az_locality
from support.processes import Cluster
from support.raw import call, connect, entity
from support.topics import create_topic
from support.wait import wait_until

HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT


@pytest.fixture
def members():
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


def test_consumer_protocol_members_come_and_go(storage_mode, broker_factory, topic_name,
                                               members, tmp_path):
    broker = storage_mode.restartable(broker_factory)
    spawn = python_member("confluent-kafka-consumer-protocol", broker.bootstrap, topic_name,
                          f"group-{topic_name}", tmp_path)

    def tracked(name: str) -> Member:
        members.append(spawn(name))
        return members[-1]

    run_group_scenario(broker, topic_name, tracked, storage_mode.replication_factor)


def test_members_carry_on_when_the_coordinator_dies(tmp_path, topic_name, members):
    cluster = Cluster(tmp_path / "cluster", brokers=3)
    try:
        cluster.start()
        create_topic(cluster.bootstrap, topic_name, 6, replication_factor=3, in_sync=True)
        group = f"group-{topic_name}"
        spawn = python_member("confluent-kafka-consumer-protocol", cluster.bootstrap,
                              topic_name, group, tmp_path)
        members.extend(spawn(f"member-{i}") for i in range(3))
        wait_for_assigned_members(cluster.bootstrap, group, 3)
        produce(cluster.bootstrap, topic_name, range(300))
        wait_for_values(members, names(range(300)))

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        before = admin.describe_consumer_groups([group])[group].result(10)
        # ListGroups v5's type and state filters (Stable once every member reconciled).
        listed = wait_until(lambda: admin.list_consumer_groups(
            types={ConsumerGroupType.CONSUMER},
            states={ConsumerGroupState.STABLE}).result(10).valid, STEP_TIMEOUT, 0.5)
        assert [(g.group_id, g.type) for g in listed] == [(group, ConsumerGroupType.CONSUMER)]
        assert not admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10).valid
        coordinator = before.coordinator.id
        cluster.brokers[coordinator].kill()
        produce(cluster.bootstrap, topic_name, range(300, 600))
        wait_for_values(members, names(range(600)))

        def described_elsewhere():
            try:
                found = admin.describe_consumer_groups([group])[group].result(10)
            except KafkaException:  # the new coordinator may still be loading
                return None
            return found if found.coordinator.id != coordinator else None
        after = wait_until(described_elsewhere, STEP_TIMEOUT, 0.5)
        # The same members, under the same ids: nobody had to join again.
        assert ({m.member_id for m in after.members}
                == {m.member_id for m in before.members})
        for member in members:
            member.stop()
        assert_exactly_once(members, names(range(600)))
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def three_azs(tmp_path_factory):
    """Three brokers, in az1, az2 and az3, with their byte counters."""
    cluster = LocalCluster(tmp_path_factory.mktemp("azs"), brokers=3, metrics=True).start()
    yield cluster
    cluster.stop()


def consumer_fetch_bytes(cluster: LocalCluster) -> Counter:
    """Consumer fetch bytes the brokers served, by "same", "cross" or "unknown" AZ."""
    totals: Counter = Counter()
    for node in range(3):
        for row in cluster.metrics_json(node)["network"]["server"]:
            if row["class"] == "fetch-consumer":
                totals[az_locality(row)] += row["bytes"]
    return totals


def wait_for_assignment_within_azs(bootstrap: str, group: str, topic: str) -> None:
    """Until each member (client id ``name,az=AZ``) is assigned only partitions led in its AZ:
    the state the test measures. Under full-suite load, waiting only for every member to hold
    its target assignment twice left about a fifth of the bytes read across AZs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def within_azs() -> bool:
        try:
            described = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
            group_description = admin.describe_consumer_groups([group])[group].result(10)
        except KafkaException:
            return False
        leader_az = {p.id: p.leader.rack if p.leader else None for p in described.partitions}
        return all(
            member.assignment.topic_partitions and all(
                leader_az[tp.partition] == member.client_id.rpartition(",az=")[2]
                for tp in member.assignment.topic_partitions)
            for member in group_description.members)
    wait_until(within_azs, STEP_TIMEOUT, 0.2)


@pytest.mark.parametrize("storage", ["classic", "diskless"])
def test_members_read_within_their_az(storage, three_azs, topic_name, members, tmp_path):
    bootstrap = three_azs.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 6, 1, config={
        "kipper.storage.mode": storage})])[topic_name].result(30)
    group = f"group-{topic_name}"
    members.extend(python_member("confluent-kafka-consumer-protocol", bootstrap, topic_name,
                                 group, tmp_path, rack=f"az{i + 1}")(f"az{i + 1}-member")
                   for i in range(3))
    wait_for_assigned_members(bootstrap, group, 3)
    if storage == "classic":
        wait_for_assignment_within_azs(bootstrap, group, topic_name)
    before = consumer_fetch_bytes(three_azs)
    produce(bootstrap, topic_name, range(3000))
    wait_for_values(members, names(range(3000)))
    fetched = consumer_fetch_bytes(three_azs) - before
    for member in members:
        member.stop()
    assert_exactly_once(members, names(range(3000)))
    print(f"\nconsumer fetch bytes by AZ locality ({storage}): {dict(fetched)}")
    assert fetched["same"] > 0
    assert fetched["cross"] + fetched["unknown"] < 0.01 * fetched["same"], fetched


def _heartbeat(sock, version: int = 1, **fields):
    values = dict(group_id="bad-input-group", member_id=str(uuid.uuid4()), member_epoch=0,
                  instance_id=None, rack_id=None, rebalance_timeout=300_000,
                  subscribed_topic_names=("bad-input-topic",), subscribed_topic_regex=None,
                  server_assignor=None, topic_partitions=())
    values.update(fields)
    return call(sock, HEARTBEAT, version, entity(HEARTBEAT, version,
                                                 "ConsumerGroupHeartbeatRequest", **values))


def test_bad_heartbeats_get_kafkas_error_codes(broker_factory):
    broker = broker_factory()
    create_topic(broker.bootstrap, "bad-input-topic", 2)
    with connect(broker) as sock:
        # The coordinator's topic exists once a client looked for a coordinator.
        call(sock, ApiKey.FIND_COORDINATOR, 4, entity(
            ApiKey.FIND_COORDINATOR, 4, "FindCoordinatorRequest", key_type=0,
            coordinator_keys=("bad-input-group",)))
        joined = None
        for _ in range(100):
            joined = _heartbeat(sock)
            if joined.error_code == ErrorCode.none:
                break
        assert joined.error_code == ErrorCode.none and joined.member_epoch > 0
        member_id, epoch = joined.member_id, joined.member_epoch

        assert _heartbeat(sock, member_id=member_id,
                          member_epoch=epoch + 5).error_code == ErrorCode.fenced_member_epoch
        assert _heartbeat(sock, member_id="nobody",
                          member_epoch=epoch).error_code == ErrorCode.unknown_member_id
        assert _heartbeat(sock, group_id="no-such-group", member_epoch=3
                          ).error_code == ErrorCode.group_id_not_found
        assert _heartbeat(sock, server_assignor="roundrobin"
                          ).error_code == ErrorCode.unsupported_assignor
        assert _heartbeat(sock, subscribed_topic_names=None
                          ).error_code == ErrorCode.invalid_request
        assert _heartbeat(sock, subscribed_topic_names=None, subscribed_topic_regex="(("
                          ).error_code == ErrorCode.invalid_regular_expression
        assert _heartbeat(sock, member_id="").error_code == ErrorCode.invalid_request
        assert _heartbeat(sock, member_id=member_id, member_epoch=-7
                          ).error_code == ErrorCode.invalid_request

        # OffsetCommit v9 carries the member epoch: an old one is stale.
        commit = entity(ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequest",
                        group_id="bad-input-group", generation_id_or_member_epoch=epoch - 1,
                        member_id=member_id, group_instance_id=None, topics=(entity(
                            ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestTopic",
                            name="bad-input-topic", partitions=(entity(
                                ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestPartition",
                                partition_index=0, committed_offset=1,
                                committed_leader_epoch=-1, committed_metadata=""),)),))
        answer = call(sock, ApiKey.OFFSET_COMMIT, 9, commit)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.stale_member_epoch

        # Static membership: an instance id held by a live member is not released.
        static = _heartbeat(sock, instance_id="instance-a")
        assert static.error_code == ErrorCode.none
        assert _heartbeat(sock, instance_id="instance-a"
                          ).error_code == ErrorCode.unreleased_instance_id
        assert _heartbeat(sock, member_id=static.member_id, member_epoch=-2,
                          instance_id="instance-a").member_epoch == -2
        rejoined = _heartbeat(sock, instance_id="instance-a")
        assert rejoined.error_code == ErrorCode.none
        assert rejoined.member_epoch == static.member_epoch
