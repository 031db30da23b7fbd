"""A 3-broker cluster whose topics are shared (KIP-1183) by default, against the session S3
server; and what its data objects hold."""

from __future__ import annotations

import struct
from pathlib import Path

import boto3
import pytest

from storage.objectstore import WAL_BUCKET

from .dataset import CODEC_NAMES
from .s3 import S3Endpoint
from .tiered import TieredCluster
from .wait import wait_until

# Data objects often enough for a test to wait for them.
FAST_DATA_OBJECTS = {"KIPPER_SHARED_DATA_OBJECT_INTERVAL_MS": "1000"}


class SharedCluster(TieredCluster):
    def __init__(self, root: Path, s3: S3Endpoint, broker_env: dict[str, str] | None = None
                 ) -> None:
        # The controller too: which topics are shared decides how it elects their leaders.
        super().__init__(root, s3, {"KIPPER_DEFAULT_STORAGE_MODE": "shared",
                                    **FAST_DATA_OBJECTS, **(broker_env or {})})
        self.s3 = s3

    def data_object_batches(self, topic: str, partition: int = 0) -> list[tuple[int, int, str]]:
        """(base offset, record count, codec) of every batch in the partition's data objects
        (shared/data/<topic>-<partition>/ in the regional bucket), by base offset."""
        s3 = boto3.client("s3", endpoint_url=self.s3.url, aws_access_key_id=self.s3.access_key,
                          aws_secret_access_key=self.s3.secret_key, region_name="us-east-1")
        prefix = f"{self.brokers[0].env['KIPPER_S3_KEY_PREFIX']}shared/data/{topic}-{partition}/"
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=WAL_BUCKET, Prefix=prefix)
        batches = {}
        for key in sorted(item["Key"] for page in pages for item in page.get("Contents", [])):
            data = s3.get_object(Bucket=WAL_BUCKET, Key=key)["Body"].read()
            pos = 0
            while pos + 61 <= len(data):
                (base_offset, length) = struct.unpack_from(">qi", data, pos)
                (attributes,) = struct.unpack_from(">h", data, pos + 21)
                (records,) = struct.unpack_from(">i", data, pos + 57)
                batches[base_offset] = (base_offset, records, CODEC_NAMES.get(attributes & 0x7, "?"))
                pos += 12 + length
        return [batches[offset] for offset in sorted(batches)]

    def wait_for_data_objects(self, topic: str, n_records: int, partition: int = 0,
                              timeout: float = 30) -> list[tuple[int, int, str]]:
        """The partition's data-object batches once they hold ``n_records`` records."""
        def complete() -> list[tuple[int, int, str]] | None:
            batches = self.data_object_batches(topic, partition)
            return batches if sum(count for _, count, _ in batches) >= n_records else None
        return wait_until(complete, timeout, interval=0.5)


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory, s3_endpoint):
    """One cluster for the shared runs of tests/system, started on first use."""
    cluster = SharedCluster(tmp_path_factory.mktemp("shared-storage"), s3_endpoint).start()
    yield cluster
    cluster.stop()
