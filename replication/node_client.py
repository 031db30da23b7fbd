"""A small async Kafka client for broker-to-broker and broker-to-controller calls.

It speaks only to kipper nodes, so it sends every API at kipper's own highest version.
One pipelined connection per remote address; a broken connection fails its pending
calls with ConnectionError and is replaced on the next call. Every connection proves this
node's membership of the cluster first (BROKER_CHALLENGE / BROKER_PROOF, protocol.internal):
the remote node serves its inter-broker requests only after that. On a secured
inter-broker listener (``NodeSecurity``) the connection first does TLS and SASL, as any
client of that listener must.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
import time
from dataclasses import dataclass
from typing import Any, Protocol

import scramp

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from protocol.apis import VERSION_RANGES, ApiKey
from protocol.build import make, millis
from protocol.framing import decode_response, encode_request
from protocol.internal import ClusterCredentials, InternalApiKey, JsonBody, is_internal

from .frame_reader import FrameReader, FrameSizeError, open_frame_connection
from .partition import PartitionError

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
# After a refused proof, calls fail at once for this long instead of connecting again: a
# node with the wrong secret does not make its peers log a refusal per retry.
REFUSED_BACKOFF_S = 5.0
# A SASL session (KIP-368) is renewed once this share of its lifetime has passed, as Kafka's
# clients do it between 85 and 95 %.
REAUTHENTICATE_AT = 0.85


class ConnectionTraffic(Protocol):
    """Byte accounting of one opened connection (broker.traffic counts by AZ)."""

    def request(self, api_key: int, body: Any, nbytes: int) -> str:
        """Count a request frame; return its traffic class, for its response."""

    def response(self, traffic_class: str, nbytes: int) -> None: ...


class TrafficCounter(Protocol):
    def opened_connection(self, host: str, port: int) -> ConnectionTraffic: ...


class AuthenticationFailed(ConnectionError):
    """The remote node refused this node: its SASL login or its proof of membership."""


@dataclass(frozen=True)
class NodeSecurity:
    """How connections to other nodes are secured: TLS with ``tls``, SASL with
    ``sasl_mechanism`` (PLAIN or SCRAM-SHA-256/512) as ``username``; none = plaintext."""

    tls: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""

    def __repr__(self) -> str:  # never the password, in a log or a traceback
        return (f"NodeSecurity(tls={self.tls is not None}, sasl_mechanism="
                f"{self.sasl_mechanism!r}, username={self.username!r})")


class _SaslClient:
    """The client side of the mechanisms a node authenticates to another with."""

    def __init__(self, security: NodeSecurity) -> None:
        self._mechanism = security.sasl_mechanism
        if self._mechanism == "PLAIN":
            self._scram = None
            self._first = f"\0{security.username}\0{security.password}".encode()
        elif self._mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            self._scram = scramp.ScramClient([self._mechanism], security.username,
                                             security.password)
            self._first = self._scram.get_client_first().encode()
        else:
            raise ValueError(f"inter-broker SASL mechanism {self._mechanism} is not supported "
                             "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")

    def messages(self, server_replies: list[bytes]) -> bytes | None:
        """The next message to send given the server's replies so far; None when done."""
        if not server_replies:
            return self._first
        if self._scram is None:
            return None
        if len(server_replies) == 1:
            self._scram.set_server_first(server_replies[0].decode())
            return self._scram.get_client_final().encode()
        if len(server_replies) == 2:
            self._scram.set_server_final(server_replies[1].decode())
        return None


class NodeConnection:
    def __init__(self, host: str, port: int, client_id: str, credentials: ClusterCredentials,
                 traffic: ConnectionTraffic, security: NodeSecurity = NodeSecurity()) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.credentials = credentials
        self.traffic = traffic
        self.security = security
        self._writer: asyncio.StreamWriter | None = None
        # correlation id -> (future, api key, version, traffic class)
        self._pending: dict[int, tuple[asyncio.Future, int, int, str]] = {}
        self._correlation = itertools.count(1)
        self._reader_task: asyncio.Task | None = None
        self._connect_lock = asyncio.Lock()
        self._refused: tuple[float, AuthenticationFailed] | None = None  # (until, why)
        # When the SASL session must be renewed (time.monotonic()); None: it never expires.
        self._reauthenticate_at: float | None = None

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _ensure_connected(self, timeout: float) -> None:
        async with self._connect_lock:
            if self.connected:
                return
            if self._refused is not None and time.monotonic() < self._refused[0]:
                raise self._refused[1]
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
            # arrives as the call completes, and a cancelled replica fetcher or metadata
            # loop then runs on, which kept brokers from stopping.
            async with asyncio.timeout(timeout):
                reader, self._writer = await open_frame_connection(
                    self.host, self.port, ssl=self.security.tls,
                    ssl_handshake_timeout=timeout if self.security.tls else None)
            self._reader_task = asyncio.create_task(self._read_responses(reader))
            await self._authenticate(timeout)

    async def _sasl_authenticate(self, timeout: float) -> None:
        """SaslHandshake v1 and SaslAuthenticate rounds, before anything else is sent."""
        mechanism = self.security.sasl_mechanism
        handshake = await self._send(ApiKey.SASL_HANDSHAKE,
                                     make(SaslHandshakeRequest, mechanism=mechanism), timeout)
        if handshake.error_code != ErrorCode.none:
            raise AuthenticationFailed(f"{self.host}:{self.port} does not offer SASL "
                                       f"{mechanism} (it offers "
                                       f"{', '.join(handshake.mechanisms)})")
        client = _SaslClient(self.security)
        replies: list[bytes] = []
        while (message := client.messages(replies)) is not None:
            response = await self._send(ApiKey.SASL_AUTHENTICATE,
                                        make(SaslAuthenticateRequest, auth_bytes=message),
                                        timeout)
            if response.error_code != ErrorCode.none:
                raise AuthenticationFailed(f"{self.host}:{self.port} refused SASL {mechanism} "
                                           f"authentication as {self.security.username!r}: "
                                           f"{response.error_message}")
            replies.append(response.auth_bytes)
        lifetime_ms = millis(response.session_lifetime)
        self._reauthenticate_at = (time.monotonic() + lifetime_ms * REAUTHENTICATE_AT / 1000
                                   if lifetime_ms > 0 else None)

    async def _renew_session(self, timeout: float) -> None:
        """Re-authenticate on this connection before the broker's session ends (KIP-368):
        past it, the broker would close the connection on the next request."""
        async with self._connect_lock:
            if (self._reauthenticate_at is None or time.monotonic() < self._reauthenticate_at
                    or not self.connected):
                return
            try:
                await self._sasl_authenticate(timeout)
            except BaseException:
                await self.close()
                raise

    async def _authenticate(self, timeout: float) -> None:
        proving = False
        try:
            if self.security.sasl_mechanism is not None:
                await self._sasl_authenticate(timeout)
            challenge = await self._send(InternalApiKey.BROKER_CHALLENGE, JsonBody({}), timeout)
            proving = True
            await self._send(InternalApiKey.BROKER_PROOF, JsonBody({
                "node_id": self.credentials.node_id,
                "proof": self.credentials.proof(challenge.value["challenge"])}), timeout)
        except BaseException as e:
            # Never leave an unauthenticated connection for the next call to use.
            await self.close()
            if isinstance(e, AuthenticationFailed):  # SASL refused: back off the same way
                self._refused = (time.monotonic() + REFUSED_BACKOFF_S, e)
                raise
            if proving and isinstance(e, ConnectionError):  # the peer refused the proof
                refused = AuthenticationFailed(
                    f"{self.host}:{self.port} closed the connection on node "
                    f"{self.credentials.node_id}'s proof of membership: is cluster_secret "
                    f"(KIPPER_CLUSTER_SECRET) the same on every node? ({e})")
                self._refused = (time.monotonic() + REFUSED_BACKOFF_S, refused)
                raise refused from None
            raise

    async def _read_responses(self, reader: FrameReader) -> None:
        try:
            while True:
                frame = await reader.read_frame()
                size = len(frame)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue
                future, api_key, version, traffic_class = entry
                self.traffic.response(traffic_class, _SIZE.size + size)
                if not future.done():
                    try:
                        future.set_result(decode_response(frame, api_key, version)[1])
                    except Exception as e:  # a response we cannot decode ends this call only
                        future.set_exception(e)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, FrameSizeError) as e:
            self._fail_pending(ConnectionError(f"connection to {self.host}:{self.port} lost: {e}"))
        except asyncio.CancelledError:
            self._fail_pending(ConnectionError("connection closed"))
            raise

    def _fail_pending(self, error: Exception) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        pending, self._pending = self._pending, {}
        for future, *_ in pending.values():
            if not future.done():
                future.set_exception(error)

    async def call(self, api_key: ApiKey | InternalApiKey, body: Any, timeout: float = 30.0,
                   version: int | None = None) -> Any:
        await self._ensure_connected(timeout)
        if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            await self._renew_session(timeout)
        return await self._send(api_key, body, timeout, version)

    async def _send(self, api_key: ApiKey | InternalApiKey, body: Any, timeout: float,
                    version: int | None = None) -> Any:
        if version is None:
            version = 0 if is_internal(api_key) else VERSION_RANGES[api_key][1]
        correlation_id = next(self._correlation)
        future = asyncio.get_running_loop().create_future()
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        traffic_class = self.traffic.request(api_key, body, len(frame))
        self._pending[correlation_id] = (future, int(api_key), version, traffic_class)
        try:
            self._writer.write(frame)
            async with asyncio.timeout(timeout):  # not wait_for: see _ensure_connected
                return await future
        except TimeoutError:
            # Said, so that a caller's log line tells which call went unanswered.
            raise TimeoutError(f"no answer to {getattr(api_key, 'name', api_key)} from "
                               f"{self.host}:{self.port} in {timeout:g} s") from None
        finally:
            self._pending.pop(correlation_id, None)

    async def latest_offset(self, topic: str, partition: int, timeout: float) -> int:
        """ListOffsets(LATEST) of a partition this node leads: its high watermark, i.e.
        everything committed there. Raises PartitionError with the node's error."""
        request = make(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
            make(ListOffsetsTopic, name=topic, partitions=(
                make(ListOffsetsPartition, partition_index=partition, current_leader_epoch=-1,
                     timestamp=-1),)),))
        answer = (await self.call(ApiKey.LIST_OFFSETS, request, timeout)).topics[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            raise PartitionError(answer.error_code, f"ListOffsets of {topic}-{partition} at "
                                                    f"{self.host}:{self.port}")
        return answer.offset

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
        self._writer = None


class NodeClient:
    """Connections to other kipper nodes, keyed by address."""

    def __init__(self, client_id: str, credentials: ClusterCredentials,
                 traffic: TrafficCounter, security: NodeSecurity = NodeSecurity()) -> None:
        self.client_id = client_id
        self.credentials = credentials
        self.traffic = traffic
        self.security = security
        self._connections: dict[tuple[str, int, str], NodeConnection] = {}

    def connection(self, host: str, port: int, purpose: str = "control") -> NodeConnection:
        """One connection per (address, purpose): responses come back in request order, so
        a long poll (replica or metadata fetch) must not share a connection with calls that
        should be answered at once."""
        key = (host, port, purpose)
        if key not in self._connections:
            self._connections[key] = NodeConnection(
                host, port, self.client_id, self.credentials,
                self.traffic.opened_connection(host, port), self.security)
        return self._connections[key]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()))
        self._connections.clear()
