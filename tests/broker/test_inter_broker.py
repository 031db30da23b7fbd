"""Broker-only requests (broker/inter_broker.py) from anyone but a broker of the cluster.

Issue 13 §3: one raw frame of the batch coordinator's internal append (key 9000) with a
`delete_topic` record, sent from a plain client socket, emptied a diskless topic. Here that
frame goes to every listener of every node of a diskless cluster (the Kafka listeners of the
controller and of the brokers, and the brokers' HTTP metrics listeners): a real client
(confluent-kafka) reads the topic's high watermark before and after, and each refusal must
leave its log line naming the peer. The same frame, sent after a correct proof of membership,
does empty the topic: the refused frame was a working one. A node with another secret can
neither join the cluster nor send the frame.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.alter_partition.v3.request import AlterPartitionRequest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from broker.inter_broker import BrokerAuthentication
from protocol.build import make
from protocol.framing import encode_request
from protocol.internal import ClusterCredentials, JsonBody
from replication.node_client import AuthenticationFailed, NodeConnection
from support.processes import CLUSTER_SECRET, BrokerProcess
from support.topics import create_topic
from support.wait import wait_until

DISKLESS_COORDINATOR_APPEND, BROKER_CHALLENGE, BROKER_PROOF = 9000, 9001, 9002
RECORDS = 10
IO_TIMEOUT = 10.0


def internal_frame(api_key: int, body: dict, correlation_id: int = 1) -> bytes:
    """A kipper internal request built by hand: request header v1, then int32 + JSON."""
    client_id = b"not-a-broker"
    payload = json.dumps(body).encode()
    message = (struct.pack(">hhih", api_key, 0, correlation_id, len(client_id)) + client_id
               + struct.pack(">i", len(payload)) + payload)
    return struct.pack(">i", len(message)) + message


def read_json_response(sock: socket.socket) -> dict:
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    frame = _read_exactly(sock, size)
    (length,) = struct.unpack_from(">i", frame, 4)  # after the correlation id
    return json.loads(frame[8:8 + length])


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"connection closed after {len(data)} of {size} bytes"
        data += chunk
    return data


def closed_without_answer(sock: socket.socket) -> bool:
    """True if the peer closes the connection before sending a single byte."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                              cached=False)
    finally:
        consumer.close()


def refusal_logged(node: BrokerProcess, peer: str, api: str) -> int:
    """How many lines of the node's log refuse ``api`` from ``peer`` (host:port)."""
    return sum(1 for line in node.log_path.read_text(errors="replace").splitlines()
               if f"closing {peer} " in line and f"refused {api}" in line)


@pytest.fixture
def diskless_topic(diskless_cluster, topic_name) -> tuple[str, str]:
    """A diskless topic holding RECORDS records (produced by confluent-kafka): (name, id)."""
    create_topic(diskless_cluster.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": diskless_cluster.bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic_name, f"record-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    # Another broker may answer from state up to a commit behind (issue 13 section 2).
    wait_until(lambda: watermarks(diskless_cluster.bootstrap, topic_name) == (0, RECORDS), 10)
    return topic_name, diskless_cluster.topic_id(topic_name)


def delete_topic_record(topic_id: str) -> dict:
    """The control-plane record that drops every batch of a diskless topic."""
    return {"type": "delete_topic", "topic_id": topic_id, "now_ms": int(time.time() * 1000)}


def test_internal_append_from_a_client_socket_is_refused_on_every_listener(
        diskless_cluster, diskless_topic):
    topic, topic_id = diskless_topic
    frame = internal_frame(DISKLESS_COORDINATOR_APPEND, {"record": delete_topic_record(topic_id)})
    nodes = [diskless_cluster.controller, *diskless_cluster.brokers]
    for node in nodes:
        with socket.create_connection(("127.0.0.1", node.port), IO_TIMEOUT) as sock:
            sock.settimeout(IO_TIMEOUT)
            peer = "%s:%d" % sock.getsockname()
            sock.sendall(frame)
            assert closed_without_answer(sock), f"node {node.node_id} answered the frame"
        wait_until(lambda: refusal_logged(node, peer, "DISKLESS_COORDINATOR_APPEND"), 10)
        assert refusal_logged(node, peer, "DISKLESS_COORDINATOR_APPEND") == 1
    for broker in diskless_cluster.brokers:  # the other listener each broker opens
        metrics = urlsplit(broker.metrics_url)
        with socket.create_connection((metrics.hostname, metrics.port), IO_TIMEOUT) as sock:
            sock.settimeout(IO_TIMEOUT)
            sock.sendall(frame)
            status = sock.recv(12)
            assert status.startswith(b"HTTP/") and status.endswith(b" 400"), status
    time.sleep(1)  # an executed delete would be applied within a commit interval
    assert watermarks(diskless_cluster.bootstrap, topic) == (0, RECORDS)

    # The frame is a working one: after a proof of membership, the coordinator executes it.
    errors = []
    for broker in diskless_cluster.brokers:
        with socket.create_connection(("127.0.0.1", broker.port), IO_TIMEOUT) as sock:
            sock.settimeout(IO_TIMEOUT)
            sock.sendall(internal_frame(BROKER_CHALLENGE, {}))
            challenge = read_json_response(sock)["challenge"]
            sock.sendall(internal_frame(BROKER_PROOF, {
                "node_id": 99, "proof": ClusterCredentials(99, CLUSTER_SECRET).proof(challenge)}))
            assert read_json_response(sock) == {"error_code": 0}
            sock.sendall(frame)
            errors.append(read_json_response(sock)["error_code"])
    assert sorted(errors) == [0, 16, 16]  # the coordinator, and NOT_COORDINATOR twice
    wait_until(lambda: watermarks(diskless_cluster.bootstrap, topic)[1] == 0, 10)


def kafka_frame(api_key: int, version: int, body: object) -> bytes:
    return encode_request(api_key, version, 1, "not-a-broker", body)


BROKER_ONLY_KAFKA_REQUESTS = {
    # Controlled shutdown of broker 0: the controller would move its leaderships away.
    "BROKER_HEARTBEAT": kafka_frame(63, 1, make(
        BrokerHeartbeatRequest, broker_id=0, broker_epoch=0, current_metadata_offset=0,
        want_fence=False, want_shut_down=True, offline_log_dirs=())),
    "ALTER_PARTITION": kafka_frame(56, 3, make(
        AlterPartitionRequest, broker_id=0, broker_epoch=0, topics=())),
    # A follower's fetch moves the ISR and the high watermark that acks=all waits for.
    "FETCH": kafka_frame(1, 12, make(
        FetchRequest, replica_id=0, max_wait=0, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, topics=(make(
            FetchTopic, topic="__cluster_metadata", partitions=(make(
                FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=1 << 40,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")),
}


@pytest.mark.parametrize("api", sorted(BROKER_ONLY_KAFKA_REQUESTS))
def test_broker_only_kafka_requests_from_a_client_socket_are_refused(diskless_cluster, api):
    controller = diskless_cluster.controller
    with socket.create_connection(("127.0.0.1", controller.port), IO_TIMEOUT) as sock:
        sock.settimeout(IO_TIMEOUT)
        peer = "%s:%d" % sock.getsockname()
        sock.sendall(BROKER_ONLY_KAFKA_REQUESTS[api])
        assert closed_without_answer(sock)
    wait_until(lambda: refusal_logged(controller, peer, api), 10)
    brokers = AdminClient({"bootstrap.servers": diskless_cluster.bootstrap}).list_topics(
        timeout=10).brokers
    assert sorted(brokers) == [0, 1, 2]


def test_a_node_with_another_secret_can_neither_join_nor_act(
        diskless_cluster, diskless_topic, tmp_path):
    topic, topic_id = diskless_topic
    controller = diskless_cluster.controller
    intruder = BrokerProcess(tmp_path / "intruder", node_id=7,
                             extra_args=["--controller", controller.bootstrap],
                             env={"KIPPER_CLUSTER_SECRET": "not-the-cluster-secret"})
    intruder.launch()  # it never gets to its ready line: it cannot register
    try:
        wait_until(lambda: "proof of membership" in intruder.log_path.read_text(), 30)
        wait_until(lambda: "proof of membership of this cluster is wrong"
                   in controller.log_path.read_text(), 10)
        brokers = AdminClient({"bootstrap.servers": diskless_cluster.bootstrap}).list_topics(
            timeout=10).brokers
        assert 7 not in brokers
        assert intruder.alive()
    finally:
        intruder.kill()

    async def append_with_the_wrong_secret(port: int) -> None:
        connection = NodeConnection("127.0.0.1", port, "kipper-node-7",
                                    ClusterCredentials(7, "not-the-cluster-secret"),
                                    _NoTraffic())
        try:
            await connection.call(DISKLESS_COORDINATOR_APPEND,
                                  JsonBody({"record": delete_topic_record(topic_id)}), IO_TIMEOUT)
        finally:
            await connection.close()

    for broker in diskless_cluster.brokers:
        with pytest.raises(AuthenticationFailed):
            asyncio.run(append_with_the_wrong_secret(broker.port))
    assert watermarks(diskless_cluster.bootstrap, topic) == (0, RECORDS)


class _NoTraffic:
    def request(self, api_key, body, nbytes) -> str:
        return "other"

    def response(self, traffic_class, nbytes) -> None:
        pass


@pytest.mark.parametrize("case", ["right", "no challenge first", "replayed", "other secret",
                                  "not ASCII", "not a dict"])
def test_a_proof_of_membership_is_good_for_its_challenge_only(case):
    authentication = BrokerAuthentication(ClusterCredentials(0, CLUSTER_SECRET))

    def challenge() -> str:
        return authentication.answer(BROKER_CHALLENGE, JsonBody({})).value["challenge"]

    def prove(body) -> JsonBody | None:
        return authentication.answer(BROKER_PROOF, JsonBody(body))

    member = ClusterCredentials(3, CLUSTER_SECRET)
    if case == "right":
        assert prove({"node_id": 3, "proof": member.proof(challenge())}) == JsonBody(
            {"error_code": 0})
        assert authentication.node_id == 3
        return
    if case == "no challenge first":
        answer = prove({"node_id": 3, "proof": member.proof("")})
    elif case == "replayed":
        proof = member.proof(challenge())
        challenge()  # a new connection would get a new challenge
        answer = prove({"node_id": 3, "proof": proof})
    elif case == "other secret":
        answer = prove({"node_id": 3, "proof": ClusterCredentials(3, "x").proof(challenge())})
    elif case == "not ASCII":
        challenge()
        answer = prove({"node_id": 3, "proof": "\u00e9" * 64})
    else:
        challenge()
        answer = prove(["node_id", 3])
    assert answer is None
    assert authentication.node_id is None
