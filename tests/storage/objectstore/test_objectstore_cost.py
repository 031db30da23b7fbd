"""bench/cost.py: known counters give known dollars; the price table names its sources."""

from __future__ import annotations

import tomllib

import pytest

from bench.cost import GB, PRICES_PATH, cost_breakdown, load_prices
from storage.objectstore import WAL_BUCKET, ObjectStore

PRICES = {
    "s3_standard": {"put_requests_per_1k": 0.005, "get_requests_per_1k": 0.0004, "storage_gb_month": 0.023},
    "s3_express_one_zone": {
        "put_requests_per_1k": 0.00113, "get_requests_per_1k": 0.00003,
        "upload_per_gb": 0.0032, "retrieval_per_gb": 0.0006, "storage_gb_month": 0.11,
    },
    "cross_az": {"transfer_per_gb_each_way": 0.01},
    "ebs_gp3": {"storage_gb_month": 0.08},
}


def row(operation: str, bucket: str, bucket_az: str, requests: int, nbytes: int = 0) -> dict:
    return {"operation": operation, "bucket": bucket, "caller_az": "az1", "bucket_az": bucket_az,
            "requests": requests, "errors": 0, "bytes": nbytes}


def test_price_table_entries_have_source_and_date() -> None:
    with open(PRICES_PATH, "rb") as file:
        raw = tomllib.load(file)
    for section in raw.values():
        for entry in section.values():
            assert entry["source"].startswith("https://aws.amazon.com/")
            assert len(entry["date"]) == 10
    assert load_prices() == PRICES


def test_known_counters_give_known_dollars() -> None:
    broker_az1 = {"requests": [
        row("PutObject", WAL_BUCKET, "regional", 10_000, 5 * GB),
        row("UploadPart", WAL_BUCKET, "regional", 2_000, 1 * GB),
        row("GetObject", WAL_BUCKET, "regional", 100_000, 40 * GB),
        row("DeleteObjects", WAL_BUCKET, "regional", 50),
        row("PutObject", "kipper-fast-az1", "az1", 1_000, 2 * GB),
    ]}
    broker_az2 = {"requests": [
        row("GetObject", "kipper-fast-az1", "az1", 4_000, 3 * GB),
        row("ListObjectsV2", WAL_BUCKET, "regional", 1_000),
    ]}
    costs = cost_breakdown(
        [broker_az1, broker_az2],
        cross_az_bytes={"produce": 10 * GB, "replication": 5 * GB},
        storage_gb_months={"s3_standard": 100, "ebs_gp3": 50},
        prices=PRICES,
    )
    expected = {
        "cross_az.produce": 0.2,
        "cross_az.replication": 0.1,
        "ebs_gp3.storage": 4.0,
        "s3_express_one_zone.get_requests": 4 * 0.00003,
        "s3_express_one_zone.put_requests": 0.00113,
        "s3_express_one_zone.retrieval": 3 * 0.0006,
        "s3_express_one_zone.upload": 2 * 0.0032,
        "s3_standard.get_requests": 0.04,
        "s3_standard.put_requests": 13 * 0.005,
        "s3_standard.storage": 2.3,
    }
    assert costs == pytest.approx({**expected, "total": sum(expected.values())})
    assert list(costs) == sorted(expected) + ["total"]


def test_unknown_storage_class_is_refused() -> None:
    with pytest.raises(ValueError, match="s3_glacier"):
        cost_breakdown([], storage_gb_months={"s3_glacier": 1}, prices=PRICES)


async def test_cost_of_a_real_snapshot(object_store: ObjectStore, s3_prefix: str) -> None:
    for i in range(4):
        await object_store.put(WAL_BUCKET, f"{s3_prefix}{i}", b"x" * 1000)
    await object_store.get(WAL_BUCKET, f"{s3_prefix}0")
    costs = cost_breakdown([object_store.accounting.snapshot()], prices=PRICES)
    assert costs == pytest.approx({
        "s3_standard.get_requests": 0.0004 / 1000,
        "s3_standard.put_requests": 4 * 0.005 / 1000,
        "total": 0.0004 / 1000 + 4 * 0.005 / 1000,
    })
