"""Bad input to the transaction APIs gets Apache Kafka's error codes, and leaves nothing stuck:
after each case a real transactional producer (confluent-kafka) with the same transactional id
commits a transaction. Raw requests (support.raw) against the session's shared broker.

- EndTxn with no transaction open: INVALID_TXN_STATE (48);
- AddPartitionsToTxn for a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3);
- TxnOffsetCommit of a group's member with a generation the group does not have:
  ILLEGAL_GENERATION (22);
- WriteTxnMarkers on a connection that did not authenticate as a broker:
  CLUSTER_AUTHORIZATION_FAILED (31) for every partition, and no marker written.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from support.clients import consume_all
from support.raw import call, connect, entity
from support.topics import create_topic
from support.transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    list_offset,
    transaction_coordinator,
)
from support.wait import wait_until

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 27, 28
NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION = 0, 3, 22
CLUSTER_AUTHORIZATION_FAILED, INVALID_TXN_STATE = 31, 48


@pytest.fixture
def txn_id() -> str:
    return f"bad-input-{uuid.uuid4().hex[:8]}"


def init_producer_id(broker, sock, txn_id: str) -> tuple[int, int]:
    """FindCoordinator (which creates __transaction_state, as in Kafka), then InitProducerId
    for ``txn_id``, retried while the coordinator loads: (id, epoch)."""
    def attempt():
        if transaction_coordinator(broker, txn_id) < 0:
            return None
        response = call(sock, INIT_PRODUCER_ID, 4, entity(
            INIT_PRODUCER_ID, 4, "InitProducerIdRequest", transactional_id=txn_id,
            transaction_timeout=60_000))
        return (response.producer_id, response.producer_epoch) if response.error_code == 0 else None
    return wait_until(attempt, 30, interval=0.2)


def end_txn(sock, txn_id: str, producer: tuple[int, int], commit: bool) -> int:
    response = call(sock, END_TXN, 3, entity(
        END_TXN, 3, "EndTxnRequest", transactional_id=txn_id, producer_id=producer[0],
        producer_epoch=producer[1], committed=commit))
    return response.error_code


def assert_usable(bootstrap: str, txn_id: str, topic: str) -> None:
    """A real transactional producer with ``txn_id`` still commits."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(60)


def test_end_txn_without_a_transaction(shared_broker, txn_id, topic_name):
    create_topic(shared_broker.bootstrap, topic_name)
    with connect(shared_broker) as sock:
        producer = init_producer_id(shared_broker, sock, txn_id)
        assert end_txn(sock, txn_id, producer, commit=True) == INVALID_TXN_STATE
        assert end_txn(sock, txn_id, producer, commit=False) == INVALID_TXN_STATE
    assert_usable(shared_broker.bootstrap, txn_id, topic_name)


def test_add_partitions_for_an_unknown_topic(shared_broker, txn_id, topic_name):
    create_topic(shared_broker.bootstrap, topic_name)
    with connect(shared_broker) as sock:
        producer = init_producer_id(shared_broker, sock, txn_id)
        response = call(sock, ADD_PARTITIONS_TO_TXN, 3, entity(
            ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1], v3_and_below_topics=(
                entity(ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic",
                       name=f"{topic_name}-missing", partitions=(0,)),)))
        codes = {(topic.name, p.partition_index): p.partition_error_code
                 for topic in response.results_by_topic_v3_and_below
                 for p in topic.results_by_partition}
        assert codes == {(f"{topic_name}-missing", 0): UNKNOWN_TOPIC_OR_PARTITION}
        # Nothing was added, so there is no transaction to end.
        assert end_txn(sock, txn_id, producer, commit=False) == INVALID_TXN_STATE
    assert_usable(shared_broker.bootstrap, txn_id, topic_name)


def test_txn_offset_commit_with_a_wrong_generation(shared_broker, txn_id, topic_name):
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = f"group-{topic_name}"
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False})
    member.subscribe([topic_name])
    try:
        wait_until(lambda: member.poll(0.2) is None and member.assignment(), 30)
        with connect(shared_broker) as sock:
            producer = init_producer_id(shared_broker, sock, txn_id)
            added = call(sock, ADD_OFFSETS_TO_TXN, 3, entity(
                ADD_OFFSETS_TO_TXN, 3, "AddOffsetsToTxnRequest", transactional_id=txn_id,
                producer_id=producer[0], producer_epoch=producer[1], group_id=group))
            assert added.error_code == NONE
            response = call(sock, TXN_OFFSET_COMMIT, 3, entity(
                TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequest", transactional_id=txn_id,
                group_id=group, producer_id=producer[0], producer_epoch=producer[1],
                generation_id=999, member_id=member.memberid(), topics=(entity(
                    TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestTopic", name=topic_name,
                    partitions=(entity(TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestPartition",
                                       partition_index=0, committed_offset=1,
                                       committed_metadata=None),)),)))
            assert [p.error_code for t in response.topics for p in t.partitions] == [
                ILLEGAL_GENERATION]
            assert end_txn(sock, txn_id, producer, commit=False) == NONE
    finally:
        member.close()
    assert_usable(bootstrap, txn_id, topic_name)


def test_write_txn_markers_from_a_client(shared_broker, topic_name):
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic_name, b"plain", partition=0)
    assert producer.flush(60) == 0
    with connect(shared_broker) as sock:
        response = call(sock, WRITE_TXN_MARKERS, 1, entity(
            WRITE_TXN_MARKERS, 1, "WriteTxnMarkersRequest", markers=tuple(
                entity(WRITE_TXN_MARKERS, 1, "WritableTxnMarker", producer_id=producer_id,
                       producer_epoch=0, transaction_result=commit, coordinator_epoch=0,
                       topics=(entity(WRITE_TXN_MARKERS, 1, "WritableTxnMarkerTopic",
                                      name=topic_name, partition_indexes=(0,)),))
                for producer_id, commit in ((0, True), (1, False)))))
    codes = [p.error_code for marker in response.markers for topic in marker.topics
             for p in topic.partitions]
    assert codes == [CLUSTER_AUTHORIZATION_FAILED] * 2
    # No marker was written: a marker would have taken an offset.
    assert (list_offset(bootstrap, topic_name, READ_COMMITTED),
            list_offset(bootstrap, topic_name, READ_UNCOMMITTED)) == (1, 1)
    assert consume_all(bootstrap, topic_name, 1,
                       config={"isolation.level": READ_COMMITTED}) == [b"plain"]
