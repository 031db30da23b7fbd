"""Shared storage's objects (KIP-1183, docs/shared.md): the WAL objects a shared topic's
records went through are deleted once data objects of its partitions replace them, and the
data objects hold every record exactly once, in offset order."""

from __future__ import annotations

import time

import boto3
from confluent_kafka import Producer

from storage.objectstore import WAL_BUCKET
from support.topics import create_topic
from support.wait import wait_until

PARTITIONS = 3
RECORDS = 3000


def wal_objects_since(cluster, since_ms: int) -> list[str]:
    """This cluster's shared WAL objects uploaded at or after ``since_ms`` (their keys start
    with the upload time)."""
    s3 = boto3.client("s3", endpoint_url=cluster.s3.url, aws_access_key_id=cluster.s3.access_key,
                      aws_secret_access_key=cluster.s3.secret_key, region_name="us-east-1")
    prefix = f"{cluster.brokers[0].env['KIPPER_S3_KEY_PREFIX']}shared/wal/"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=WAL_BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])
            if int(item["Key"].rsplit("/", 1)[1].split("-")[0]) >= since_ms]


def test_wal_objects_go_once_data_objects_replace_them(shared_cluster, topic_name):
    create_topic(shared_cluster.bootstrap, topic_name, PARTITIONS, 3)
    started_ms = time.time_ns() // 1_000_000
    producer = Producer({"bootstrap.servers": shared_cluster.bootstrap, "acks": "all",
                         "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic_name, f"v{i}".encode(), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(60) == 0
    for partition in range(PARTITIONS):
        batches = shared_cluster.wait_for_data_objects(topic_name, RECORDS // PARTITIONS,
                                                       partition)
        assert sum(count for _, count, _ in batches) == RECORDS // PARTITIONS
        offsets = [base for base, _, _ in batches]
        assert offsets == sorted(offsets) and offsets[0] == 0
    wait_until(lambda: not wal_objects_since(shared_cluster, started_ms), timeout=30,
               interval=0.5)
