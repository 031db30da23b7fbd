"""Network byte accounting by availability zone: what crosses AZs, and why.

Every connection is tagged with its peer's AZ and every request with a traffic class; the
broker counts request and response frame bytes (size prefix included) by (local AZ, peer
AZ, class, direction). Two sides are kept apart:

- ``server``: connections this broker accepted (clients, and other brokers calling it).
  Every byte on the wire between kipper nodes and their clients is counted here exactly
  once, on the node that serves it, so cluster-wide totals sum this side over all nodes.
- ``client``: connections this broker opened to other kipper nodes (follower fetches,
  controller calls). The same bytes are also counted on the serving node; this side lets
  one broker's own view of, say, its replication be read without its peers' counters.

Peer AZ: another kipper node names itself in its client id (``kipper-node-<id>``) and its
rack comes from the cluster metadata; a client's is found by broker.client_az (client.rack in
its Fetch requests, else an ``az=<zone>`` token in its client id). Until one of those shows
up, ``unknown``.
"""

from __future__ import annotations

import abc
from collections import defaultdict
from typing import Any, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from protocol.apis import ApiKey
from protocol.internal import InternalApiKey
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, METADATA_TOPIC, MetadataImage
from storage.active_tiered.metadata import WAL_METADATA_TOPIC

from .client_az import client_az

UNKNOWN = "unknown"
# Traffic classes.
PRODUCE = "produce"
FETCH_CONSUMER = "fetch-consumer"
REPLICATION = "replication"
METADATA = "metadata"
# Diskless batch-coordinator calls and the replication of its log, __diskless-metadata.
DISKLESS_COORDINATOR = "diskless-coordinator"
# Everything else: client admin calls, a broker connection's proof of membership, ...
OTHER = "other"
# Sides and directions (directions are seen from this broker).
SERVER = "server"
CLIENT = "client"
IN = "in"
OUT = "out"

LABELS = ("local_az", "peer_az", "class", "direction")
NODE_CLIENT_ID_PREFIX = "kipper-node-"
_CONTROLLER_APIS = {ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
                    ApiKey.ALLOCATE_PRODUCER_IDS,
                    ApiKey.FETCH_SNAPSHOT, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH,
                    ApiKey.END_QUORUM_EPOCH}


def node_client_id(node_id: int) -> str:
    return f"{NODE_CLIENT_ID_PREFIX}{node_id}"


def classify(api_key: int, body: Any) -> str:
    """The traffic class of a request (its response shares it)."""
    if api_key == ApiKey.PRODUCE:
        return PRODUCE
    if api_key == InternalApiKey.DISKLESS_COORDINATOR_APPEND:
        return DISKLESS_COORDINATOR
    if api_key == ApiKey.FETCH:
        if any(topic.topic == METADATA_TOPIC for topic in body.topics):
            return METADATA
        if any(topic.topic == DISKLESS_METADATA_TOPIC for topic in body.topics):
            return DISKLESS_COORDINATOR
        if body.replica_id < 0 and all(t.topic == WAL_METADATA_TOPIC for t in body.topics):
            return METADATA  # a broker reading KIP-1176's WAL metadata topic
        # Fetch v15+ would carry the id in replica_state; kipper stops at v12.
        return REPLICATION if body.replica_id >= 0 else FETCH_CONSUMER
    if api_key == ApiKey.SHARE_FETCH:
        return FETCH_CONSUMER  # a share group member's records (KIP-932)
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        # v2 has no replica id: only consumers send it (followers use kipper's v4).
        return REPLICATION if getattr(body, "replica_id", -1) >= 0 else OTHER
    if api_key in _CONTROLLER_APIS:
        return METADATA
    if api_key == ApiKey.LIST_OFFSETS and any(t.name == METADATA_TOPIC for t in body.topics):
        return METADATA  # a broker catching up with the metadata log
    return OTHER


def node_id_from_client_id(client_id: str | None) -> int | None:
    if client_id is None or not client_id.startswith(NODE_CLIENT_ID_PREFIX):
        return None
    suffix = client_id[len(NODE_CLIENT_ID_PREFIX):]
    return int(suffix) if suffix.isdigit() else None


class NetworkTraffic:
    """One broker's byte counters, fed by its connections."""

    def __init__(self, local_az: str | None, image: MetadataImage) -> None:
        self.local_az = local_az or UNKNOWN
        # Where the racks of other nodes are looked up.
        self.image = image
        self._bytes: dict[tuple[str, str, str, str], int] = defaultdict(int)

    def add(self, side: str, peer_az: str, traffic_class: str, direction: str, nbytes: int) -> None:
        self._bytes[side, peer_az, traffic_class, direction] += nbytes

    def accepted_connection(self) -> "AcceptedTraffic":
        return AcceptedTraffic(self)

    def opened_connection(self, host: str, port: int) -> "OpenedTraffic":
        return OpenedTraffic(self, host, port)

    def rows(self, side: str) -> list[dict[str, Any]]:
        return [
            {"local_az": self.local_az, "peer_az": peer_az, "class": traffic_class,
             "direction": direction, "bytes": nbytes}
            for (row_side, peer_az, traffic_class, direction), nbytes in sorted(self._bytes.items())
            if row_side == side
        ]

    def snapshot(self) -> dict[str, Any]:
        """Every counter as plain JSON, one row per (local AZ, peer AZ, class, direction)."""
        return {SERVER: self.rows(SERVER), CLIENT: self.rows(CLIENT)}

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_PrometheusCollector(self))


class _ConnectionTraffic(abc.ABC):
    """The counting shared by both ends: classify each request, learn the peer's AZ once."""

    side: str
    request_direction: str
    response_direction: str

    def __init__(self, traffic: NetworkTraffic) -> None:
        self.traffic = traffic
        self.peer_az: str | None = None

    def request(self, api_key: int, body: Any, nbytes: int, client_id: str | None = None) -> str:
        """Count a request frame; return its traffic class, for counting its response."""
        traffic_class = classify(api_key, body)
        if self.peer_az is None:
            self.peer_az = self._find_peer_az(api_key, body, client_id)
        self.traffic.add(self.side, self.peer_az or UNKNOWN, traffic_class,
                         self.request_direction, nbytes)
        return traffic_class

    def response(self, traffic_class: str, nbytes: int) -> None:
        self.traffic.add(self.side, self.peer_az or UNKNOWN, traffic_class,
                         self.response_direction, nbytes)

    @abc.abstractmethod
    def _find_peer_az(self, api_key: int, body: Any, client_id: str | None) -> str | None:
        """The peer's AZ, or None to look again on the next request."""


class AcceptedTraffic(_ConnectionTraffic):
    """A connection this broker accepted: the peer is a client or another kipper node."""

    side = SERVER
    request_direction = IN
    response_direction = OUT

    def _find_peer_az(self, api_key: int, body: Any, client_id: str | None) -> str | None:
        node_id = node_id_from_client_id(client_id)
        if node_id is not None:
            broker = self.traffic.image.brokers.get(node_id)
            if broker is not None:
                return broker.rack or UNKNOWN
            if api_key == ApiKey.BROKER_REGISTRATION:
                return body.rack or UNKNOWN  # the rack it is about to be registered with
            return None
        # A consumer's client.rack comes in Fetch v11+ (KIP-392).
        rack_id = getattr(body, "rack_id", "") if api_key == ApiKey.FETCH else ""
        return client_az(client_id, rack_id)


class OpenedTraffic(_ConnectionTraffic):
    """A connection this broker opened to the kipper node at host:port."""

    side = CLIENT
    request_direction = OUT
    response_direction = IN

    def __init__(self, traffic: NetworkTraffic, host: str, port: int) -> None:
        super().__init__(traffic)
        self.address = (host, port)

    def _find_peer_az(self, api_key: int, body: Any, client_id: str | None) -> str | None:
        # Unknown until the remote node has registered (the controller may not be a broker).
        for broker in self.traffic.image.brokers.values():
            if (broker.host, broker.port) == self.address:
                return broker.rack or UNKNOWN
        return None


class _PrometheusCollector(Collector):
    def __init__(self, traffic: NetworkTraffic) -> None:
        self._traffic = traffic

    def collect(self) -> Iterator[Metric]:
        server = CounterMetricFamily(
            "kipper_network_bytes",
            "Kafka frame bytes on connections this broker accepted (each byte counted once "
            "cluster-wide)", labels=LABELS)
        client = CounterMetricFamily(
            "kipper_network_client_bytes",
            "Kafka frame bytes on connections this broker opened to other kipper nodes "
            "(also counted by kipper_network_bytes on the node serving them)", labels=LABELS)
        for family, side in ((server, SERVER), (client, CLIENT)):
            for row in self._traffic.rows(side):
                family.add_metric([row[label] for label in LABELS], row["bytes"])
        yield from (server, client)
