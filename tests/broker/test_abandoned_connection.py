"""A client that goes away without reading its responses leaves nothing behind: the
connection's buffers are freed by reference counting when it ends, with no garbage
collection, even if the heap was frozen while it was open (broker.heap). A full collection,
which reaches the frozen heap, held a broker of 10,000 partitions 0.3-0.8 s."""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import types
import weakref

import pytest
from support.raw import entity

from broker import connection as connection_module
from broker.broker_metrics import RequestMetrics
from broker.config import BrokerConfig
from broker.connection import Connection
from broker.handlers import HANDLERS
from broker.response_memory import ResponseMemory
from broker.traffic import NetworkTraffic
from protocol.apis import ApiKey
from protocol.framing import encode_request
from protocol.internal import ClusterCredentials
from replication.cluster_metadata import MetadataImage
from replication.frame_reader import start_frame_server

MiB = 1 << 20
RESPONSE_BYTES = 4 * MiB


class Response(bytearray):
    """A response's buffer whose freeing the test can see (bytes cannot be weakly
    referenced)."""


def metadata_request(correlation_id: int) -> bytes:
    return encode_request(ApiKey.METADATA, 1, correlation_id, "never-reads", entity(
        ApiKey.METADATA, 1, "MetadataRequest", topics=()))


@pytest.mark.parametrize("ending", ["close", "reset"])
async def test_an_abandoned_connection_frees_its_responses_without_a_collection(
        tmp_path, monkeypatch, ending):
    responses: list[weakref.ref] = []

    async def answer(ctx, request):
        return object()

    def encode(header, response):
        buffer = Response(RESPONSE_BYTES)
        responses.append(weakref.ref(buffer))
        return [buffer]

    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, answer)
    monkeypatch.setattr(connection_module, "encode_response_buffers", encode)
    config = BrokerConfig(node_id=1, data_dir=tmp_path)
    memory = ResponseMemory(256 * MiB)
    ended = asyncio.Event()

    async def serve(reader, writer):
        try:
            await Connection(types.SimpleNamespace(config=config),
                             NetworkTraffic(None, MetadataImage()),
                             memory.connection(16 * MiB), ClusterCredentials(1, "unused"),
                             RequestMetrics(), reader, writer).run()
        finally:
            ended.set()

    gc.disable()
    server = await start_frame_server(serve, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    try:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.sendall(b"".join(metadata_request(i) for i in range(20)))
        while len(responses) < 3:  # more than the socket takes: the rest wait in the broker
            await asyncio.sleep(0.05)
        gc.freeze()  # as a broker freezes its heap after opening thousands of logs
        if ending == "reset":
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        await asyncio.wait_for(ended.wait(), 10)
        await asyncio.sleep(0.1)
        held = [ref for ref in responses if ref() is not None]
        assert held == [], f"{len(held)} of {len(responses)} responses still held"
    finally:
        client.close()
        server.close()
        gc.unfreeze()
        gc.enable()
