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

from storage.objectstore import WAL_BUCKET

from .dataset import CODEC_NAMES
from .processes import Cluster
from .s3 import S3Endpoint
from .wait import wait_until


# Housekeeping fast enough for a test to watch objects being merged and deleted.
FAST_HOUSEKEEPING = {"KIPPER_DISKLESS_HOUSEKEEPING_INTERVAL_MS": "500",
                     "KIPPER_DISKLESS_ORPHAN_GRACE_MS": "3000",
                     "KIPPER_DISKLESS_OBJECT_DELETE_DELAY_MS": "1000",
                     "KIPPER_DISKLESS_MERGE_MIN_AGE_MS": "0"}


class DisklessCluster(Cluster):
    def __init__(self, root: Path, s3: S3Endpoint, **kwargs) -> None:
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
        s3 = self._s3_client()
        batches = []
        for base_offset, key, byte_offset, byte_size in rows:
            data = s3.get_object(Bucket=WAL_BUCKET, Key=key,
                                 Range=f"bytes={byte_offset}-{byte_offset + byte_size - 1}")["Body"].read()
            (attributes,) = struct.unpack_from(">h", data, 21)
            (records,) = struct.unpack_from(">i", data, 57)
            batches.append((base_offset, records, CODEC_NAMES.get(attributes & 0x7, "?")))
        return batches

    def wal_keys(self) -> set[str]:
        """The keys of this cluster's WAL objects in the object store."""
        prefix = self.brokers[0].env["KIPPER_S3_KEY_PREFIX"] + "wal/"
        pages = self._s3_client().get_paginator("list_objects_v2").paginate(
            Bucket=WAL_BUCKET, Prefix=prefix)
        return {item["Key"] for page in pages for item in page.get("Contents", [])}

    def committed_keys(self) -> set[str]:
        """The keys of the WAL objects the batch coordinator holds as committed."""
        return {key for (key,) in self.coordinator_rows("SELECT key FROM objects")}

    def merged_objects(self) -> dict[str, int]:
        """The size of each merged object the batch coordinator holds (KIP-1165 merges of
        small WAL objects, which the writable coordinator runs every few seconds)."""
        return dict(self.coordinator_rows(
            "SELECT key, size FROM objects WHERE key LIKE '%wal/merged-%'"))

    def object_keys(self, topic: str) -> set[str]:
        """The WAL objects holding the topic's committed batches."""
        return {key for (key,) in self.coordinator_rows(
            "SELECT DISTINCT object_key FROM batches WHERE topic_id = ?", (self.topic_id(topic),))}

    def delete_objects(self, keys: set[str]) -> None:
        """Delete WAL objects behind the cluster's back (data loss, as a lifecycle rule would)."""
        for key in keys:
            self._s3_client().delete_object(Bucket=WAL_BUCKET, Key=key)

    def _s3_client(self):
        return boto3.client("s3", endpoint_url=self.s3.url, aws_access_key_id=self.s3.access_key,
                            aws_secret_access_key=self.s3.secret_key, region_name="us-east-1")

    def wait_for_coordinator_state(self, sql: str, params: tuple = (), timeout: float = 30):
        return wait_until(lambda: self.coordinator_rows(sql, params), timeout)


@pytest.fixture(scope="session")
def diskless_cluster(tmp_path_factory, s3_endpoint):
    """One diskless cluster for tests/storage/diskless and the diskless runs of tests/system
    (one cluster, as when both lived in tests/diskless)."""
    cluster = DisklessCluster(tmp_path_factory.mktemp("diskless"), s3_endpoint).start()
    yield cluster
    cluster.stop()
