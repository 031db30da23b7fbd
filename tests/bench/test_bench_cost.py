"""The cost model on a run's counters: known bytes and requests give known dollars per TB."""

import pytest

from bench.compare import run_costs
from bench.cost import GB, cross_az_bytes, object_store_delta

PRICES = {
    "s3_standard": {"put_requests_per_1k": 0.005, "get_requests_per_1k": 0.0004,
                    "storage_gb_month": 0.023},
    "s3_express_one_zone": {"put_requests_per_1k": 0.00113, "get_requests_per_1k": 0.00003,
                            "upload_per_gb": 0.0032, "retrieval_per_gb": 0.0006,
                            "storage_gb_month": 0.11},
    "cross_az": {"transfer_per_gb_each_way": 0.01},
    "ebs_gp3": {"storage_gb_month": 0.08},
}


def net(local: str, peer: str, cls: str, direction: str, nbytes: int) -> dict:
    return {"local_az": local, "peer_az": peer, "class": cls, "direction": direction,
            "bytes": nbytes}


def s3(operation: str, bucket: str, bucket_az: str, requests: int, nbytes: int) -> dict:
    return {"operation": operation, "bucket": bucket, "caller_az": "az1", "bucket_az": bucket_az,
            "requests": requests, "errors": 0, "bytes": nbytes}


def test_known_counters_give_known_dollars_per_tb():
    before = [
        {"node_id": 0, "rack": "az1",
         "network": {"server": [net("az1", "az2", "produce", "in", 1000)], "client": []},
         "objectstore": {"requests": [s3("PutObject", "kipper-wal", "regional", 10, 1000)]}},
        {"node_id": 1, "rack": "az2", "network": {"server": [], "client": []}},
    ]
    after = [
        {"node_id": 0, "rack": "az1",
         "network": {"server": [
             net("az1", "az2", "produce", "in", 1000 + GB),      # crosses: 1 GB
             net("az1", "az1", "produce", "in", GB),             # same AZ: free
             net("az1", "unknown", "other", "in", 12345),        # AZ unknown: not priced
         ], "client": [net("az1", "az2", "replication", "in", 99 * GB)]},  # seen server-side
         "objectstore": {"requests": [
             s3("PutObject", "kipper-wal", "regional", 1010, 1000),
             s3("GetObject", "kipper-fast-az1", "az1", 1000, GB)]}},
        {"node_id": 1, "rack": "az2",
         "network": {"server": [net("az2", "az1", "replication", "out", 2 * GB)], "client": []}},
    ]

    figures = run_costs(before, after, {"ebs_gp3": 3 * GB, "s3_standard": GB},
                        retention_hours=730, acked_bytes=2 * GB, prices=PRICES)

    assert figures["produced_bytes"] == 2 * GB
    assert figures["received_produce_bytes"] == 2 * GB
    assert figures["cross_az"] == {"bytes_by_class": {"produce": GB, "replication": 2 * GB},
                                   "bytes": 3 * GB, "per_produced_gb": 1.5}
    assert figures["object_store"] == {"requests": 2000, "bytes": GB,
                                       "bytes_by_request_class": {"put": 0, "get": GB},
                                       "by_operation": {"PutObject": 1000, "GetObject": 1000}}
    dollars = figures["cost"]["dollars"]
    assert dollars == pytest.approx({
        "cross_az.produce": 0.02,                 # 1 GB, paid on both sides at $0.01
        "cross_az.replication": 0.04,
        "s3_standard.put_requests": 0.005,        # 1000 PUTs at $0.005 per 1000
        "s3_express_one_zone.get_requests": 0.00003,
        "s3_express_one_zone.retrieval": 0.0006,  # 1 GB read at $0.0006/GB
        "ebs_gp3.storage": 0.24,                  # 3 GB for one 730-hour month
        "s3_standard.storage": 0.023,
        "total": 0.32863,
    })
    per_tb = figures["cost"]["per_tb_produced"]
    scale = 1e12 / (2 * GB)
    assert per_tb == pytest.approx({"cross_az_transfer": 0.06 * scale,
                                    "object_store_requests": 0.00563 * scale,
                                    "storage": 0.263 * scale, "total": 0.32863 * scale})

    # An overloaded cluster: the clients sent each request twice (timeouts, retries). The
    # brokers took in 2 GB, but 1 GB was produced, and every cost is per that 1 GB.
    retried = run_costs(before, after, {}, retention_hours=730, acked_bytes=GB, prices=PRICES)
    assert (retried["produced_bytes"], retried["received_produce_bytes"]) == (GB, 2 * GB)
    assert retried["cross_az"]["per_produced_gb"] == 3.0


def test_counters_absent_or_unchanged_cost_nothing():
    assert cross_az_bytes([{"node_id": 0}]) == {}
    snapshot = {"requests": [s3("PutObject", "kipper-wal", "regional", 5, 50)]}
    assert object_store_delta(snapshot, snapshot)["requests"][0]["requests"] == 0
    figures = run_costs([{"node_id": 0}], [{"node_id": 0}], {}, 168, 0, PRICES)
    assert figures["cost"]["per_tb_produced"] == {
        "cross_az_transfer": 0.0, "object_store_requests": 0.0, "storage": 0.0, "total": 0.0}
    assert figures["cross_az"]["per_produced_gb"] is None
