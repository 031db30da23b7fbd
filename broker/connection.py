"""One client connection: read size-prefixed requests, run them, answer in request order.

Requests are pipelined: each becomes a task as soon as it is read, and a sender writes
the responses strictly in arrival order. Tasks start in arrival order and handlers do
their order-sensitive work (appending to a log or a WAL buffer) before their first
suspension point, so a producer's pipelined batches keep their order.

Broker-only requests are served only once the connection has proved it comes from a broker
of this cluster (broker.inter_broker); otherwise the connection is closed unexecuted.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING

from protocol.apis import VERSION_RANGES, ApiKey
from protocol.internal import ClusterCredentials, InternalApiKey
from protocol.framing import (
    MalformedRequest,
    RequestHeader,
    UnsupportedVersion,
    encode_response,
    parse_request,
)

from .handlers import HANDLERS, RequestContext
from .handlers.api_versions import unsupported_version_response
from .inter_broker import AUTHENTICATION_APIS, BrokerAuthentication, is_broker_only

if TYPE_CHECKING:
    from .services import BrokerServices
    from .traffic import NetworkTraffic

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
# Requests read ahead of their responses; past this the reader waits (back-pressure).
MAX_IN_FLIGHT = 64
SUPPORTED = {int(k): v for k, v in VERSION_RANGES.items() if k in HANDLERS}
SUPPORTED.update({int(k): (0, 0) for k in InternalApiKey
                  if k in HANDLERS or k in AUTHENTICATION_APIS})


def _api_name(api_key: int) -> str:
    for enum_type in (ApiKey, InternalApiKey):
        if api_key in enum_type._value2member_map_:
            return enum_type(api_key).name
    return str(api_key)


class Connection:
    def __init__(self, services: "BrokerServices", traffic: "NetworkTraffic",
                 credentials: ClusterCredentials, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.services = services
        self.config = services.config
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        self.traffic = traffic.accepted_connection()
        self.authentication = BrokerAuthentication(credentials)
        self._responses: asyncio.Queue[asyncio.Future | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._in_flight: set[asyncio.Future] = set()

    async def run(self) -> None:
        sender = asyncio.create_task(self._send_responses())
        try:
            await self._read_requests()
        except asyncio.CancelledError:
            # Broker shutdown: long polls and waits for replicas end now, unanswered.
            for task in self._in_flight:
                task.cancel()
        finally:
            await self._responses.put(None)
            await sender
            self.writer.close()

    async def _read_requests(self) -> None:
        idle_timeout = self.config.connections_max_idle_ms / 1000
        max_size = self.config.max_request_bytes
        while not self.writer.is_closing():
            try:
                prefix = await asyncio.wait_for(self.reader.readexactly(4), idle_timeout)
                (size,) = _SIZE.unpack(prefix)
                if size <= 0 or size > max_size:
                    log.warning("closing %s: request size %d outside 1..%d bytes",
                                self.peer, size, max_size)
                    return
                frame = await self.reader.readexactly(size)
            except asyncio.TimeoutError:
                log.info("closing %s: idle for %.0f s", self.peer, idle_timeout)
                return
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    log.warning("closing %s: connection ended inside a request (%d bytes of "
                                "%s)", self.peer, len(e.partial), e.expected)
                return
            except ConnectionError:
                return
            try:
                header, body = parse_request(frame, SUPPORTED)
            except UnsupportedVersion as e:
                if e.api_key == ApiKey.API_VERSIONS:
                    await self._queue_ready(unsupported_version_response(e.correlation_id))
                    continue
                log.warning("closing %s: %s", self.peer, e)
                return
            except MalformedRequest as e:
                log.warning("closing %s: malformed request: %s", self.peer, e)
                return
            traffic_class = self.traffic.request(header.api_key, body, _SIZE.size + size,
                                                 header.client_id)
            if header.api_key in AUTHENTICATION_APIS:
                if not await self._authenticate(header, body, traffic_class):
                    return
                continue
            if self._refused(header, body):
                return
            task = asyncio.ensure_future(self._handle(header, body, traffic_class))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
            await self._responses.put(task)

    async def _authenticate(self, header: RequestHeader, body: object,
                            traffic_class: str) -> bool:
        """Answer a step of the peer's proof of membership (broker.inter_broker); False if
        the proof is wrong and the connection must close."""
        answer = self.authentication.answer(header.api_key, body)
        if answer is None:
            log.warning("closing %s (client id %r): its proof of membership of this cluster "
                        "is wrong (a different cluster_secret?)", self.peer, header.client_id)
            return False
        data = encode_response(header, answer)
        self.traffic.response(traffic_class, len(data))
        await self._queue_ready(data)
        return True

    def _refused(self, header: RequestHeader, body: object) -> bool:
        """A broker-only request on a connection that has not proved it comes from a broker
        of this cluster: never executed, and the connection closes (so this logs once)."""
        if self.authentication.node_id is not None or not is_broker_only(header.api_key, body):
            return False
        log.warning("closing %s (client id %r): refused %s, which only brokers of this cluster "
                    "may send, on a connection not authenticated as one; not executed",
                    self.peer, header.client_id, _api_name(header.api_key))
        return True

    async def _queue_ready(self, data: bytes) -> None:
        done = asyncio.get_running_loop().create_future()
        done.set_result(data)
        await self._responses.put(done)

    async def _handle(self, header: RequestHeader, body: object,
                      traffic_class: str) -> bytes | None:
        context = RequestContext(header, self.services, self.peer)
        try:
            response = await HANDLERS[header.api_key](context, body)
        except Exception:
            log.exception("closing %s: %s v%d handler failed", self.peer,
                          _api_name(header.api_key), header.api_version)
            self.writer.close()
            return None
        if response is None:  # acks=0 produce: no response at all
            return None
        data = encode_response(header, response)
        self.traffic.response(traffic_class, len(data))
        return data

    async def _send_responses(self) -> None:
        while (pending := await self._responses.get()) is not None:
            try:
                data = await pending
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise
                continue
            if data is None or self.writer.is_closing():
                continue  # keep draining so the reader never blocks on a full queue
            try:
                self.writer.write(data)
                await self.writer.drain()
            except ConnectionError:
                self.writer.close()
