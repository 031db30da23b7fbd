"""Transaction protocol version 2 (KIP-890 part 2) against one broker, classic topics.

No client here speaks version 2, so a raw driver (support.tv2_client) does what Kafka's Java
client does under it: no AddPartitionsToTxn nor AddOffsetsToTxn (the partition leader and
the group coordinator add them), and EndTxn v5 hands back the bumped epoch. read_committed
confluent-kafka consumers judge what was committed; a confluent-kafka (version 1) producer
runs transactions on the same broker meanwhile; with ``transaction_version = 1`` the broker
finalizes no version 2, and the driver falls back to version 1 as the Java client would.
"""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from support.clients import consume_all
from support.raw import connect
from support.topics import create_topic
from support.tv2_client import RawTransactionalProducer, negotiate

READ_COMMITTED = {"isolation.level": "read_committed"}


def values(prefix: str, count: int = 3) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


def committed_offset(bootstrap: str, group_id: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                         "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def test_version_2_transactions_bump_the_epoch_and_commit_or_abort(broker_factory,
                                                                  topic_name) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, 2)
    v1 = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"v1-{topic_name}"})
    v1.init_transactions(30)
    with connect(broker, timeout=40) as sock:
        producer = RawTransactionalProducer(sock, f"v2-{topic_name}")
        assert producer.versions.transaction_v2
        producer.init()
        epochs = [producer.producer_epoch]
        for prefix, commit in (("c", True), ("a", False), ("d", True)):
            producer.send(topic_name, 0, values(prefix))
            producer.send(topic_name, 1, values(prefix))  # a second partition, added alike
            # A version 1 transaction of another producer, on the same partition meanwhile.
            v1.begin_transaction()
            v1.produce(topic_name, f"v1-{prefix}".encode(), partition=0)
            v1.commit_transaction(30) if commit else v1.abort_transaction(30)
            producer.commit() if commit else producer.abort()
            epochs.append(producer.producer_epoch)
    assert epochs == [0, 1, 2, 3]
    got = consume_all(broker.bootstrap, topic_name, 8, config=READ_COMMITTED)
    assert sorted(got) == sorted(values("c") + values("d") + [b"v1-c", b"v1-d"])


def test_version_2_offsets_are_visible_only_once_committed(broker_factory, topic_name) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    with connect(broker, timeout=40) as sock:
        producer = RawTransactionalProducer(sock, f"v2-{topic_name}")
        producer.init()
        producer.send(topic_name, 0, values("x"))
        producer.send_offsets(group, {(topic_name, 0): 5})
        producer.abort()
        assert committed_offset(broker.bootstrap, group, topic_name) < 0
        producer.send_offsets(group, {(topic_name, 0): 7})  # offsets alone in a transaction
        producer.commit()
    assert committed_offset(broker.bootstrap, group, topic_name) == 7


def test_transaction_version_1_keeps_clients_on_version_1(broker_factory, topic_name,
                                                          tmp_path) -> None:
    config = tmp_path / "tv1.toml"
    config.write_text("transaction_version = 1\n")
    broker = broker_factory("--config", str(config))
    create_topic(broker.bootstrap, topic_name, 1)
    with connect(broker, timeout=40) as sock:
        versions = negotiate(sock)
        assert not versions.transaction_v2
        producer = RawTransactionalProducer(sock, f"v1-{topic_name}", versions)
        producer.init()
        producer.send(topic_name, 0, values("c"))
        producer.send_offsets(f"g-{topic_name}", {(topic_name, 0): 3})
        producer.commit()
        producer.send(topic_name, 0, values("a"))
        producer.abort()
        assert producer.producer_epoch == 0  # version 1 keeps the epoch
    assert consume_all(broker.bootstrap, topic_name, 3, config=READ_COMMITTED) == values("c")
    assert committed_offset(broker.bootstrap, f"g-{topic_name}", topic_name) == 3
