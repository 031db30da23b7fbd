"""One client connection: read size-prefixed requests, run them, answer in request order.

Requests are pipelined: each becomes a task as soon as it is read, and a sender writes
the responses strictly in arrival order. Tasks start in arrival order and handlers do
their order-sensitive work (appending to a log or a WAL buffer) before their first
suspension point, so a producer's pipelined batches keep their order.

Broker-only requests are served only once the connection has proved it comes from a broker
of this cluster (broker.inter_broker); otherwise the connection is closed unexecuted.

On a SASL listener the client authenticates first (broker.sasl_session) and then acts as
the principal it proved; on an SSL listener it acts as its certificate's principal.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING

from protocol.apis import VERSION_RANGES, ApiKey
from protocol.internal import ClusterCredentials, InternalApiKey
from protocol.framing import (
    MalformedRequest,
    RequestHeader,
    UnsupportedVersion,
    encode_response,
    encode_response_buffers,
    parse_request,
)
from replication.frame_reader import FrameReader, FrameSizeError

from .broker_metrics import RequestMetrics, api_name
from .handlers import HANDLERS, RequestContext
from .handlers.api_versions import unsupported_version_response
from .handlers.fetch import response_bytes_bound
from .response_memory import ConnectionResponses
from .inter_broker import AUTHENTICATION_APIS, BrokerAuthentication, is_broker_only
from .sasl_session import SaslSession

if TYPE_CHECKING:
    from .security.listener_security import ListenerSecurity
    from .services import BrokerServices
    from .traffic import NetworkTraffic

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
# Requests read ahead of their responses; past this the reader waits (back-pressure; their
# bytes are bounded too, see _read_requests). librdkafka sends one partition per Produce
# (librdkafka#1700), so a producer to thousands of partitions pipelines thousands of them on
# one connection, each waiting for its replication or its WAL object: 64 at a time made a
# diskless produce to 10,000 partitions wait for about 150 WAL rounds, one after the other.
MAX_IN_FLIGHT = 1000
# No response carried over to the sender's next write (None ends the queue).
_NOTHING = object()
SUPPORTED = {int(k): v for k, v in VERSION_RANGES.items() if k in HANDLERS}
SUPPORTED.update({int(k): (0, 0) for k in InternalApiKey
                  if k in HANDLERS or k in AUTHENTICATION_APIS})


class Connection:
    def __init__(self, services: "BrokerServices", traffic: "NetworkTraffic",
                 responses: ConnectionResponses, credentials: ClusterCredentials,
                 requests: RequestMetrics,
                 reader: FrameReader, writer: asyncio.StreamWriter,
                 listener: "ListenerSecurity | None" = None, principal: str = "User:ANONYMOUS",
                 ) -> None:
        """``listener``: the listener accepted on (None: an unnamed plaintext one);
        ``principal``: who the connection is before any SASL (a client certificate's)."""
        self.services = services
        self.requests = requests
        # Bytes of this client's responses held in memory: bounds reading (response_memory).
        self.held = responses
        self.config = services.config
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "unknown"
        self.client_host = peer[0] if peer else ""
        self.principal = principal
        self.listener_name = listener.name if listener is not None else None
        self.sasl = (SaslSession(listener.sasl, self.config.connections_max_reauth_ms, self.peer,
                                 listener.failures)
                     if listener is not None and listener.sasl is not None else None)
        self.traffic = traffic.accepted_connection()
        self.authentication = BrokerAuthentication(credentials)
        self._responses: asyncio.Queue[asyncio.Future | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._in_flight: set[asyncio.Future] = set()
        # Response bytes the client went away without reading (ResponseMemory.
        # collect_abandoned).
        self._lost_bytes = 0

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
            self._lost_bytes += self.writer.transport.get_write_buffer_size()
            self.writer.close()
            self._forget_how_it_ended()
            await self.held.close(self._lost_bytes)

    def _forget_how_it_ended(self) -> None:
        """Drop the traceback of the error that ended the connection. The stream keeps that
        error, and its traceback keeps the frames it was raised through: the sender's holds
        the responses the client never read. Stream, protocol and transport refer to one
        another, so they go only with a collection of cycles; and if the heap was frozen
        while the connection was open (broker.heap), only with a full one, which held a
        broker of 10,000 partitions 0.3-0.8 s."""
        error = self.reader.exception()
        if error is not None:
            error.__traceback__ = None

    async def _read_requests(self) -> None:
        idle_timeout = self.config.connections_max_idle_ms / 1000
        read_timeout = self.config.request_read_timeout_ms / 1000
        max_size = self.config.max_request_bytes
        while not self.writer.is_closing():
            frame = await self._read_frame(idle_timeout, read_timeout, max_size)
            if frame is None:
                return
            size = len(frame)
            received_at = time.perf_counter()
            if self.sasl is not None and self.sasl.bare_tokens:
                if not await self._bare_sasl_token(frame):
                    return
                continue
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
            if self.sasl is not None:
                refusal = self.sasl.refusal(header.api_key)
                if refusal is not None:
                    log.warning("closing %s (client id %r): refused %s, %s; not executed",
                                self.peer, header.client_id, api_name(header.api_key), refusal)
                    return
                if header.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                    if not await self._sasl_request(header, body, traffic_class):
                        return
                    continue
            if header.api_key in AUTHENTICATION_APIS:
                if not await self._authenticate(header, body, traffic_class):
                    return
                continue
            if self._refused(header, body):
                return
            # The request's frame is held until its response is built (its parsed body
            # refers to it), so it counts with the response's bytes: a client pipelining
            # large requests cannot grow the broker either.
            expected = self._response_bound(header, body) + len(frame)
            await self.held.reserve(expected)
            task = asyncio.ensure_future(
                self._handle(header, body, traffic_class, expected, received_at))
            self._in_flight.add(task)
            task.add_done_callback(self._in_flight.discard)
            await self._responses.put(task)

    async def _read_frame(self, idle_timeout: float, read_timeout: float,
                          max_size: int) -> bytes | None:
        """The next request's frame; None when the connection is to close (logged)."""
        reader = self.reader
        try:
            frame = reader.next_frame(max_size)
            if frame is not None:
                return frame  # already here: no timer to arm, as for most pipelined requests
            if not reader.started:
                try:
                    # asyncio.timeout rather than wait_for, which ran the read as a task of
                    # its own: a task and a turn of the event loop more per request.
                    async with asyncio.timeout(idle_timeout):
                        await reader.wait_for_data()
                except TimeoutError:
                    log.info("closing %s: idle for %.0f s", self.peer, idle_timeout)
                    return None
            try:
                # Idle time ends with a request's first byte; from there the whole frame
                # has a deadline, or a client trickling bytes would hold the connection.
                async with asyncio.timeout(read_timeout):
                    return await reader.read_frame(max_size)
            except TimeoutError:
                log.warning("closing %s: a request was still incomplete after %.0f s",
                            self.peer, read_timeout)
                return None
        except FrameSizeError as e:
            log.warning("closing %s: request size %d outside 1..%d bytes",
                        self.peer, e.size, max_size)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("closing %s: connection ended inside a request (%d bytes of "
                            "%s)", self.peer, len(e.partial), e.expected)
        except ConnectionError:
            pass
        return None

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

    async def _sasl_request(self, header: RequestHeader, body: object,
                            traffic_class: str) -> bool:
        """Answer a SaslHandshake or SaslAuthenticate; False when the connection must close
        once the answer is sent."""
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            reply = self.sasl.handshake(header.api_version, body.mechanism)
        else:
            reply = await self.sasl.authenticate(header.api_version, body.auth_bytes)
        if self.sasl.principal is not None:
            self.principal = self.sasl.principal
        data = encode_response(header, reply.response)
        self.traffic.response(traffic_class, len(data))
        await self._queue_ready(data)
        return not reply.close

    async def _bare_sasl_token(self, token: bytes) -> bool:
        """A SASL token after SaslHandshake v0, answered bare; False on failure (Kafka closes
        the connection without an answer)."""
        reply = await self.sasl.bare_token(token)
        if reply is None:
            return False
        if self.sasl.principal is not None:
            self.principal = self.sasl.principal
        await self._queue_ready(_SIZE.pack(len(reply)) + reply)
        return True

    def _refused(self, header: RequestHeader, body: object) -> bool:
        """A broker-only request on a connection that has not proved it comes from a broker
        of this cluster: never executed, and the connection closes (so this logs once)."""
        if self.authentication.node_id is not None or not is_broker_only(header.api_key, body):
            return False
        log.warning("closing %s (client id %r): refused %s, which only brokers of this cluster "
                    "may send, on a connection not authenticated as one; not executed",
                    self.peer, header.client_id, api_name(header.api_key))
        return True

    async def _queue_ready(self, data: bytes) -> None:
        # Held until sent, as every response is (the sender releases it).
        await self.held.reserve(len(data))
        done = asyncio.get_running_loop().create_future()
        done.set_result([data])
        await self._responses.put(done)

    def _response_bound(self, header: RequestHeader, body: object) -> int:
        """The bytes a response may reach, held from the moment its request is read: only a
        Fetch response is large, and its request says how large it may be."""
        if header.api_key == ApiKey.FETCH:
            return response_bytes_bound(body, self.config.fetch_max_bytes)
        return 0

    async def _handle(self, header: RequestHeader, body: object, traffic_class: str,
                      expected: int, received_at: float) -> list | None:
        context = RequestContext(header, self.services, self.peer,
                                 self.authentication.node_id, self.principal, self.client_host,
                                 self.listener_name)
        try:
            response = await HANDLERS[header.api_key](context, body)
        except Exception:
            log.exception("closing %s: %s v%d handler failed", self.peer,
                          api_name(header.api_key), header.api_version)
            self.writer.close()
            response = None
        # (Cancelled at shutdown: what it holds is freed when the connection closes.)
        # None: acks=0. Buffers written in order (a Fetch response's record sets uncopied).
        if response is None:
            data = None
        elif context.encode_off_loop:
            data = await asyncio.to_thread(encode_response_buffers, header, response)
        else:
            data = encode_response_buffers(header, response)
        size = 0 if data is None else sum(map(len, data))
        if data is not None:
            self.traffic.response(traffic_class, size)
        await self.held.resize(expected, size)
        self.requests.observe(header.api_key, time.perf_counter() - received_at)
        return data

    async def _send_responses(self) -> None:
        carried = _NOTHING
        while True:
            pending = await self._responses.get() if carried is _NOTHING else carried
            if pending is None:
                return
            buffers = await self._response(pending)
            # The responses queued behind it that are ready too go out in the same write,
            # one system call: a producer's pipelined requests to many partitions are
            # answered together once a follower's fetch commits them.
            carried = _NOTHING
            while not self._responses.empty():
                following = self._responses.get_nowait()
                if following is None or not following.done():
                    carried = following
                    break
                buffers += await self._response(following)
            if not buffers:
                continue
            size = sum(map(len, buffers))
            try:
                if not self.writer.is_closing():  # else drain on, so the reader never blocks
                    self.writer.writelines(buffers)
                    await self.writer.drain()
            except ConnectionError:
                self._lost_bytes += size
                self.writer.close()
            finally:
                await self.held.release(size)

    @staticmethod
    async def _response(pending: asyncio.Future) -> list:
        """A queued response's buffers; none for a request answered with nothing (acks=0) or
        cancelled (shutdown)."""
        try:
            return await pending or []
        except asyncio.CancelledError:
            if not pending.cancelled():
                raise
            return []
