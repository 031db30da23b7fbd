"""SASL on one connection of a SASL listener, as Kafka's SaslServerAuthenticator runs it.

Until the client has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate are
served: anything else closes the connection unexecuted (Kafka's ILLEGAL_SASL_STATE), as do a
failed authentication (after its SASL_AUTHENTICATION_FAILED response) and a mechanism the
listener does not offer (after UNSUPPORTED_SASL_MECHANISM).

After SaslHandshake v0 the client sends its SASL tokens bare, each a size-prefixed frame with
no request header, and gets the server's tokens back the same way (Kafka before 1.0); after
v1 they travel in SaslAuthenticate requests.

KIP-368: with ``connections_max_reauth_ms`` (or a credential that expires, an OAUTHBEARER
token) the session has a lifetime, reported in SaslAuthenticate v1+. Past it, a connection
that sends anything but SaslHandshake/SaslAuthenticate is closed; a re-authentication must
use the same mechanism and end as the same principal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import make

from .handlers.registry import response_module
from .security.listener_security import AuthenticationFailures
from .security.oauthbearer import JwksUnavailable, OAuthBearerServer
from .security.sasl import (
    SaslAuthenticationFailed,
    SaslServerConfig,
    SaslServerMechanism,
    UnsupportedSaslMechanism,
    server_mechanism,
    session_lifetime_ms,
)

log = logging.getLogger(__name__)

# What a client may send before it has authenticated.
BEFORE_AUTHENTICATION = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                                   ApiKey.SASL_AUTHENTICATE})
SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


@dataclass(frozen=True)
class SaslReply:
    """What to send back (a response entity, or bare token bytes after Handshake v0) and
    whether the connection closes once it is sent."""

    response: object | None
    close: bool = False


class SaslSession:
    def __init__(self, config: SaslServerConfig, connections_max_reauth_ms: int,
                 peer: str, failures: AuthenticationFailures) -> None:
        self.config = config
        self.failures = failures
        self.max_reauth_ms = connections_max_reauth_ms
        self.peer = peer
        # The exchange under way (after a SaslHandshake), and its mechanism's name.
        self._exchange: SaslServerMechanism | None = None
        self._mechanism: str | None = None
        # After SaslHandshake v0: the next frames are bare tokens.
        self.bare_tokens = False
        # Set once authenticated; kept across re-authentications (which must not change it).
        self.principal: str | None = None
        self._expires_at: float | None = None  # time.monotonic()

    def refusal(self, api_key: int) -> str | None:
        """Why a request of ``api_key`` may not be served now (the connection closes), or
        None if it may."""
        if self.principal is None:
            if api_key not in BEFORE_AUTHENTICATION:
                return "not authenticated yet (SASL listener)"
            if api_key == ApiKey.API_VERSIONS and self._exchange is not None:
                return "ApiVersions inside a SASL exchange"  # Kafka: only before SaslHandshake
            return None
        if (api_key not in SASL_APIS and self._expires_at is not None
                and time.monotonic() >= self._expires_at):
            return "its SASL session expired without re-authentication (KIP-368)"
        return None

    def handshake(self, version: int, mechanism: str) -> SaslReply:
        module = response_module(ApiKey.SASL_HANDSHAKE, version)
        enabled = self.config.enabled_mechanisms

        def answer(error: ErrorCode, close: bool) -> SaslReply:
            return SaslReply(make(module.SaslHandshakeResponse, error_code=error,
                                  mechanisms=enabled), close)

        if self._exchange is not None and not self._exchange.complete:
            log.warning("closing %s: a second SaslHandshake inside an exchange", self.peer)
            return answer(ErrorCode.illegal_sasl_state, True)
        if self.principal is not None and (version == 0 or mechanism != self._mechanism):
            log.warning("closing %s: re-authentication must use SaslHandshake v1+ and the "
                        "same mechanism (%s, asked %s v%d)", self.peer, self._mechanism,
                        mechanism, version)
            return answer(ErrorCode.illegal_sasl_state, True)
        try:
            self._exchange = server_mechanism(mechanism, self.config)
        except UnsupportedSaslMechanism:
            log.warning("closing %s: SASL mechanism %r is not enabled (%s)", self.peer,
                        mechanism, ",".join(enabled))
            return answer(ErrorCode.unsupported_sasl_mechanism, True)
        self._mechanism = mechanism
        self.bare_tokens = version == 0
        return answer(ErrorCode.none, False)

    async def authenticate(self, version: int, auth_bytes: bytes) -> SaslReply:
        """One SaslAuthenticate round."""
        module = response_module(ApiKey.SASL_AUTHENTICATE, version)
        if self._exchange is None or self._exchange.complete or self.bare_tokens:
            log.warning("closing %s: SaslAuthenticate without a SaslHandshake v1 first",
                        self.peer)
            return SaslReply(make(module.SaslAuthenticateResponse,
                                  error_code=ErrorCode.illegal_sasl_state,
                                  error_message="Unexpected SaslAuthenticate request",
                                  auth_bytes=b""), True)
        try:
            reply, lifetime_ms = await self._step(auth_bytes)
        except SaslAuthenticationFailed as failure:
            return SaslReply(make(module.SaslAuthenticateResponse,
                                  error_code=ErrorCode.sasl_authentication_failed,
                                  error_message=failure.message, auth_bytes=b""), True)
        return SaslReply(make(module.SaslAuthenticateResponse, error_code=ErrorCode.none,
                              error_message=None, auth_bytes=reply,
                              session_lifetime=lifetime_ms))

    async def bare_token(self, token: bytes) -> bytes | None:
        """One token after SaslHandshake v0: the reply token, or None when authentication
        failed (Kafka then just closes the connection)."""
        assert self._exchange is not None
        try:
            reply, _ = await self._step(token)
        except SaslAuthenticationFailed:
            return None
        if self._exchange.complete:
            self.bare_tokens = False  # from now on, Kafka requests
        return reply

    async def _step(self, client_bytes: bytes) -> tuple[bytes, int]:
        """Feed the exchange; once it completes, the connection acts as its principal. The
        lifetime is 0 until then (and when sessions do not expire)."""
        exchange = self._exchange
        assert exchange is not None and self._mechanism is not None
        if isinstance(exchange, OAuthBearerServer):
            await self._refresh_jwks()
        try:
            reply = exchange.step(client_bytes)
            if not exchange.complete:
                return reply, 0
            if self.principal is not None and exchange.principal != self.principal:
                raise SaslAuthenticationFailed(
                    f"Cannot change principals during re-authentication from "
                    f"{self.principal}: {exchange.principal}")
        except SaslAuthenticationFailed as failure:
            # The message is the client's (never a secret): one line, then the close.
            log.warning("closing %s: SASL %s authentication failed: %s", self.peer,
                        self._mechanism, failure.message)
            self.failures.add()
            raise
        now_ms = int(time.time() * 1000)
        lifetime_ms = session_lifetime_ms(exchange.credential_expiry_ms, self.max_reauth_ms,
                                          now_ms)
        reauthenticated = self.principal is not None
        self.principal = exchange.principal
        self._expires_at = time.monotonic() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        log.debug("%s %s as %s with %s", self.peer,
                  "re-authenticated" if reauthenticated else "authenticated", self.principal,
                  self._mechanism)
        return reply, lifetime_ms

    async def _refresh_jwks(self) -> None:
        """Reload the JWKS when it is due (a rotated key, a changed file), off the loop; on
        failure the keys held go on being used."""
        validator = self.config.oauthbearer
        if validator is None or not validator.keys.refresh_due():
            return
        try:
            await asyncio.to_thread(validator.keys.refresh)
        except JwksUnavailable as e:
            log.warning("JWKS refresh failed, keeping the keys held: %s", e)
