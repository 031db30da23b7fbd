"""Dollar cost of a run, from kipper's counters and the price table in bench/prices.toml.

Inputs are what the brokers measure:
- object-store snapshots (``ObjectStore.accounting.snapshot()``, one per broker): requests
  and payload bytes by operation and bucket;
- bytes that crossed an AZ boundary, by traffic class, each byte counted once;
- optionally, storage held over the run in GB-months, by storage class.

The result maps "<storage class or cross_az>.<item>" to dollars, plus "total".
"""

from __future__ import annotations

import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from storage.objectstore.names import REGIONAL

PRICES_PATH = Path(__file__).with_name("prices.toml")
# AWS bills a "GB" of 2^30 bytes.
GB = 1 << 30
STORAGE_CLASSES = ("s3_standard", "s3_express_one_zone", "ebs_gp3")

# S3 operation -> request price class. DELETE and CANCEL (abort) requests are free; that
# DeleteObjects, a POST, is billed as a DELETE is our reading of the pricing page.
REQUEST_CLASS = {
    "PutObject": "put",
    "CreateMultipartUpload": "put",
    "UploadPart": "put",
    "CompleteMultipartUpload": "put",
    "CreateBucket": "put",
    "ListObjectsV2": "put",
    "GetObject": "get",
    "DeleteObjects": "free",
    "AbortMultipartUpload": "free",
}


def load_prices(path: Path = PRICES_PATH) -> dict[str, dict[str, float]]:
    """section -> price name -> USD; every entry must name its source and date."""
    with open(path, "rb") as file:
        raw = tomllib.load(file)
    prices: dict[str, dict[str, float]] = {}
    for section, entries in raw.items():
        for name, entry in entries.items():
            missing = {"usd", "source", "date"} - entry.keys()
            if missing:
                raise ValueError(f"{path}: {section}.{name} lacks {', '.join(sorted(missing))}")
        prices[section] = {name: float(entry["usd"]) for name, entry in entries.items()}
    return prices


def cost_breakdown(
    object_store_snapshots: Iterable[Mapping[str, Any]],
    cross_az_bytes: Mapping[str, int] | None = None,
    storage_gb_months: Mapping[str, float] | None = None,
    prices: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, float]:
    prices = prices or load_prices()
    costs: dict[str, float] = defaultdict(float)

    for snapshot in object_store_snapshots:
        for row in snapshot["requests"]:
            request_class = REQUEST_CLASS[row["operation"]]
            if request_class == "free":
                continue
            # Failed attempts are priced too: in the cloud most of them reach S3.
            storage_class = "s3_standard" if row["bucket_az"] == REGIONAL else "s3_express_one_zone"
            table = prices[storage_class]
            costs[f"{storage_class}.{request_class}_requests"] += (
                row["requests"] / 1000 * table[f"{request_class}_requests_per_1k"])
            if storage_class == "s3_express_one_zone":
                data_charge = "upload" if request_class == "put" else "retrieval"
                costs[f"{storage_class}.{data_charge}"] += row["bytes"] / GB * table[f"{data_charge}_per_gb"]

    # Both sides of a cross-AZ transfer pay the per-GB price.
    per_crossing_gb = 2 * prices["cross_az"]["transfer_per_gb_each_way"]
    for traffic_class, nbytes in (cross_az_bytes or {}).items():
        costs[f"cross_az.{traffic_class}"] += nbytes / GB * per_crossing_gb

    for storage_class, gb_months in (storage_gb_months or {}).items():
        if storage_class not in STORAGE_CLASSES:
            raise ValueError(f"unknown storage class {storage_class!r}; use one of {STORAGE_CLASSES}")
        costs[f"{storage_class}.storage"] += gb_months * prices[storage_class]["storage_gb_month"]

    result = dict(sorted(costs.items()))
    result["total"] = sum(costs.values())
    return result
