"""Transaction markers written by WriteTxnMarkers end transactions in every storage mode:
read_committed consumers (confluent-kafka, kafka-python) see committed records only, stop
at the last stable offset while a transaction is open, and read_uncommitted ones see
everything; DescribeProducers shows where a producer's open transaction starts. The markers
are sent raw, as a transaction coordinator sends them, so this tests the partitions' side
alone (the coordinator's tests drive whole transactions)."""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from support.batches import build_batch_now as build_batch
from support.raw import call, connect, entity, open_transactions, prove_broker
from support.topics import create_topic


PRODUCE_VERSION, MARKERS_VERSION, INIT_VERSION, LIST_OFFSETS_VERSION = 9, 1, 4, 7
READ_COMMITTED, READ_UNCOMMITTED = 1, 0


def leader(bootstrap: str, topic: str) -> SimpleNamespace:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return SimpleNamespace(port=metadata.brokers[metadata.topics[topic].partitions[0].leader].port)


def init_producer_id(sock) -> tuple[int, int]:
    response = call(sock, ApiKey.INIT_PRODUCER_ID, INIT_VERSION, entity(
        ApiKey.INIT_PRODUCER_ID, INIT_VERSION, "InitProducerIdRequest", transactional_id=None,
        transaction_timeout=60_000, producer_id=-1, producer_epoch=-1))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch


def produce(sock, topic: str, records) -> tuple[ErrorCode, int]:
    v = PRODUCE_VERSION
    response = call(sock, ApiKey.PRODUCE, v, entity(
        ApiKey.PRODUCE, v, "ProduceRequest", transactional_id="marker-test", acks=-1,
        timeout=10_000, topic_data=(entity(ApiKey.PRODUCE, v, "TopicProduceData", name=topic,
                                           partition_data=(entity(
                                               ApiKey.PRODUCE, v, "PartitionProduceData",
                                               index=0, records=bytes(records)),)),)))
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def write_marker(sock, topic: str, producer: tuple[int, int], commit: bool) -> ErrorCode:
    v = MARKERS_VERSION
    response = call(sock, ApiKey.WRITE_TXN_MARKERS, v, entity(
        ApiKey.WRITE_TXN_MARKERS, v, "WriteTxnMarkersRequest", markers=(entity(
            ApiKey.WRITE_TXN_MARKERS, v, "WritableTxnMarker", producer_id=producer[0],
            producer_epoch=producer[1], transaction_result=commit, coordinator_epoch=0,
            topics=(entity(ApiKey.WRITE_TXN_MARKERS, v, "WritableTxnMarkerTopic", name=topic,
                           partition_indexes=(0,)),)),)))
    return response.markers[0].topics[0].partitions[0].error_code


def end_offset(sock, topic: str, isolation: int) -> int:
    v = LIST_OFFSETS_VERSION
    response = call(sock, ApiKey.LIST_OFFSETS, v, entity(
        ApiKey.LIST_OFFSETS, v, "ListOffsetsRequest", replica_id=-1, isolation_level=isolation,
        topics=(entity(ApiKey.LIST_OFFSETS, v, "ListOffsetsTopic", name=topic, partitions=(
            entity(ApiKey.LIST_OFFSETS, v, "ListOffsetsPartition", partition_index=0,
                   current_leader_epoch=-1, timestamp=-1),)),)))
    return response.topics[0].partitions[0].offset


def confluent_values(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(60):
            values += [m.value() for m in consumer.consume(100, 0.5) if m.error() is None]
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def kafka_python_values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    partition = KafkaTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    try:
        return [record.value for record in consumer]
    finally:
        consumer.close()


def test_markers_decide_what_read_committed_consumers_see(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    with connect(leader(bootstrap, topic_name)) as sock:
        prove_broker(sock)
        producer = init_producer_id(sock)
        committed = [b"c0", b"c1", b"c2"]
        aborted = [b"a0", b"a1"]
        assert produce(sock, topic_name, build_batch(
            committed, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
            transactional=True)) == (ErrorCode.none, 0)
        assert end_offset(sock, topic_name, READ_COMMITTED) == 0  # open transaction
        assert end_offset(sock, topic_name, READ_UNCOMMITTED) == 3
        assert write_marker(sock, topic_name, producer, commit=True) == ErrorCode.none
        assert end_offset(sock, topic_name, READ_COMMITTED) == 4  # past the marker
        assert produce(sock, topic_name, build_batch(
            aborted, producer_id=producer[0], producer_epoch=producer[1], base_sequence=3,
            transactional=True)) == (ErrorCode.none, 4)
        assert end_offset(sock, topic_name, READ_COMMITTED) == 4
        assert write_marker(sock, topic_name, producer, commit=False) == ErrorCode.none
        assert end_offset(sock, topic_name, READ_COMMITTED) == 7
        assert open_transactions(sock, topic_name) == {producer[0]: -1}
        # A non-transactional batch of the producer after its transactions: accepted.
        assert produce(sock, topic_name, build_batch(
            [b"after"], producer_id=producer[0], producer_epoch=producer[1], base_sequence=5)
                       ) == (ErrorCode.none, 7)

    everything = committed + aborted + [b"after"]
    assert confluent_values(bootstrap, topic_name, "read_committed", 4) == committed + [b"after"]
    assert confluent_values(bootstrap, topic_name, "read_uncommitted", 6) == everything
    assert kafka_python_values(bootstrap, topic_name, "read_committed") == committed + [b"after"]
    assert kafka_python_values(bootstrap, topic_name, "read_uncommitted") == everything


def test_markers_from_a_client_are_refused_and_not_written(storage_mode, topic_name):
    bootstrap = storage_mode.bootstrap
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)
    with connect(leader(bootstrap, topic_name)) as sock:
        producer = init_producer_id(sock)
        assert produce(sock, topic_name, build_batch(
            [b"open"], producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
            transactional=True)) == (ErrorCode.none, 0)
        assert write_marker(sock, topic_name, producer, commit=True) == \
            ErrorCode.cluster_authorization_failed
        assert end_offset(sock, topic_name, READ_UNCOMMITTED) == 1
        assert end_offset(sock, topic_name, READ_COMMITTED) == 0
        assert open_transactions(sock, topic_name) == {producer[0]: 0}
