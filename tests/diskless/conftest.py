"""A 3-broker cluster whose topics are diskless by default, sharing the session S3 server."""

from __future__ import annotations

import sqlite3
import struct
import uuid
from pathlib import Path

import boto3
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from clients.dataset import CODEC_NAMES
from storage.objectstore import WAL_BUCKET
from support import Cluster, wait_until


class DisklessCluster(Cluster):
    def __init__(self, root: Path, s3, **kwargs) -> None:
        super().__init__(root, s3=s3, broker_args=["--default-storage-mode", "diskless",
                                                   "--metrics-listener", "127.0.0.1:0"],
                         **kwargs)
        self.s3 = s3

    def topic_id(self, topic: str) -> str:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        description = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
        kafka_uuid = description.topic_id
        msb = kafka_uuid.get_most_significant_bits() & (2**64 - 1)
        lsb = kafka_uuid.get_least_significant_bits() & (2**64 - 1)
        return str(uuid.UUID(int=(msb << 64) | lsb))

    def coordinator_rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        """A query on the batch coordinator's SQLite state of the first live broker."""
        broker = next(b for b in self.brokers if b.alive())
        path = broker.data_dir / "diskless-coordinator.sqlite"
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return db.execute(sql, params).fetchall()

    def stored_batches(self, topic: str, partition: int = 0) -> list[tuple[int, int, str]]:
        """(base offset, record count, codec) of each batch, read from the WAL objects at
        the coordinates the batch coordinator holds: what the clients really sent."""
        topic_id = self.topic_id(topic)
        rows = self.coordinator_rows(
            "SELECT base_offset, object_key, byte_offset, byte_size FROM batches "
            "WHERE topic_id = ? AND partition = ? ORDER BY base_offset", (topic_id, partition))
        s3 = boto3.client("s3", endpoint_url=self.s3.url, aws_access_key_id=self.s3.access_key,
                          aws_secret_access_key=self.s3.secret_key, region_name="us-east-1")
        batches = []
        for base_offset, key, byte_offset, byte_size in rows:
            data = s3.get_object(Bucket=WAL_BUCKET, Key=key,
                                 Range=f"bytes={byte_offset}-{byte_offset + byte_size - 1}")["Body"].read()
            (attributes,) = struct.unpack_from(">h", data, 21)
            (records,) = struct.unpack_from(">i", data, 57)
            batches.append((base_offset, records, CODEC_NAMES.get(attributes & 0x7, "?")))
        return batches

    def wait_for_coordinator_state(self, sql: str, params: tuple = (), timeout: float = 30):
        return wait_until(lambda: self.coordinator_rows(sql, params), timeout)


@pytest.fixture(scope="package")
def diskless_cluster(tmp_path_factory, s3_endpoint):
    cluster = DisklessCluster(tmp_path_factory.mktemp("diskless"), s3_endpoint).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def shared_broker(diskless_cluster):
    """The client compatibility tests (tests/clients), run against the diskless cluster."""
    return diskless_cluster
