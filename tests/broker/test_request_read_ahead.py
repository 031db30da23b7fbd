"""A connection reads requests ahead of their answers (pipelining): deep enough for a
producer that sends one Produce per partition to thousands of partitions, and bounded by
bytes, since the requests it holds unanswered count against its memory limit; once
everything is answered it holds nothing."""

from __future__ import annotations

import asyncio
import struct
import types

import pytest

from broker.broker_metrics import RequestMetrics
from broker.config import BrokerConfig
from broker.connection import Connection
from broker.handlers import HANDLERS
from broker.response_memory import ResponseMemory
from broker.traffic import NetworkTraffic
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import encode_request
from protocol.internal import ClusterCredentials
from replication.cluster_metadata import MetadataImage
from replication.frame_reader import start_frame_server
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

MiB = 1 << 20
CONNECTION_LIMIT = 4 * MiB


def produce_frame(correlation_id: int, record_bytes: int) -> bytes:
    """A Produce (acks=1) whose records are ``record_bytes`` long (the stand-in handler
    never looks at them)."""
    return encode_request(ApiKey.PRODUCE, 9, correlation_id, "read-ahead", make(
        ProduceRequest, transactional_id=None, acks=1, timeout=30_000, topic_data=(make(
            TopicProduceData, name="t", partition_data=(make(
                PartitionProduceData, index=0, records=b"\0" * record_bytes),)),)))


@pytest.fixture
async def held_connection(tmp_path, monkeypatch):
    """A listening Connection whose Produce handler holds every request until released;
    yields (started, release, writer, the broker's ResponseMemory)."""
    started: list[int] = []
    release = asyncio.Event()

    async def held_produce(ctx, request):
        started.append(ctx.header.correlation_id)
        await release.wait()
        return None  # nothing is written back, as for acks=0

    monkeypatch.setitem(HANDLERS, ApiKey.PRODUCE, held_produce)
    config = BrokerConfig(node_id=1, data_dir=tmp_path)
    memory = ResponseMemory(256 * MiB)

    async def serve(reader, writer):
        await Connection(types.SimpleNamespace(config=config),
                         NetworkTraffic(None, MetadataImage()),
                         memory.connection(CONNECTION_LIMIT), ClusterCredentials(1, "unused"),
                         RequestMetrics(), reader, writer).run()

    server = await start_frame_server(serve, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    yield started, release, writer, memory
    release.set()
    writer.close()
    server.close()


async def settled(started: list[int]) -> int:
    """How many requests the connection has taken, once that stops changing."""
    seen = -1
    while seen != len(started):
        seen = len(started)
        await asyncio.sleep(0.2)
    return seen


async def test_a_thousand_small_requests_are_taken_before_the_first_is_answered(
        held_connection):
    started, release, writer, _ = held_connection
    for correlation_id in range(1000):
        writer.write(produce_frame(correlation_id, 100))
    await writer.drain()
    assert await settled(started) == 1000
    assert started == sorted(started)  # started in the order they came


async def test_large_unanswered_requests_stop_the_reading_at_the_connection_limit(
        held_connection):
    started, release, writer, _ = held_connection
    for correlation_id in range(20):
        writer.write(produce_frame(correlation_id, MiB))
    # The first is always taken; then as many as fit in CONNECTION_LIMIT.
    assert 1 <= await settled(started) <= CONNECTION_LIMIT // MiB
    release.set()
    await writer.drain()
    assert await settled(started) == 20


async def test_a_connection_holds_nothing_once_everything_is_answered(held_connection):
    """Answers queued without a handler (here: ApiVersions at a version it does not know)
    are held until sent like the others, and released once: a count that went below zero
    let a connection's next request wait for room that never came."""
    started, release, writer, memory = held_connection
    writer.write(struct.pack(">ihhi", 10, ApiKey.API_VERSIONS, 99, 7) + struct.pack(">h", -1))
    for correlation_id in range(3):
        writer.write(produce_frame(correlation_id, 1000))
    release.set()
    await writer.drain()
    assert await settled(started) == 3
    assert memory.used == 0
