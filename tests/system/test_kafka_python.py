"""kafka-python, unmodified: create a topic, produce 10,000 records per codec, consume them back,
list offsets by timestamp; in every storage mode (support.storage_modes)."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from support.dataset import (CREATE_TIME, Consumed, check_consumed, check_timestamp_answer,
                             make_records, timestamp_queries)

CLIENT = "kafka-python"


def test_kafka_python_round_trip(storage_mode, topic_name, compression):
    bootstrap = storage_mode.bootstrap
    records = make_records(storage_mode.records)
    n = len(records)
    storage_mode.watch(topic_name)

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kipper-kafka-python-admin")
    try:
        admin.create_topics({topic_name: {"num_partitions": 1,
                                         "replication_factor": storage_mode.replication_factor}},
                            wait_for_metadata=True)
    finally:
        admin.close()

    # The client's defaults (idempotent, acks=all) plus batching-friendly settings.
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kipper-kafka-python",
                             compression_type=None if compression == "none" else compression,
                             linger_ms=20, batch_size=256 * 1024, allow_auto_create_topics=False)
    try:
        futures = [producer.send(topic_name, key=r.key, value=r.value, headers=list(r.headers),
                                 partition=0, timestamp_ms=r.timestamp) for r in records]
        producer.flush(timeout=60)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    assert [m.offset for m in metadata] == list(range(n))
    assert all(m.timestamp == r.timestamp for m, r in zip(metadata, records))

    tp = TopicPartition(topic_name, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kipper-kafka-python",
                             group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=200,
                             max_poll_records=5000, allow_auto_create_topics=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Consumed] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(Consumed(
                    offset=m.offset, key=m.key, value=m.value,
                    headers=tuple((k, v) for k, v in (m.headers or [])),
                    timestamp=m.timestamp,
                    timestamp_type=CREATE_TIME if m.timestamp_type == 0 else f"type {m.timestamp_type}",
                ) for m in batch)
        check_consumed(records, got)

        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: n}
        for q in timestamp_queries([r.timestamp for r in records]):
            answer = consumer.offsets_for_times({tp: q.timestamp})[tp]
            check_timestamp_answer(q, answer)
    finally:
        consumer.close()

    storage_mode.assert_stored(topic_name, compression, n)
