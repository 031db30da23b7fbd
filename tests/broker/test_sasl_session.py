"""broker.sasl_session: the SASL state of a connection, without sockets: what is served
before authentication, the handshake and authenticate rounds and their refusals, bare
tokens after SaslHandshake v0, KIP-368 lifetimes and re-authentication rules."""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from broker.sasl_session import SaslSession
from broker.security.listener_security import AuthenticationFailures
from broker.security.sasl import SaslServerConfig
from protocol.apis import ApiKey
from protocol.build import millis

CONFIG = SaslServerConfig(("PLAIN", "SCRAM-SHA-512"), {"alice": "pw", "bob": "pw2"})


def session(reauth_ms: int = 0) -> SaslSession:
    return SaslSession(CONFIG, reauth_ms, "127.0.0.1:1", AuthenticationFailures())


def plain(user: str = "alice", password: str = "pw") -> bytes:
    return f"\0{user}\0{password}".encode()


async def test_only_sasl_and_api_versions_before_authentication():
    sasl = session()
    assert sasl.refusal(ApiKey.API_VERSIONS) is None
    assert sasl.refusal(ApiKey.SASL_HANDSHAKE) is None
    assert sasl.refusal(ApiKey.METADATA) is not None
    assert not sasl.handshake(1, "PLAIN").close
    assert sasl.refusal(ApiKey.API_VERSIONS) is not None  # only before the handshake
    reply = await sasl.authenticate(2, plain())
    assert reply.response.error_code == ErrorCode.none and not reply.close
    assert sasl.principal == "User:alice"
    assert millis(reply.response.session_lifetime) == 0
    assert sasl.refusal(ApiKey.METADATA) is None


async def test_refusals_close_the_connection():
    sasl = session()
    reply = await sasl.authenticate(2, plain())  # no handshake first
    assert (reply.response.error_code, reply.close) == (ErrorCode.illegal_sasl_state, True)
    reply = session().handshake(1, "GSSAPI")
    assert (reply.response.error_code, reply.close) == (ErrorCode.unsupported_sasl_mechanism,
                                                        True)
    assert reply.response.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    sasl = session()
    sasl.handshake(1, "SCRAM-SHA-512")
    assert sasl.handshake(1, "SCRAM-SHA-512").close  # a second one inside the exchange
    failures = AuthenticationFailures()
    sasl = SaslSession(CONFIG, 0, "peer", failures)
    sasl.handshake(1, "PLAIN")
    reply = await sasl.authenticate(1, plain(password="nope"))
    assert (reply.response.error_code, reply.close) == (ErrorCode.sasl_authentication_failed,
                                                        True)
    assert sasl.principal is None and failures.count == 1


async def test_bare_tokens_after_handshake_v0():
    sasl = session()
    sasl.handshake(0, "PLAIN")
    assert sasl.bare_tokens
    assert (await sasl.authenticate(1, plain())).close  # not SaslAuthenticate now
    sasl = session()
    sasl.handshake(0, "PLAIN")
    assert await sasl.bare_token(plain()) == b""
    assert sasl.principal == "User:alice" and not sasl.bare_tokens
    sasl = session()
    sasl.handshake(0, "PLAIN")
    assert await sasl.bare_token(plain(password="x")) is None


async def test_sessions_expire_and_reauthentication_keeps_the_principal():
    sasl = session(reauth_ms=100)
    sasl.handshake(1, "PLAIN")
    reply = await sasl.authenticate(2, plain())
    assert millis(reply.response.session_lifetime) == 100
    time.sleep(0.12)
    assert "expired" in sasl.refusal(ApiKey.METADATA)
    assert sasl.refusal(ApiKey.SASL_HANDSHAKE) is None
    assert sasl.handshake(0, "PLAIN").close  # re-authentication needs v1
    sasl.handshake(1, "PLAIN")
    assert not (await sasl.authenticate(2, plain())).close
    assert sasl.refusal(ApiKey.METADATA) is None
    assert sasl.handshake(1, "SCRAM-SHA-512").close  # another mechanism
    sasl.handshake(1, "PLAIN")
    reply = await sasl.authenticate(2, plain("bob", "pw2"))
    assert reply.close and "Cannot change principals" in reply.response.error_message
    assert sasl.principal == "User:alice"
