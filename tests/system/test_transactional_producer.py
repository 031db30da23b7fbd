"""A transactional producer (confluent-kafka, librdkafka) against one broker, classic topics:
the transaction coordinator's smoke test. Commits are seen by read_committed consumers,
aborts are not, and a second producer with the same transactional id fences the first.
The broad real-client scenarios (every mode, consume-transform-produce) are elsewhere."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaException, Producer

from support.topics import create_topic

RECORDS = 5


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    return producer


def transaction(producer: Producer, topic: str, values: list[str], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def committed_values(bootstrap: str, topic: str, expected: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[str] = []
    try:
        for _ in range(60):
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is None:
                    values.append(message.value().decode())
            if len(values) >= expected:
                # One more poll: nothing aborted may follow.
                values += [m.value().decode() for m in consumer.consume(100, timeout=1)
                           if m.error() is None]
                break
    finally:
        consumer.close()
    return values


def test_commit_abort_and_fencing(broker_factory, topic_name):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, 1)
    first = transactional_producer(broker.bootstrap, f"tx-{topic_name}")
    transaction(first, topic_name, [f"c{i}" for i in range(RECORDS)], commit=True)
    transaction(first, topic_name, [f"a{i}" for i in range(RECORDS)], commit=False)
    transaction(first, topic_name, [f"d{i}" for i in range(RECORDS)], commit=True)

    # A new instance fences the first, whose open transaction is aborted.
    first.begin_transaction()
    first.produce(topic_name, b"zombie", partition=0)
    first.flush(10)
    second = transactional_producer(broker.bootstrap, f"tx-{topic_name}")
    transaction(second, topic_name, ["e0"], commit=True)
    try:
        first.commit_transaction(10)
        fenced = False
    except KafkaException as e:
        fenced = e.args[0].fatal() or "fenced" in str(e).lower()
    assert fenced

    assert committed_values(broker.bootstrap, topic_name, 2 * RECORDS + 1) == (
        [f"c{i}" for i in range(RECORDS)] + [f"d{i}" for i in range(RECORDS)] + ["e0"])
