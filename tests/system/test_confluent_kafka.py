"""confluent-kafka (librdkafka), unmodified: create a topic, produce 10,000 records per codec,
consume them back, list offsets by timestamp; in every storage mode (support.storage_modes)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaException,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from support.dataset import CREATE_TIME, Consumed, check_consumed, make_records, timestamp_queries

CLIENT = "confluent-kafka"


def test_confluent_kafka_round_trip(storage_mode, topic_name, compression):
    bootstrap = storage_mode.bootstrap
    records = make_records(storage_mode.records)
    n = len(records)
    storage_mode.watch(topic_name)
    common = {"bootstrap.servers": bootstrap, "client.id": "kipper-confluent-kafka",
              "broker.address.family": "v4"}

    admin = AdminClient(common)
    futures = admin.create_topics([NewTopic(topic_name, num_partitions=1,
                                           replication_factor=storage_mode.replication_factor)],
                                  operation_timeout=30, request_timeout=30)
    futures[topic_name].result(timeout=30)

    producer = Producer({**common, "compression.type": compression, "linger.ms": 20,
                         "batch.size": 1_000_000, "acks": "all", "enable.idempotence": True})
    delivered, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.offset(), msg.timestamp()))

    for r in records:
        producer.produce(topic_name, value=r.value, key=r.key, partition=0,
                         headers=list(r.headers), timestamp=r.timestamp, on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0 and not errors, f"{remaining} undelivered, errors: {errors[:5]}"
    assert [offset for offset, _ in delivered] == list(range(n))

    consumer = Consumer({**common, "group.id": f"kipper-confluent-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 200, "enable.partition.eof": False})
    try:
        tp = TopicPartition(topic_name, 0)
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got: list[Consumed] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=5000, timeout=1.0):
                if m.error() is not None:
                    raise KafkaException(m.error())
                ts_type, ts = m.timestamp()
                got.append(Consumed(
                    offset=m.offset(), key=m.key(), value=m.value(),
                    headers=tuple(m.headers() or ()), timestamp=ts,
                    timestamp_type=CREATE_TIME if ts_type == TIMESTAMP_CREATE_TIME else f"type {ts_type}",
                ))
        check_consumed(records, got)

        assert consumer.get_watermark_offsets(tp, timeout=10, cached=False) == (0, n)
        for q in timestamp_queries([r.timestamp for r in records]):
            [answer] = consumer.offsets_for_times([TopicPartition(topic_name, 0, q.timestamp)],
                                                  timeout=10)
            assert answer.error is None, f"offsets_for_times({q.timestamp}): {answer.error}"
            expected = -1 if q.offset is None else q.offset
            assert answer.offset == expected, (
                f"offsets_for_times({q.timestamp}) = {answer.offset}, expected {expected}")
    finally:
        consumer.close()

    # The admin API's ListOffsets: earliest, latest, and by timestamp (with the record timestamp).
    q = timestamp_queries([r.timestamp for r in records])[0]
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "ts": OffsetSpec.for_timestamp(q.timestamp)}
    answers = {}
    for name, spec in specs.items():
        tp = TopicPartition(topic_name, 0)
        answers[name] = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(timeout=10)
    assert answers["earliest"].offset == 0
    assert answers["latest"].offset == n
    assert (answers["ts"].offset, answers["ts"].timestamp) == (q.offset, q.record_timestamp)

    storage_mode.assert_stored(topic_name, compression, n)
