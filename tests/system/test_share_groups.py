"""Share groups (KIP-932) with confluent-kafka's ``ShareConsumer``, in every storage mode.

One three-broker cluster with object storage (support.share_groups.ShareCluster: 3 s record
locks, 3 deliveries at most) serves the three modes, each scenario on a topic of its mode:

- four members on a two-partition topic all receive records, every record once;
- released records and records whose lock expired are redelivered (delivery count up),
  rejected ones are not, and a record released at every delivery stops at the limit;
- kill -9 of the broker a member fetches from, or of the share partition's owner (the
  leader of its ``__share_group_state`` partition), loses no acknowledgement: no record
  whose ACCEPT the broker confirmed is delivered again, and every record is accepted
  (or its acknowledgement's answer was lost with the killed broker);
- DeleteGroups (confluent-kafka's AdminClient) refuses a share group with members and deletes
  an empty one with its share-partition state: a new member starts from
  ``share.auto.offset.reset`` again;
- bad input gets Kafka's error codes (raw requests), the other group protocols on a share
  group's id included.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import AcknowledgeType, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from coordinator.coordinator_log import partition_for
from coordinator.internal_topic import SHARE_GROUP_STATE_TOPIC
from protocol.apis import ApiKey
from support.metrics import az_locality
from support.raw import call, connect, entity
from support.share_groups import DELIVERY_LIMIT, LOCK_MS, ShareCluster, ShareMember, wait_for
from support.storage_modes import MODES

pytestmark = pytest.mark.system

STATE_PARTITIONS = 10  # share.coordinator.state.topic.num.partitions, kipper's default
OFFSETS_PARTITIONS = 10  # offsets.topic.num.partitions, kipper's default


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = ShareCluster(tmp_path_factory.mktemp("share"), s3_endpoint)
    try:
        yield cluster.start(timeout=90)
    finally:
        cluster.stop()  # also the nodes that started when another did not


@pytest.fixture
def group() -> str:
    return f"share-{uuid.uuid4().hex[:8]}"


def values(n: int, prefix: str = "r") -> list[bytes]:
    return [f"{prefix}{i:05d}".encode() for i in range(n)]


def close_all(members: list[ShareMember]) -> None:
    for member in members:
        member.close()


@pytest.mark.parametrize("mode", MODES)
def test_four_members_on_two_partitions_all_receive_records(cluster, topic_name, group, mode):
    cluster.create_topic(topic_name, mode)
    members = [ShareMember(cluster.bootstrap, group, topic_name, f"m{i}", rack=f"az{i % 3 + 1}")
               .start() for i in range(4)]
    try:
        assert wait_for(lambda: len(_described(cluster, group).members) == 4, 30)
        sent = []
        for burst in range(10):  # bursts larger than one fetch (20 records): shared out
            chunk = values(80, f"b{burst:02d}-")
            cluster.produce(topic_name, chunk)
            sent += chunk
            time.sleep(0.2)
        received = lambda: Counter(v for m in members for v in m.values())  # noqa: E731
        assert wait_for(lambda: set(received()) == set(sent), 60), \
            f"missing {len(set(sent) - set(received()))} records"
        assert all(m.values() for m in members), [len(m.values()) for m in members]
        first_deliveries = Counter(d.value for m in members for d in m.deliveries
                                   if d.delivery_count == 1)
        assert max(first_deliveries.values()) == 1
        assert not any(m.errors for m in members), [m.errors for m in members]
    finally:
        close_all(members)


@pytest.mark.parametrize("mode", MODES)
def test_released_records_come_back_rejected_and_over_limit_ones_do_not(
        cluster, topic_name, group, mode):
    cluster.create_topic(topic_name, mode)
    sent = values(30)
    cluster.produce(topic_name, sent)

    def decide(delivery) -> AcknowledgeType:
        i = int(delivery.value[1:])
        if i % 10 == 9:
            return AcknowledgeType.RELEASE  # at every delivery: archived at the limit
        if i % 3 == 0:
            return AcknowledgeType.REJECT
        if i % 3 == 1 and delivery.delivery_count == 1:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    member = ShareMember(cluster.bootstrap, group, topic_name, explicit=True,
                         decide=decide).start()
    try:
        accepted = {v for v in sent if int(v[1:]) % 10 != 9 and int(v[1:]) % 3 != 0}
        assert wait_for(lambda: {d.value for d in member.accepted} >= accepted, 60)
        time.sleep(1)  # anything further would have been redelivered by now
        deliveries = Counter(member.values())
        for v in sent:
            i = int(v[1:])
            if i % 10 == 9:
                assert deliveries[v] == DELIVERY_LIMIT, v
            elif i % 3 == 0:
                assert deliveries[v] == 1, v
            elif i % 3 == 1:
                assert deliveries[v] == 2, (v, [d for d in member.deliveries if d.value == v])
            else:
                assert deliveries[v] == 1, v
        assert not member.errors
    finally:
        member.close()


@pytest.mark.parametrize("mode", MODES)
def test_records_whose_lock_expires_are_redelivered(cluster, topic_name, group, mode):
    cluster.create_topic(topic_name, mode, partitions=1)
    sent = values(10)
    cluster.produce(topic_name, sent, partitions=1)
    holder = ShareMember(cluster.bootstrap, group, topic_name, "holder", hold=True).start()
    try:
        assert wait_for(lambda: holder.values(), 30)  # then it never acknowledges them
        held = set(holder.values())
        started = time.monotonic()
        other = ShareMember(cluster.bootstrap, group, topic_name, "other").start()
        try:
            assert wait_for(lambda: set(other.values()) >= held, LOCK_MS / 1000 + 20)
            assert time.monotonic() - started >= LOCK_MS / 1000 * 0.8
            redelivered = [d for d in other.deliveries if d.value in held]
            assert all(d.delivery_count == 2 for d in redelivered)
        finally:
            other.close()
    finally:
        holder.close()


def _share_fetch_bytes(cluster: ShareCluster) -> Counter:
    """Consumer fetch bytes (Fetch and ShareFetch) served by every broker, by same / cross /
    unknown AZ of the client."""
    totals: Counter = Counter()
    for broker in cluster.brokers:
        for row in broker.metrics_json()["network"]["server"]:
            if row["class"] == "fetch-consumer":
                totals[az_locality(row)] += row["bytes"]
    return totals


def test_members_in_three_azs_fetch_a_diskless_topic_in_their_own_az(
        cluster, topic_name, group):
    """Digest §6 claim 19: a diskless partition is served by a broker of each member's AZ
    (Metadata names one by the ``az=`` token of its client.id), so a share group's record
    bytes do not cross AZs; only the owner's acquisition calls (internal, not fetch) do."""
    cluster.create_topic(topic_name, "diskless")
    record = b"x" * 2048
    sent = [record[:-5] + f"{i:05d}".encode() for i in range(600)]
    before = _share_fetch_bytes(cluster)
    members = [ShareMember(cluster.bootstrap, group, topic_name, f"m{i}", rack=f"az{i + 1}")
               .start() for i in range(3)]
    try:
        assert wait_for(lambda: len(_described(cluster, group).members) == 3, 30)
        for burst in range(6):
            cluster.produce(topic_name, sent[burst * 100:(burst + 1) * 100])
            time.sleep(0.2)
        assert wait_for(lambda: {v for m in members for v in m.values()} >= set(sent), 60)
    finally:
        close_all(members)
    after = _share_fetch_bytes(cluster) - before
    payload = len(sent) * len(record)
    assert after["same"] >= payload, after
    assert after["cross"] < 0.05 * payload, after


def _described(cluster: ShareCluster, group: str, timeout: float = 30.0):
    """ShareGroupDescribe of ``group`` from the broker coordinating it (every broker may say
    NOT_COORDINATOR for a while: the coordinator's partition is still without a leader)."""
    deadline = time.monotonic() + timeout
    while True:
        for broker in cluster.brokers:
            with connect(broker) as sock:
                (described,) = call(sock, ApiKey.SHARE_GROUP_DESCRIBE, 1, entity(
                    ApiKey.SHARE_GROUP_DESCRIBE, 1, "ShareGroupDescribeRequest",
                    group_ids=(group,), include_authorized_operations=False)).groups
            if described.error_code != ErrorCode.not_coordinator:
                return described
        if time.monotonic() > deadline:
            raise AssertionError(f"no broker coordinates {group}")
        time.sleep(0.2)


def _topic_id(cluster: ShareCluster, topic: str) -> uuid.UUID:
    from confluent_kafka import TopicCollection
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    kafka_uuid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
    msb = kafka_uuid.get_most_significant_bits() & (2**64 - 1)
    lsb = kafka_uuid.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


def _member_broker(cluster: ShareCluster, topic: str, mode: str) -> int:
    """The broker the member (in az1) fetches partition 0 from."""
    if mode == "diskless":
        return 0  # Metadata names a broker of the client's AZ: az1 is broker 0
    return cluster.leader_of(topic, 0)


def _owner(cluster: ShareCluster, group: str, topic: str) -> int:
    """The leader of the __share_group_state partition of (group, topic, 0)."""
    key = f"{group}:{_topic_id(cluster, topic)}:0"
    return cluster.leader_of(SHARE_GROUP_STATE_TOPIC, partition_for(key, STATE_PARTITIONS))


@pytest.mark.parametrize("killed", ["member's broker", "share coordinator"])
@pytest.mark.parametrize("mode", MODES)
def test_kill_9_loses_no_acknowledged_state(cluster, topic_name, group, mode, killed):
    cluster.create_topic(topic_name, mode, partitions=1)
    sent = values(300)
    cluster.produce(topic_name, sent, partitions=1)
    member = ShareMember(cluster.bootstrap, group, topic_name, "acker", rack="az1",
                         explicit=True, decide=lambda d: AcknowledgeType.ACCEPT).start()
    try:
        assert wait_for(lambda: len(member.accepted) >= 60, 60)
        victim = (_member_broker(cluster, topic_name, mode) if killed == "member's broker"
                  else _owner(cluster, group, topic_name))
        with member.lock:
            confirmed_before = {d.value for d in member.accepted}
            seen = len(member.deliveries)
        cluster.brokers[victim].kill()
        cluster.brokers[victim].start(timeout=90)
        # Every record is accepted, or its acknowledgement failed at the client (the broker
        # it went through died: it may have been written before).
        def answered() -> set[bytes]:
            with member.lock:
                return {d.value for d in member.accepted + member.unconfirmed}
        assert wait_for(lambda: answered() >= set(sent), 120), \
            f"{len(set(sent) - answered())} records never accepted, errors {member.errors}"
        with member.lock:
            after = [d.value for d in member.deliveries[seen:]]
        again = confirmed_before.intersection(after)
        assert not again, f"{len(again)} acknowledged records delivered again, e.g. {min(again)}"
    finally:
        member.close()


@pytest.mark.parametrize("mode", MODES)
def test_deleting_a_share_group_deletes_its_state(cluster, topic_name, group, mode):
    cluster.create_topic(topic_name, mode, partitions=1)
    sent = values(20)
    cluster.produce(topic_name, sent, partitions=1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    first = ShareMember(cluster.bootstrap, group, topic_name, "first").start()
    try:
        assert wait_for(lambda: set(first.values()) == set(sent), 60)
        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([group])[group].result(30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        first.close()
    assert wait_for(lambda: not _described(cluster, group).members, 60)
    admin.delete_consumer_groups([group])[group].result(30)
    assert _described(cluster, group).error_code == ErrorCode.group_id_not_found
    # Its acknowledgements went with it: a new member of a group of that name starts from
    # share.auto.offset.reset (earliest here), every record a first delivery again.
    second = ShareMember(cluster.bootstrap, group, topic_name, "second").start()
    try:
        assert wait_for(lambda: set(second.values()) == set(sent), 60)
        assert all(d.delivery_count == 1 for d in second.deliveries)
        assert sorted(second.values()) == sorted(sent)
    finally:
        second.close()


# --- bad input ------------------------------------------------------------------------------------

def _coordinator_socket(cluster: ShareCluster, group: str):
    from confluent_kafka.admin import AdminClient as Admin
    admin = Admin({"bootstrap.servers": cluster.bootstrap})
    # Any group operation finds the coordinator; describe creates __consumer_offsets.
    admin.describe_consumer_groups([group])[group].exception(30)
    for broker in cluster.brokers:
        with connect(broker) as sock:
            response = call(sock, ApiKey.SHARE_GROUP_HEARTBEAT, 1, entity(
                ApiKey.SHARE_GROUP_HEARTBEAT, 1, "ShareGroupHeartbeatRequest", group_id=group,
                member_id="probe", member_epoch=-1, rack_id=None, subscribed_topic_names=None))
            if response.error_code == ErrorCode.none:
                return broker
    raise AssertionError("no broker coordinates the group")


def _heartbeat(sock, group: str, member: str, epoch: int, topics=None):
    return call(sock, ApiKey.SHARE_GROUP_HEARTBEAT, 1, entity(
        ApiKey.SHARE_GROUP_HEARTBEAT, 1, "ShareGroupHeartbeatRequest", group_id=group,
        member_id=member, member_epoch=epoch, rack_id=None, subscribed_topic_names=topics))


def test_bad_share_group_input_gets_kafkas_error_codes(cluster, topic_name, group):
    cluster.create_topic(topic_name, "classic", partitions=1)
    cluster.produce(topic_name, values(5), partitions=1)
    topic_id = _topic_id(cluster, topic_name)
    coordinator = _coordinator_socket(cluster, group)
    with connect(coordinator) as sock:
        joined = _heartbeat(sock, group, "m1", 0, (topic_name,))
        assert joined.error_code == ErrorCode.none and joined.member_epoch > 0
        assert _heartbeat(sock, group, "m1", joined.member_epoch + 5).error_code == \
            ErrorCode.fenced_member_epoch
        assert _heartbeat(sock, group, "ghost", 3).error_code == ErrorCode.unknown_member_id
        assert _heartbeat(sock, group, "", 0, (topic_name,)).error_code == \
            ErrorCode.invalid_request
        # A group id this coordinator serves too (same __consumer_offsets partition).
        unknown = next(g for g in (f"no-such-group-{i}" for i in range(1000))
                       if partition_for(g, OFFSETS_PARTITIONS) == partition_for(
                           group, OFFSETS_PARTITIONS))
        described = call(sock, ApiKey.SHARE_GROUP_DESCRIBE, 1, entity(
            ApiKey.SHARE_GROUP_DESCRIBE, 1, "ShareGroupDescribeRequest",
            group_ids=(group, unknown), include_authorized_operations=False))
        ours, missing = described.groups
        assert ours.error_code == 0 and [m.member_id for m in ours.members] == ["m1"]
        assert missing.error_code == ErrorCode.group_id_not_found

        def listed(*types: str) -> list[tuple[str, str]]:
            response = call(sock, ApiKey.LIST_GROUPS, 5, entity(
                ApiKey.LIST_GROUPS, 5, "ListGroupsRequest", states_filter=(),
                types_filter=types))
            return [(g.group_id, g.group_type) for g in response.groups]
        assert (group, "share") in listed() and (group, "share") in listed("share")
        assert listed("no-such-type") == [] and (group, "share") not in listed("classic")

        # The other protocols on a share group's id: Kafka's answers.
        assert call(sock, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, entity(
            ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, "ConsumerGroupHeartbeatRequest", group_id=group,
            member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout=300_000, subscribed_topic_names=(topic_name,),
            subscribed_topic_regex=None, server_assignor=None, topic_partitions=())
        ).error_code == ErrorCode.group_id_not_found
        assert call(sock, ApiKey.JOIN_GROUP, 5, entity(
            ApiKey.JOIN_GROUP, 5, "JoinGroupRequest", group_id=group, session_timeout=10_000,
            rebalance_timeout=10_000, member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(entity(
                ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol", name="range",
                metadata=b""),))).error_code == ErrorCode.inconsistent_group_protocol

        # A classic group's id is not a share group's (Kafka: GROUP_ID_NOT_FOUND).
        classic = next(g for g in (f"classic-{i}" for i in range(1000))
                       if partition_for(g, OFFSETS_PARTITIONS) == partition_for(
                           group, OFFSETS_PARTITIONS))
        committer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": classic})
        committer.commit(offsets=[TopicPartition(topic_name, 0, 1)], asynchronous=False)
        committer.close()
        assert _heartbeat(sock, classic, "m1", 0, (topic_name,)).error_code == \
            ErrorCode.group_id_not_found
    leader = cluster.brokers[cluster.leader_of(topic_name, 0)]
    partition_id = dict(partition_index=0)

    def acknowledge(sock, epoch: int, first: int, last: int):
        batch = entity(ApiKey.SHARE_ACKNOWLEDGE, 1, "AcknowledgementBatch", first_offset=first,
                       last_offset=last, acknowledge_types=(1,))
        partition = entity(ApiKey.SHARE_ACKNOWLEDGE, 1, "AcknowledgePartition",
                           **partition_id, acknowledgement_batches=(batch,))
        topic = entity(ApiKey.SHARE_ACKNOWLEDGE, 1, "AcknowledgeTopic", topic_id=topic_id,
                       partitions=(partition,))
        return call(sock, ApiKey.SHARE_ACKNOWLEDGE, 1, entity(
            ApiKey.SHARE_ACKNOWLEDGE, 1, "ShareAcknowledgeRequest", group_id=group,
            member_id="m1", share_session_epoch=epoch, topics=(topic,)))

    with connect(leader) as sock:
        assert acknowledge(sock, 1, 0, 0).error_code == ErrorCode.share_session_not_found
        fetched = call(sock, ApiKey.SHARE_FETCH, 1, entity(
            ApiKey.SHARE_FETCH, 1, "ShareFetchRequest", group_id=group, member_id="m1",
            share_session_epoch=0, max_wait=1000, min_bytes=1, max_bytes=1 << 20,
            max_records=2, batch_size=2, topics=(entity(
                ApiKey.SHARE_FETCH, 1, "FetchTopic", topic_id=topic_id, partitions=(entity(
                    ApiKey.SHARE_FETCH, 1, "FetchPartition", **partition_id,
                    acknowledgement_batches=()),)),), forgotten_topics_data=()))
        assert fetched.error_code == 0 and fetched.responses, fetched
        (acquired,) = fetched.responses[0].partitions[0].acquired_records
        assert (acquired.first_offset, acquired.last_offset) == (0, 1)
        assert acknowledge(sock, 5, 0, 0).error_code == ErrorCode.invalid_share_session_epoch
        not_acquired = acknowledge(sock, 1, 3, 3)
        assert not_acquired.error_code == 0
        assert not_acquired.responses[0].partitions[0].error_code == \
            ErrorCode.invalid_record_state
        assert acknowledge(sock, 2, 0, 1).responses[0].partitions[0].error_code == 0

    # Share-group offsets: described as the start offset; changed only without members.
    def described_start() -> int:
        response = call(sock, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, entity(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, "DescribeShareGroupOffsetsRequest",
            groups=(entity(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0,
                           "DescribeShareGroupOffsetsRequestGroup", group_id=group, topics=(
                               entity(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0,
                                      "DescribeShareGroupOffsetsRequestTopic",
                                      topic_name=topic_name, partitions=(0,)),)),)))
        return response.groups[0].topics[0].partitions[0].start_offset

    def alter(offset: int) -> int:
        return call(sock, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, entity(
            ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, "AlterShareGroupOffsetsRequest",
            group_id=group, topics=(entity(
                ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, "AlterShareGroupOffsetsRequestTopic",
                topic_name=topic_name, partitions=(entity(
                    ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, "AlterShareGroupOffsetsRequestPartition",
                    partition_index=0, start_offset=offset),)),))).error_code

    with connect(coordinator) as sock:
        assert described_start() == 2  # offsets 0 and 1 accepted
        # m1 (again) a member: its 6 s session may have run out since it last heartbeated.
        assert _heartbeat(sock, group, "m1", 0, (topic_name,)).error_code == ErrorCode.none
        assert alter(4) == ErrorCode.non_empty_group
        assert _heartbeat(sock, group, "m1", -1).error_code == 0
        assert alter(4) == ErrorCode.none
        assert described_start() == 4
