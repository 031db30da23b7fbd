"""aiokafka, unmodified: create a topic, produce 10,000 records per codec, consume them back,
list offsets by timestamp; in every storage mode (support.storage_modes)."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from support.dataset import (CREATE_TIME, Consumed, check_consumed, check_timestamp_answer,
                             make_records, timestamp_queries)

CLIENT = "aiokafka"


async def test_aiokafka_round_trip(storage_mode, topic_name, compression):
    bootstrap = storage_mode.bootstrap
    records = make_records(storage_mode.records)
    n = len(records)
    storage_mode.watch(topic_name)

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kipper-aiokafka-admin")
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(topic_name, 1, storage_mode.replication_factor)])
        errors = [(t[0], t[1]) for t in response.topic_errors if t[1] != 0]
        assert not errors, f"CreateTopics errors: {errors}"
    finally:
        await admin.close()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="kipper-aiokafka",
                                compression_type=None if compression == "none" else compression,
                                linger_ms=20, max_batch_size=256 * 1024, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic_name, key=r.key, value=r.value, partition=0,
                                       timestamp_ms=r.timestamp, headers=list(r.headers))
                   for r in records]
        metadata = await asyncio.wait_for(asyncio.gather(*futures), 60)
    finally:
        await producer.stop()
    assert [m.offset for m in metadata] == list(range(n))

    tp = TopicPartition(topic_name, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id="kipper-aiokafka",
                                group_id=None, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=200)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[Consumed] = []
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            batches = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for batch in batches.values():
                got.extend(Consumed(
                    offset=m.offset, key=m.key, value=m.value,
                    headers=tuple((k, v) for k, v in (m.headers or ())),
                    timestamp=m.timestamp,
                    timestamp_type=CREATE_TIME if m.timestamp_type == 0 else f"type {m.timestamp_type}",
                ) for m in batch)
        check_consumed(records, got)

        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: n}
        for q in timestamp_queries([r.timestamp for r in records]):
            answer = (await consumer.offsets_for_times({tp: q.timestamp}))[tp]
            check_timestamp_answer(q, answer)
    finally:
        await consumer.stop()

    storage_mode.assert_stored(topic_name, compression, n)
