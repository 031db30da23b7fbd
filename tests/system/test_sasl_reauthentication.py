"""KIP-368 re-authentication on a broker with ``connections_max_reauth_ms``: the session
lifetime is reported, a connection past it is closed unless it re-authenticates (as the same
principal), and librdkafka, which re-authenticates on its own, keeps producing."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import millis
from protocol.framing import encode_request
from support.raw import assert_closed, call, entity
from support.secure_broker import (
    OTHER_PLAIN_PASSWORD,
    OTHER_PLAIN_USER,
    PLAIN_PASSWORD,
    PLAIN_USER,
    SecureBroker,
    start_secure_broker,
)

LIFETIME_MS = 2000


@pytest.fixture(scope="module")
def secure(tmp_path_factory, s3_endpoint) -> SecureBroker:
    broker = start_secure_broker(tmp_path_factory.mktemp("reauth"), s3_endpoint,
                                 {"KIPPER_CONNECTIONS_MAX_REAUTH_MS": str(LIFETIME_MS)})
    yield broker
    broker.process.stop()


def _login(sock: socket.socket, user: str, password: str):
    handshake = call(sock, ApiKey.SASL_HANDSHAKE, 1, entity(
        ApiKey.SASL_HANDSHAKE, 1, "SaslHandshakeRequest", mechanism="PLAIN"))
    assert handshake.error_code == ErrorCode.none
    return call(sock, ApiKey.SASL_AUTHENTICATE, 2, entity(
        ApiKey.SASL_AUTHENTICATE, 2, "SaslAuthenticateRequest",
        auth_bytes=f"\0{user}\0{password}".encode()))


def _metadata(sock: socket.socket):
    return call(sock, ApiKey.METADATA, 1, entity(ApiKey.METADATA, 1, "MetadataRequest",
                                                 topics=None))


def _connect(secure: SecureBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", secure.port("SASL_PLAINTEXT")), timeout=10)


def test_session_lifetime_is_reported_and_enforced(secure):
    with _connect(secure) as sock:
        answer = _login(sock, PLAIN_USER, PLAIN_PASSWORD)
        assert answer.error_code == ErrorCode.none
        assert millis(answer.session_lifetime) == LIFETIME_MS
        assert _metadata(sock).brokers
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        sock.sendall(encode_request(ApiKey.METADATA, 1, 9, "test", entity(
            ApiKey.METADATA, 1, "MetadataRequest", topics=None)))
        assert_closed(sock)
    assert "SASL session expired" in secure.log_tail()


def test_reauthentication_renews_the_session(secure):
    with _connect(secure) as sock:
        assert _login(sock, PLAIN_USER, PLAIN_PASSWORD).error_code == ErrorCode.none
        time.sleep(LIFETIME_MS / 2000)
        assert _login(sock, PLAIN_USER, PLAIN_PASSWORD).error_code == ErrorCode.none
        time.sleep(LIFETIME_MS / 2000 + 0.3)  # past the first session, inside the second
        assert _metadata(sock).brokers


def test_reauthentication_as_another_principal_is_refused(secure):
    with _connect(secure) as sock:
        assert _login(sock, PLAIN_USER, PLAIN_PASSWORD).error_code == ErrorCode.none
        answer = _login(sock, OTHER_PLAIN_USER, OTHER_PLAIN_PASSWORD)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals" in answer.error_message
        assert_closed(sock)


def test_librdkafka_reauthenticates_and_keeps_producing(secure):
    expired_before = secure.log_tail(10_000).count("SASL session expired")
    config = secure.librdkafka("SASL_SSL", "SCRAM-SHA-512")
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(config)
    delivered = []
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, _: delivered.append(err))
        sent += 1
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert delivered == [None] * sent
    # It re-authenticated in time: the broker closed none of its connections.
    assert secure.log_tail(10_000).count("SASL session expired") == expired_before
