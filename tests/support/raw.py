"""Raw Kafka frames over a plain socket, for tests that speak the protocol below any client."""

from __future__ import annotations

import socket
import struct
from contextlib import contextmanager

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import decode_response, encode_request
from protocol.internal import ClusterCredentials, InternalApiKey, JsonBody

from .processes import CLUSTER_SECRET

IO_TIMEOUT = 10.0


@contextmanager
def connect(broker, timeout: float = IO_TIMEOUT):
    """A socket to ``broker`` (anything with a ``port``), closed on exit."""
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
    try:
        yield sock
    finally:
        sock.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response frame without its size prefix; None if the broker closed the connection."""
    try:
        prefix = recv_exactly(sock, 4)
        if prefix is None:
            return None
        return recv_exactly(sock, struct.unpack(">i", prefix)[0])
    except ConnectionResetError:
        return None


def assert_closed(sock: socket.socket, timeout: float = IO_TIMEOUT) -> None:
    """The broker closes the connection without answering."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except socket.timeout:
        pytest.fail(f"broker kept the connection open for {timeout} s")
    assert data == b"", f"expected a closed connection, got {len(data)} bytes: {data[:60]!r}"


def prove_broker(sock: socket.socket, node_id: int = 99) -> None:
    """Authenticate ``sock`` as broker ``node_id`` of the test clusters (broker.inter_broker),
    so broker-only requests on it are executed."""
    challenge = call(sock, InternalApiKey.BROKER_CHALLENGE, 0, JsonBody({})).value["challenge"]
    proof = ClusterCredentials(node_id, CLUSTER_SECRET).proof(challenge)
    answer = call(sock, InternalApiKey.BROKER_PROOF, 0,
                  JsonBody({"node_id": node_id, "proof": proof}))
    assert answer.value == {"error_code": 0}, answer.value


def entity(api_key: int, version: int, entity_name: str, /, **values):
    module = load_payload_module(api_key, version, EntityType.request)
    return make(getattr(module, entity_name), **values)


def call(sock: socket.socket, api_key: int, version: int, body, correlation_id: int = 7):
    sock.sendall(encode_request(api_key, version, correlation_id, "bad-input-test", body))
    frame = recv_frame(sock)
    assert frame is not None, f"broker closed the connection instead of answering api {api_key}"
    got_correlation, response = decode_response(frame, api_key, version)
    assert got_correlation == correlation_id
    return response


def fetch_codecs(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    """The codec (compression attribute) of every batch of ``topic``-``partition`` as its
    leader serves it, up to the high watermark: Fetch v12 over raw frames, the batches read by
    kafka-python's decoder (not kipper's)."""
    from confluent_kafka.admin import AdminClient
    from kafka.record.memory_records import MemoryRecords

    from .topics import partition_metadata

    leader = partition_metadata(bootstrap, topic, partition).leader
    broker = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers[leader]
    codecs: list[int] = []
    offset = 0
    with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT) as sock:
        while True:
            [answer] = call(sock, 1, 12, entity(
                1, 12, "FetchRequest", cluster_id=None, replica_id=-1, max_wait=0, min_bytes=0,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                topics=(entity(1, 12, "FetchTopic", topic=topic, partitions=(
                    entity(1, 12, "FetchPartition", partition=partition,
                           current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                           log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                forgotten_topics_data=(), rack_id="")).responses[0].partitions
            assert answer.error_code == 0, answer.error_code
            records = MemoryRecords(bytes(answer.records or b""))
            while (batch := records.next_batch()) is not None:
                if batch.base_offset >= offset:
                    codecs.append(batch.compression_type)
                    offset = batch.next_offset
            if offset >= answer.high_watermark:
                return codecs


def open_transactions(sock: socket.socket, topic: str, partition: int = 0) -> dict[int, int]:
    """DescribeProducers (v0): each producer the partition's leader holds state for, and
    where its open transaction starts (-1: none open)."""
    response = call(sock, ApiKey.DESCRIBE_PRODUCERS, 0, entity(
        ApiKey.DESCRIBE_PRODUCERS, 0, "DescribeProducersRequest", topics=(entity(
            ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest", name=topic,
            partition_indexes=(partition,)),)))
    found = response.topics[0].partitions[0]
    assert found.error_code == ErrorCode.none, found.error_message
    return {p.producer_id: p.current_txn_start_offset for p in found.active_producers}
