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


# --- From a run's counters to the inputs above, and to dollars per TB produced. ----------
#
# ``metrics`` arguments are lists of brokers' /metrics.json documents: the "network" source
# (broker/traffic.py) and, on brokers with an object store, its accounting snapshot.

# AWS prorates monthly storage prices over a 730-hour month.
HOURS_PER_MONTH = 730
# The object-store source's name in /metrics.json (broker/metrics.py).
OBJECT_STORE_SOURCES = ("objectstore", "object_store")
CATEGORIES = ("cross_az_transfer", "object_store_requests", "storage")


def server_rows(metrics: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    # The server side counts every byte between kipper nodes and clients exactly once.
    for document in metrics:
        yield from document.get("network", {}).get("server", [])


def cross_az_bytes(metrics: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Bytes between two different, known AZs, by traffic class."""
    totals: dict[str, int] = defaultdict(int)
    for row in server_rows(metrics):
        if "unknown" not in (row["local_az"], row["peer_az"]) and row["local_az"] != row["peer_az"]:
            totals[row["class"]] += row["bytes"]
    return dict(sorted(totals.items()))


def produce_request_bytes(metrics: Iterable[Mapping[str, Any]]) -> int:
    """Produce-request bytes the brokers received: the data produced, as it came in."""
    return sum(row["bytes"] for row in server_rows(metrics)
               if row["class"] == "produce" and row["direction"] == "in")


def object_store_snapshot(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """A broker's object-store accounting snapshot; None for a broker without one."""
    return next((document[name] for name in OBJECT_STORE_SOURCES if name in document), None)


def object_store_delta(before: Mapping[str, Any] | None,
                       after: Mapping[str, Any]) -> dict[str, Any]:
    """The requests and bytes of ``after`` that ``before`` (same store, earlier) lacks."""
    def key(row: Mapping[str, Any]) -> tuple:
        return row["operation"], row["bucket"], row["caller_az"], row["bucket_az"]
    earlier = {key(row): row for row in (before or {}).get("requests", [])}
    rows = []
    for row in after["requests"]:
        old = earlier.get(key(row), {})
        rows.append({**row, **{field: row[field] - old.get(field, 0)
                               for field in ("requests", "errors", "bytes")}})
    return {**after, "requests": rows}


def storage_gb_months(bytes_by_class: Mapping[str, int], retention_hours: float) -> dict[str, float]:
    """GB-months of keeping the bytes stored at the end of a run for ``retention_hours``."""
    return {storage_class: nbytes / GB * retention_hours / HOURS_PER_MONTH
            for storage_class, nbytes in bytes_by_class.items()}


def category(item: str) -> str:
    """cross_az_transfer, storage, or object_store_requests (S3 Express per-GB request
    charges included) for an item of cost_breakdown's result."""
    if item.startswith("cross_az."):
        return "cross_az_transfer"
    if item.endswith(".storage"):
        return "storage"
    return "object_store_requests"


def per_tb_produced(costs: Mapping[str, float], produced_bytes: int) -> dict[str, float]:
    """Dollars per 10¹² bytes produced, by category, plus "total"."""
    scale = 1e12 / produced_bytes if produced_bytes else 0.0
    result = {name: 0.0 for name in CATEGORIES}
    for item, dollars in costs.items():
        if item != "total":
            result[category(item)] += dollars * scale
    result["total"] = costs["total"] * scale
    return result
