"""The five real clients produce (acks=all) and consume an RF=3 active-tiered topic on three
brokers in three racks; every replica ends up with every record, and the followers got them
from object storage (downloads), not from the leader."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KpTopicPartition

from clients.dataset import (CREATE_TIME, Consumed, Record, base_timestamp, check_consumed,
                             make_records, segment_batches)
from clients.test_kcat import kcat

from .helpers import PATIENT_DOWNLOADS, TieredCluster, create_tiered_topic

N = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    started = TieredCluster(tmp_path_factory.mktemp("tiered-clients"), s3_endpoint,
                            PATIENT_DOWNLOADS).start()
    yield started
    started.stop()


@pytest.fixture
def tiered_topic(cluster, topic_name):
    create_tiered_topic(cluster, topic_name)
    before = cluster.tiered_counters()
    yield topic_name
    # Every replica holds every record; the followers downloaded them.
    for broker in cluster.brokers:
        stored = sum(count for _, count, _ in segment_batches(broker.data_dir, topic_name))
        assert stored == N, (broker.node_id, stored)
    grown = cluster.tiered_counters() - before
    assert grown["downloads"] > 0, grown
    assert grown["download_bytes"] >= 2 * grown["upload_bytes"] > 0, grown


def confluent_round_trip(bootstrap: str, topic: str, records: list[Record]) -> list[Consumed]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "compression.type": "zstd"})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers),
                         timestamp=r.timestamp, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Consumed] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(records) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(Consumed(m.offset(), m.key(), m.value(), tuple(m.headers() or ()),
                                    m.timestamp()[1], CREATE_TIME))
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(bootstrap: str, topic: str, records: list[Record]) -> list[Consumed]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                             compression_type="gzip")
    futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                             partition=0, timestamp_ms=r.timestamp) for r in records]
    producer.flush(60)
    assert [f.get(30).offset for f in futures] == list(range(len(records)))
    producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[Consumed] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(records) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(Consumed(m.offset, m.key, m.value, tuple(m.headers), m.timestamp,
                                    CREATE_TIME if m.timestamp_type == 0 else "append")
                           for m in batch)
    finally:
        consumer.close()
    return got


def aiokafka_round_trip(bootstrap: str, topic: str, records: list[Record]) -> list[Consumed]:
    async def run() -> list[Consumed]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                                    compression_type="lz4")
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value, partition=0,
                                           timestamp_ms=r.timestamp, headers=list(r.headers))
                       for r in records]
            await asyncio.wait_for(asyncio.gather(*futures), 60)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        tp = AioTopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[Consumed] = []
        deadline = time.monotonic() + 60
        try:
            while len(got) < len(records) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(tp, timeout_ms=500)).values():
                    got.extend(Consumed(m.offset, m.key, m.value, tuple(m.headers or ()),
                                        m.timestamp, CREATE_TIME) for m in batch)
        finally:
            await consumer.stop()
        return got
    return asyncio.run(run())


def kcat_round_trip(bootstrap: str, topic: str, records: list[Record]) -> list[Consumed]:
    # kcat sets no per-record timestamps or per-record headers: one header set for all.
    common = ["-b", bootstrap, "-X", "broker.address.family=v4", "-q"]
    kcat(*common, "-P", "-t", topic, "-p", "0", "-K:", "-z", "snappy", "-H", "h1=kcat",
         "-X", "acks=all", stdin=b"".join(r.key + b":" + r.value + b"\n" for r in records))
    out = kcat(*common, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J")
    got = []
    for line in out.splitlines():
        m = json.loads(line)
        got.append(Consumed(m["offset"], m["key"].encode(), m["payload"].encode(),
                            (("h1", m["headers"][1].encode()),), 0, m["tstype"]))
    return got


CLIENTS = {"confluent-kafka": confluent_round_trip, "kafka-python": kafka_python_round_trip,
           "aiokafka": aiokafka_round_trip, "kcat": kcat_round_trip}


@pytest.mark.parametrize("client", CLIENTS)
def test_python_and_kcat_clients(cluster, tiered_topic, client):
    records = make_records(N)
    if client == "kcat":
        records = [Record(r.key, r.value, (("h1", b"kcat"),), 0) for r in records]
    got = CLIENTS[client](cluster.bootstrap, tiered_topic, records)
    check_consumed(records, got, check_timestamps=client != "kcat")


def test_kafkajs(cluster, tiered_topic, kafkajs, tmp_path):
    base_ts = base_timestamp()
    records = make_records(N, base_ts=base_ts)
    # client.mjs creates the topic too; the RF=3 active-tiered one already exists.
    cmd = [shutil.which("node"), str(kafkajs / "client.mjs"),
           "--bootstrap", cluster.brokers[0].bootstrap,
           "--topic", tiered_topic, "--compression", "gzip", "--count", str(N),
           "--base-ts", str(base_ts), "--ts-step", str(records[1].timestamp - base_ts)]
    stderr_path = tmp_path / "kafkajs.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr,
                              stdin=subprocess.DEVNULL, timeout=180)
    assert proc.returncode == 0, stderr_path.read_text(errors="replace")[-4000:]
    result = json.loads(proc.stdout)
    assert [a["errorCode"] for a in result["acks"]] == [0] * len(result["acks"])
    got = [Consumed(int(offset), key.encode(), value.encode(),
                    tuple((k, v.encode()) for k, v in headers.items()), int(ts),
                    CREATE_TIME if ts_type == 0 else "append")
           for _, offset, key, value, headers, ts, ts_type in result["records"]]
    check_consumed(records, sorted(got, key=lambda c: c.offset))
