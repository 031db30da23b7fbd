"""Bad group requests get Kafka's error codes, and the group keeps working for a real client.

Requests are raw frames (protocol.framing and kio entities) so each error can be provoked
on purpose; a real consumer (kafka-python) then uses the same group.
"""

from __future__ import annotations

import dataclasses
import socket
import struct

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import decode_response, encode_request
from support.groups import assert_exactly_once, names, produce, python_member, wait_for_values
from support.topics import create_topic
from support.wait import wait_until

SESSION_MS = 10_000
ADD_TOPIC = vars(load_payload_module(ApiKey.ADD_PARTITIONS_TO_TXN, 3, EntityType.request))[
    "AddPartitionsToTxnTopic"]


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0 for one topic: version 0, [topic], null user data."""
    raw = topic.encode()
    return struct.pack(">hih", 0, 1, len(raw)) + raw + struct.pack(">i", -1)


class RawClient:
    """Sends one request at a time and returns the decoded response."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: ApiKey, version: int, **fields):
        module = load_payload_module(api_key, version, EntityType.request)
        request_type = next(c for name, c in vars(module).items()
                            if name.endswith("Request") and isinstance(c, type))
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "raw-client",
                                         make(request_type, **fields)))
        size = struct.unpack(">i", self._read(4))[0]
        correlation_id, body = decode_response(self._read(size), api_key, version)
        assert correlation_id == self.correlation_id
        return body

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "broker closed the connection"
            data += chunk
        return data


def entity(api_key: ApiKey, version: int, entity_name: str, **fields):
    return make(getattr(load_payload_module(api_key, version, EntityType.request), entity_name),
                **fields)


def join(client: RawClient, group: str, member_id: str = "", *, protocol_type="consumer",
         protocols=None, topic="t", instance_id=None, session_ms=SESSION_MS):
    if protocols is None:
        protocols = [("range", subscription(topic))]
    return client.call(ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout=session_ms,
                       rebalance_timeout=SESSION_MS, member_id=member_id,
                       group_instance_id=instance_id, protocol_type=protocol_type,
                       protocols=tuple(entity(ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol",
                                              name=n, metadata=m) for n, m in protocols))


def join_as_new_member(client: RawClient, group: str, **kwargs):
    first = join(client, group, **kwargs)
    assert first.error_code == ErrorCode.member_id_required
    return join(client, group, first.member_id, **kwargs)


def sync(client: RawClient, group: str, joined, assignment: bytes = b""):
    return client.call(ApiKey.SYNC_GROUP, 3, group_id=group, generation_id=joined.generation_id,
                       member_id=joined.member_id, group_instance_id=None,
                       assignments=(entity(ApiKey.SYNC_GROUP, 3, "SyncGroupRequestAssignment",
                                           member_id=joined.member_id, assignment=assignment),))


def heartbeat(client: RawClient, group: str, generation: int, member_id: str,
              instance_id: str | None = None) -> ErrorCode:
    return client.call(ApiKey.HEARTBEAT, 3, group_id=group, generation_id=generation,
                       member_id=member_id, group_instance_id=instance_id).error_code


def commit(client: RawClient, group: str, generation: int, member_id: str,
           offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], ErrorCode]:
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(entity(
            ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestPartition", partition_index=partition,
            committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
    response = client.call(ApiKey.OFFSET_COMMIT, 8, group_id=group,
                           generation_id_or_member_epoch=generation, member_id=member_id,
                           group_instance_id=None, topics=tuple(
                               entity(ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestTopic",
                                      name=t, partitions=tuple(ps)) for t, ps in topics.items()))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def describe(client: RawClient, group: str):
    [described] = client.call(ApiKey.DESCRIBE_GROUPS, 5, groups=(group,),
                              include_authorized_operations=False).groups
    return described


@pytest.fixture
def broker_and_client(broker_factory):
    broker = broker_factory()
    client = RawClient(broker.port)
    # As a real consumer does first: this creates __consumer_offsets.
    client.call(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=("any",))
    yield broker, client
    client.close()


def test_bad_requests_get_kafka_error_codes(broker_and_client, topic_name, tmp_path):
    broker, client = broker_and_client
    group = f"group-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, range(10), partitions=1)

    # A group's first member must name a protocol type and at least one protocol.
    assert join(client, group, protocol_type="").error_code == ErrorCode.inconsistent_group_protocol
    assert join(client, group, protocols=[]).error_code == ErrorCode.inconsistent_group_protocol
    assert join(client, "").error_code == ErrorCode.invalid_group_id
    assert join(client, group, session_ms=100).error_code == ErrorCode.invalid_session_timeout
    assert join(client, group, "made-up-id").error_code == ErrorCode.unknown_member_id

    joined = join_as_new_member(client, group, topic=topic_name)
    assert (joined.error_code, joined.generation_id, joined.leader) == (
        ErrorCode.none, 1, joined.member_id)
    assert sync(client, group, joined).error_code == ErrorCode.none
    generation, member_id = joined.generation_id, joined.member_id

    # Another member must speak the group's protocol type and share a protocol with it.
    other = RawClient(broker.port)
    try:
        assert join(other, group, protocol_type="connect").error_code == \
            ErrorCode.inconsistent_group_protocol
        assert join(other, group, protocols=[("sticky", b"")]).error_code == \
            ErrorCode.inconsistent_group_protocol
    finally:
        other.close()

    assert heartbeat(client, group, generation - 1, member_id) == ErrorCode.illegal_generation
    assert heartbeat(client, group, generation, "made-up-id") == ErrorCode.unknown_member_id
    assert sync(client, group, dataclasses.replace(joined, generation_id=9)).error_code == \
        ErrorCode.illegal_generation
    assert commit(client, group, generation, member_id, {("no-such-topic", 0): 1,
                                                         (topic_name, 7): 1,
                                                         (topic_name, 0): 5}) == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (topic_name, 7): ErrorCode.unknown_topic_or_partition,
        (topic_name, 0): ErrorCode.none}
    assert commit(client, group, generation + 1, member_id, {(topic_name, 0): 9}) == {
        (topic_name, 0): ErrorCode.illegal_generation}
    assert commit(client, group, generation, "made-up-id", {(topic_name, 0): 9}) == {
        (topic_name, 0): ErrorCode.unknown_member_id}
    assert heartbeat(client, group, generation, member_id) == ErrorCode.none
    assert describe(client, group).group_state == "Stable"

    left = client.call(ApiKey.LEAVE_GROUP, 3, group_id=group, members=(
        entity(ApiKey.LEAVE_GROUP, 3, "MemberIdentity", member_id=member_id,
               group_instance_id=None),))
    assert [m.error_code for m in left.members] == [ErrorCode.none]

    # The group still works, and the offset committed above is where a real consumer starts.
    member = python_member("kafka-python", broker.bootstrap, topic_name, group, tmp_path)("real")
    try:
        wait_for_values([member], names(range(5, 10)))
        member.stop()
    finally:
        member.kill()
    assert_exactly_once([member], names(range(5, 10)))


def test_transaction_requests_get_kafka_error_codes(broker_and_client, topic_name):
    broker, client = broker_and_client
    create_topic(broker.bootstrap, topic_name, 1)
    [coordinator] = client.call(ApiKey.FIND_COORDINATOR, 4, key_type=1,
                                coordinator_keys=("txn-1",)).coordinators
    assert coordinator.error_code == ErrorCode.none and coordinator.port == broker.port

    def init(**fields):
        fields = {"transactional_id": "txn-1", "transaction_timeout": 60_000,
                  "producer_id": -1, "producer_epoch": -1, **fields}
        # The first requests wait for __transaction_state to be led and loaded here.
        return wait_until(lambda: retriable(client.call(ApiKey.INIT_PRODUCER_ID, 4, **fields)),
                          timeout=30)

    def retriable(response):
        return None if response.error_code in (ErrorCode.coordinator_load_in_progress,
                                               ErrorCode.not_coordinator,
                                               ErrorCode.coordinator_not_available) else response

    assert init(transaction_timeout=900_001).error_code == ErrorCode.invalid_transaction_timeout
    first = init()
    assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
    producer = dict(producer_id=first.producer_id, producer_epoch=0)

    def add(version: int, *topics, epoch: int = 0):
        return {(t.name, r.partition_index): r.partition_error_code
                for t in client.call(
                    ApiKey.ADD_PARTITIONS_TO_TXN, version,
                    v3_and_below_transactional_id="txn-1",
                    v3_and_below_producer_id=first.producer_id,
                    v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
                        make(ADD_TOPIC, name=name, partitions=(0,)) for name in topics)
                ).results_by_topic_v3_and_below
                for r in t.results_by_partition}

    def end(version: int, commit: bool, epoch: int = 0) -> ErrorCode:
        return client.call(ApiKey.END_TXN, version, transactional_id="txn-1",
                           producer_id=first.producer_id, producer_epoch=epoch,
                           committed=commit).error_code

    assert end(3, True) == ErrorCode.invalid_txn_state  # no transaction open
    assert add(3, topic_name, "no-such-topic") == {
        (topic_name, 0): ErrorCode.operation_not_attempted,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition}
    assert add(3, topic_name, epoch=5) == {(topic_name, 0): ErrorCode.producer_fenced}
    assert add(1, topic_name, epoch=5) == {(topic_name, 0): ErrorCode.invalid_producer_epoch}
    assert add(3, topic_name) == {(topic_name, 0): ErrorCode.none}
    offsets = client.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id="txn-1",
                          group_id="g", **producer)
    assert offsets.error_code == ErrorCode.none
    [described] = client.call(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                              transactional_ids=("txn-1",)).transaction_states
    assert described.transaction_state == "Ongoing"
    assert {t.topic for t in described.topics} == {topic_name, "__consumer_offsets"}
    listed = client.call(ApiKey.LIST_TRANSACTIONS, 1, state_filters=("Ongoing", "Bogus"),
                         producer_id_filters=(), duration_filter=-1)
    assert listed.unknown_state_filters == ("Bogus",)
    assert [t.transactional_id for t in listed.transaction_states] == ["txn-1"]
    assert end(3, True, epoch=1) == ErrorCode.producer_fenced
    assert end(1, True, epoch=1) == ErrorCode.invalid_producer_epoch
    assert end(3, False) == ErrorCode.none
    idempotent = client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None,
                             transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
    assert (idempotent.error_code, idempotent.producer_epoch) == (ErrorCode.none, 0)


def test_static_member_restart_fences_the_old_instance(broker_and_client, topic_name):
    broker, client = broker_and_client
    group = f"group-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 1)
    first = join(client, group, topic=topic_name, instance_id="instance-1")
    assert first.error_code == ErrorCode.none
    assert sync(client, group, first, b"assignment").error_code == ErrorCode.none
    again = join(client, group, topic=topic_name, instance_id="instance-1")
    assert (again.error_code, again.generation_id) == (ErrorCode.none, first.generation_id)
    assert heartbeat(client, group, first.generation_id, first.member_id, "instance-1") == \
        ErrorCode.fenced_instance_id
    assert sync(client, group, again).assignment == b"assignment"


def test_group_and_offsets_survive_a_broker_sigkill(broker_and_client, topic_name):
    broker, client = broker_and_client
    group = f"group-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 1)
    joined = join_as_new_member(client, group, topic=topic_name)
    assert sync(client, group, joined, b"mine").error_code == ErrorCode.none
    assert commit(client, group, joined.generation_id, joined.member_id,
                  {(topic_name, 0): 42}) == {(topic_name, 0): ErrorCode.none}
    client.close()

    broker.kill()
    broker.start()
    client = RawClient(broker.port)
    try:
        described = describe(client, group)
        assert (described.group_state, [m.member_id for m in described.members]) == (
            "Stable", [joined.member_id])
        assert heartbeat(client, group, joined.generation_id, joined.member_id) == ErrorCode.none
        assert sync(client, group, joined).assignment == b"mine"
        fetched = client.call(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=False,
                              topics=(entity(ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic",
                                             name=topic_name, partition_indexes=(0,)),))
        assert fetched.topics[0].partitions[0].committed_offset == 42
    finally:
        client.close()


def txn_commit(client: RawClient, group: str, offsets: dict[tuple[str, int], int], *,
               version: int = 3, producer_epoch: int = 0, generation: int = -1,
               member_id: str = "", instance_id: str | None = None,
               metadata: str = "") -> dict[tuple[str, int], ErrorCode]:
    """TxnOffsetCommit of producer 1000 (no AddOffsetsToTxn: the group coordinator does not
    ask the transaction coordinator, as Kafka's before KIP-890's verification)."""
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(entity(
            ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestPartition",
            partition_index=partition, committed_offset=offset, committed_metadata=metadata))
    membership = {"generation_id": generation, "member_id": member_id,
                  "group_instance_id": instance_id} if version >= 3 else {}
    response = client.call(
        ApiKey.TXN_OFFSET_COMMIT, version, transactional_id="txn", group_id=group,
        producer_id=1000, producer_epoch=producer_epoch, **membership, topics=tuple(
            entity(ApiKey.TXN_OFFSET_COMMIT, version, "TxnOffsetCommitRequestTopic", name=t,
                   partitions=tuple(ps)) for t, ps in topics.items()))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def fetch_offset(client: RawClient, group: str, topic: str, *, require_stable: bool):
    response = client.call(ApiKey.OFFSET_FETCH, 7, group_id=group, require_stable=require_stable,
                           topics=(entity(ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic",
                                          name=topic, partition_indexes=(0,)),))
    [partition] = response.topics[0].partitions
    return partition.error_code, partition.committed_offset


def test_transactional_offset_commits_get_kafka_error_codes(broker_and_client, topic_name):
    broker, client = broker_and_client
    group = f"group-{topic_name}"
    create_topic(broker.bootstrap, topic_name, 1)
    first = join(client, group, topic=topic_name, instance_id="instance-1")
    assert sync(client, group, first).error_code == ErrorCode.none
    again = join(client, group, topic=topic_name, instance_id="instance-1")
    generation, member_id = again.generation_id, again.member_id
    assert commit(client, group, generation, member_id, {(topic_name, 0): 3}) == {
        (topic_name, 0): ErrorCode.none}

    assert txn_commit(client, group, {("no-such-topic", 0): 1, (topic_name, 0): 1},
                      metadata="x" * 5000) == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (topic_name, 0): ErrorCode.offset_metadata_too_large}
    assert txn_commit(client, "", {(topic_name, 0): 1}) == {
        (topic_name, 0): ErrorCode.invalid_group_id}
    membership_errors = {
        ErrorCode.illegal_generation: {"generation": generation + 1, "member_id": member_id},
        ErrorCode.unknown_member_id: {"generation": generation, "member_id": "made-up-id"},
        ErrorCode.fenced_instance_id: {"generation": generation, "member_id": first.member_id,
                                       "instance_id": "instance-1"},
    }
    for error, membership in membership_errors.items():
        assert txn_commit(client, group, {(topic_name, 0): 1}, **membership) == {
            (topic_name, 0): error}
    # Nothing is pending yet.
    assert fetch_offset(client, group, topic_name, require_stable=True) == (ErrorCode.none, 3)

    assert txn_commit(client, group, {(topic_name, 0): 5}, producer_epoch=1,
                      generation=generation, member_id=member_id) == {
        (topic_name, 0): ErrorCode.none}
    # v0 carries no membership: accepted from a stable group, as Kafka does.
    assert txn_commit(client, group, {(topic_name, 0): 6}, version=0, producer_epoch=1) == {
        (topic_name, 0): ErrorCode.none}
    assert txn_commit(client, group, {(topic_name, 0): 7}) == {
        (topic_name, 0): ErrorCode.invalid_producer_epoch}
    assert fetch_offset(client, group, topic_name, require_stable=True) == (
        ErrorCode.unstable_offset_commit, -1)
    assert fetch_offset(client, group, topic_name, require_stable=False) == (ErrorCode.none, 3)
    client.close()

    # The pending offsets are in __consumer_offsets: they survive a crash, still pending.
    broker.kill()
    broker.start()
    client = RawClient(broker.port)
    try:
        assert fetch_offset(client, group, topic_name, require_stable=True) == (
            ErrorCode.unstable_offset_commit, -1)
        assert fetch_offset(client, group, topic_name, require_stable=False) == (
            ErrorCode.none, 3)
    finally:
        client.close()
