"""Traffic classes, peer AZs and the metrics endpoint, without a cluster."""

from __future__ import annotations

from types import SimpleNamespace

import aiohttp
import pytest

from broker.client_az import az_from_client_id, client_az
from broker.metrics import MetricsServer
from broker.traffic import (
    FETCH_CONSUMER,
    METADATA,
    OTHER,
    PRODUCE,
    REPLICATION,
    NetworkTraffic,
    classify,
    node_client_id,
)
from replication.cluster_metadata import METADATA_TOPIC, BrokerInfo, MetadataImage
from protocol.apis import ApiKey


@pytest.mark.parametrize("client_id, az", [
    ("myapp,az=az2", "az2"),
    ("myapp;az=az2", "az2"),
    ("myapp az=use1-az1 more", "use1-az1"),
    ("az=az3", "az3"),
    ("az=az3,client.rack=x", "az3"),
    ("myapp", None),
    ("baz=az1", None),
    ("", None),
    (None, None),
])
def test_az_token_in_client_id(client_id, az):
    assert az_from_client_id(client_id) == az


def test_client_rack_comes_before_the_az_token():
    assert client_az("myapp,az=az1", "az2") == "az2"
    assert client_az("myapp,az=az1", "") == "az1"
    assert client_az("myapp", "") is None


def fetch(replica_id: int, topic: str = "t", rack_id: str = "") -> SimpleNamespace:
    return SimpleNamespace(replica_id=replica_id, rack_id=rack_id,
                           topics=[SimpleNamespace(topic=topic)])


def test_classes():
    assert classify(ApiKey.PRODUCE, None) == PRODUCE
    assert classify(ApiKey.FETCH, fetch(-1)) == FETCH_CONSUMER
    assert classify(ApiKey.FETCH, fetch(2)) == REPLICATION
    assert classify(ApiKey.FETCH, fetch(-1, METADATA_TOPIC)) == METADATA
    assert classify(ApiKey.OFFSET_FOR_LEADER_EPOCH, SimpleNamespace(replica_id=1)) == REPLICATION
    assert classify(ApiKey.OFFSET_FOR_LEADER_EPOCH, SimpleNamespace()) == OTHER  # v2, a consumer
    assert classify(ApiKey.BROKER_HEARTBEAT, None) == METADATA
    assert classify(ApiKey.ALTER_PARTITION, None) == METADATA
    metadata_offsets = SimpleNamespace(topics=[SimpleNamespace(name=METADATA_TOPIC)])
    assert classify(ApiKey.LIST_OFFSETS, metadata_offsets) == METADATA
    user_offsets = SimpleNamespace(topics=[SimpleNamespace(name="t")])
    assert classify(ApiKey.LIST_OFFSETS, user_offsets) == OTHER
    assert classify(ApiKey.METADATA, None) == OTHER


def rows(traffic: NetworkTraffic, side: str) -> set[tuple]:
    return {(r["peer_az"], r["class"], r["direction"], r["bytes"]) for r in traffic.rows(side)}


def test_a_client_is_unknown_until_its_fetch_names_a_rack_which_is_then_remembered():
    traffic = NetworkTraffic("az1", MetadataImage())
    connection = traffic.accepted_connection()
    connection.request(ApiKey.METADATA, None, 50, client_id="consumer")
    traffic_class = connection.request(ApiKey.FETCH, fetch(-1, rack_id="az2"), 70, "consumer")
    connection.response(traffic_class, 1000)
    connection.request(ApiKey.METADATA, None, 50, client_id="consumer")
    assert rows(traffic, "server") == {
        ("unknown", OTHER, "in", 50), ("az2", FETCH_CONSUMER, "in", 70),
        ("az2", FETCH_CONSUMER, "out", 1000), ("az2", OTHER, "in", 50)}
    assert traffic.snapshot()["server"][0]["local_az"] == "az1"


def test_brokers_are_placed_by_their_registered_rack_on_both_ends():
    image = MetadataImage()
    traffic = NetworkTraffic("az1", image)
    accepted = traffic.accepted_connection()
    registration = SimpleNamespace(rack="az3")
    accepted.request(ApiKey.BROKER_REGISTRATION, registration, 80, node_client_id(2))
    image.brokers[1] = BrokerInfo(1, "10.0.0.2", 9092, rack="az2")
    other = traffic.accepted_connection()
    other.response(other.request(ApiKey.FETCH, fetch(1), 90, node_client_id(1)), 5000)
    assert rows(traffic, "server") == {
        ("az3", METADATA, "in", 80), ("az2", REPLICATION, "in", 90),
        ("az2", REPLICATION, "out", 5000)}

    # This broker as the client: the remote node is found by its advertised address.
    opened = traffic.opened_connection("10.0.0.2", 9092)
    opened.response(opened.request(ApiKey.FETCH, fetch(0), 90), 4000)
    assert rows(traffic, "client") == {("az2", REPLICATION, "out", 90),
                                       ("az2", REPLICATION, "in", 4000)}


async def test_metrics_endpoint_serves_traffic_and_object_store(object_store):  # noqa: F811
    traffic = NetworkTraffic("az1", MetadataImage())
    connection = traffic.accepted_connection()
    connection.response(connection.request(ApiKey.PRODUCE, None, 1234, "p,az=az1"), 56)
    await object_store.put("kipper-wal", "metrics-test", b"x" * 10)
    server = MetricsServer("127.0.0.1:0", {"node_id": 7, "rack": "az1"})
    server.add_source("network", traffic)
    server.add_object_store(object_store)
    await server.start()
    try:
        async with aiohttp.ClientSession(server.url) as http:
            async with http.get("/metrics") as response:
                text = await response.text()
            async with http.get("/metrics.json") as response:
                snapshot = await response.json()
            async with http.post("/admin/s3-faults",
                                 json={"fault": "errors", "op": "put", "rate": 0.5}) as response:
                faults = await response.json()
    finally:
        await server.stop()
    assert ('kipper_network_bytes_total{class="produce",direction="in",local_az="az1",'
            'peer_az="az1"} 1234.0') in text
    assert "kipper_objectstore_requests_total" in text
    assert snapshot["node_id"] == 7
    assert {"local_az": "az1", "peer_az": "az1", "class": "produce", "direction": "out",
            "bytes": 56} in snapshot["network"]["server"]
    assert snapshot["network"]["client"] == []
    assert any(row["operation"] == "PutObject" and row["bytes"] == 10
               for row in snapshot["objectstore"]["requests"])
    assert faults["errors"] == {"put": 0.5}
