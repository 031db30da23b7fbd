"""Round trips through the client against a real S3 server over HTTP."""

from __future__ import annotations

import asyncio
import os

import pytest
from prometheus_client import CollectorRegistry

from storage.objectstore import (
    WAL_BUCKET,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    fast_bucket,
)
from storage.objectstore.ranges import coalesce

MiB = 1 << 20


def counts(store: ObjectStore) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(operation, bucket) -> (requests, errors, bytes)."""
    return {
        (row["operation"], row["bucket"]): (row["requests"], row["errors"], row["bytes"])
        for row in store.accounting.snapshot()["requests"]
    }


async def test_put_get_range_delete_list(object_store: ObjectStore, s3_prefix: str) -> None:
    key = s3_prefix + "hello"
    await object_store.put(WAL_BUCKET, key, b"hello, object storage")
    assert await object_store.get(WAL_BUCKET, key) == b"hello, object storage"
    assert await object_store.get_range(WAL_BUCKET, key, 7, 6) == b"object"
    assert [(o.key, o.size) async for o in object_store.list_objects(WAL_BUCKET, s3_prefix)] == [(key, 21)]

    await object_store.delete(WAL_BUCKET, [key, s3_prefix + "never-existed"])
    assert [o async for o in object_store.list_objects(WAL_BUCKET, s3_prefix)] == []
    with pytest.raises(ObjectNotFound):
        await object_store.get(WAL_BUCKET, key)


async def test_range_past_the_end_is_an_error(object_store: ObjectStore, s3_prefix: str) -> None:
    await object_store.put(WAL_BUCKET, s3_prefix + "short", b"0123456789")
    with pytest.raises(ObjectStoreError, match="ends before byte"):
        await object_store.get_range(WAL_BUCKET, s3_prefix + "short", 5, 10)


async def test_coalesced_ranges_are_one_get(object_store: ObjectStore, s3_prefix: str) -> None:
    key = s3_prefix + "wal-object"
    data = os.urandom(4 * MiB)
    await object_store.put(WAL_BUCKET, key, data)
    # Unsorted, overlapping, one empty, and one far away from the rest.
    ranges = [(1000, 50), (0, 100), (60, 80), (500, 0), (3 * MiB, 10), (2000, 1)]

    parts = await object_store.get_ranges(WAL_BUCKET, key, ranges, gap=4096)
    assert parts == [data[start:start + length] for start, length in ranges]
    assert counts(object_store)[("GetObject", WAL_BUCKET)] == (2, 0, 2001 + 10)

    # Without a gap only the overlapping ranges share a GET.
    assert await object_store.get_ranges(WAL_BUCKET, key, ranges, gap=0) == parts
    assert counts(object_store)[("GetObject", WAL_BUCKET)][0] == 2 + 4


def test_coalesce_groups_ranges_by_gap() -> None:
    spans = coalesce([(100, 10), (0, 10), (15, 5), (40, 0)], gap=5)
    assert [(s.start, s.end, s.members) for s in spans] == [(0, 20, [1, 2]), (100, 110, [0])]
    with pytest.raises(ValueError):
        coalesce([(-1, 5)], gap=0)


async def test_list_pages(object_store: ObjectStore, s3_prefix: str) -> None:
    keys = [f"{s3_prefix}{i:03d}" for i in range(5)]
    await asyncio.gather(*(object_store.put(WAL_BUCKET, k, b"x" * i) for i, k in enumerate(keys)))

    listed = [o async for o in object_store.list_objects(WAL_BUCKET, s3_prefix, page_size=2)]
    assert [(o.key, o.size) for o in listed] == [(k, i) for i, k in enumerate(keys)]
    assert counts(object_store)[("ListObjectsV2", WAL_BUCKET)] == (3, 0, 0)


async def test_delete_in_batches_of_1000(object_store: ObjectStore, s3_prefix: str) -> None:
    keys = [f"{s3_prefix}{i}" for i in range(1500)]
    await object_store.put(WAL_BUCKET, keys[1200], b"one real object among missing ones")
    await object_store.delete(WAL_BUCKET, keys)
    assert counts(object_store)[("DeleteObjects", WAL_BUCKET)] == (2, 0, 0)
    assert [o async for o in object_store.list_objects(WAL_BUCKET, s3_prefix)] == []


async def test_large_object_multipart_and_ranged_reads(object_store: ObjectStore, s3_prefix: str) -> None:
    key = s3_prefix + "large"
    data = os.urandom(64 * MiB + 123)
    await object_store.put(WAL_BUCKET, key, data)

    requests = counts(object_store)
    assert requests[("CreateMultipartUpload", WAL_BUCKET)] == (1, 0, 0)
    assert requests[("UploadPart", WAL_BUCKET)] == (5, 0, len(data))
    assert requests[("CompleteMultipartUpload", WAL_BUCKET)] == (1, 0, 0)
    assert ("PutObject", WAL_BUCKET) not in requests

    across_parts = (16 * MiB - 1000, 2000)
    tail = (64 * MiB, 123)
    got = await object_store.get_ranges(WAL_BUCKET, key, [across_parts, tail], gap=0)
    assert got == [data[s:s + n] for s, n in (across_parts, tail)]
    assert await object_store.get(WAL_BUCKET, key) == data


async def test_concurrent_uploads(s3_endpoint, s3_prefix: str) -> None:
    # A pool smaller than the number of uploads: requests queue for connections.
    async with ObjectStore(s3_endpoint.config(max_pool_connections=4)) as store:
        payloads = {f"{s3_prefix}{i:02d}": os.urandom(256 * 1024 + i) for i in range(32)}
        await asyncio.gather(*(store.put(WAL_BUCKET, k, v) for k, v in payloads.items()))

        listed = {o.key: o.size async for o in store.list_objects(WAL_BUCKET, s3_prefix)}
        assert listed == {k: len(v) for k, v in payloads.items()}
        fetched = await asyncio.gather(*(store.get(WAL_BUCKET, k) for k in payloads))
        assert fetched == list(payloads.values())


async def test_ensure_buckets_is_idempotent(object_store: ObjectStore) -> None:
    created = await object_store.ensure_buckets(["az1", "az2"])
    assert created == [WAL_BUCKET, fast_bucket("az1"), fast_bucket("az2")]
    await object_store.ensure_buckets(["az1", "az2"])
    # The second answer is 200 from moto, 409 BucketAlreadyOwnedByYou from MinIO; neither raises.
    assert counts(object_store)[("CreateBucket", fast_bucket("az2"))][0] == 2


async def test_accounting_matches_the_requests_made(object_store: ObjectStore, s3_prefix: str) -> None:
    fast = fast_bucket("az2")
    await object_store.put(WAL_BUCKET, s3_prefix + "a", b"a" * 100)
    await object_store.put(WAL_BUCKET, s3_prefix + "b", b"b" * 200)
    await object_store.put(fast, s3_prefix + "c", b"c" * 300)
    await object_store.get(fast, s3_prefix + "c")
    await object_store.get_range(WAL_BUCKET, s3_prefix + "a", 10, 20)
    with pytest.raises(ObjectNotFound):
        await object_store.get(WAL_BUCKET, s3_prefix + "missing")
    [o async for o in object_store.list_objects(WAL_BUCKET, s3_prefix)]
    await object_store.delete(WAL_BUCKET, [s3_prefix + "a", s3_prefix + "b"])

    rows = object_store.accounting.snapshot()["requests"]
    assert [
        (r["operation"], r["bucket"], r["caller_az"], r["bucket_az"], r["requests"], r["errors"], r["bytes"])
        for r in rows
    ] == [
        ("DeleteObjects", WAL_BUCKET, "az1", "regional", 1, 0, 0),
        ("GetObject", fast, "az1", "az2", 1, 0, 300),
        ("GetObject", WAL_BUCKET, "az1", "regional", 2, 1, 20),
        ("ListObjectsV2", WAL_BUCKET, "az1", "regional", 1, 0, 0),
        ("PutObject", fast, "az1", "az2", 1, 0, 300),
        ("PutObject", WAL_BUCKET, "az1", "regional", 2, 0, 300),
    ]
    assert all(sum(r["latency_counts"]) == r["requests"] for r in rows)

    registry = CollectorRegistry()
    object_store.accounting.register(registry)
    labels = {"operation": "GetObject", "bucket": WAL_BUCKET, "caller_az": "az1", "bucket_az": "regional"}
    assert registry.get_sample_value("kipper_objectstore_requests_total", labels) == 2
    assert registry.get_sample_value("kipper_objectstore_errors_total", labels) == 1
    assert registry.get_sample_value("kipper_objectstore_bytes_total", labels) == 20
    assert registry.get_sample_value("kipper_objectstore_request_seconds_count", labels) == 2
    assert registry.get_sample_value(
        "kipper_objectstore_request_seconds_bucket", {**labels, "le": "+Inf"}) == 2
