"""Authentication with real, unmodified clients (issue #18): confluent-kafka, kafka-python,
aiokafka, kcat and kafkajs produce and consume over SASL_SSL with SCRAM-SHA-512 and PLAIN
and over SSL with a client certificate (mutual TLS), in every storage mode; OAUTHBEARER with a signed JWT; SCRAM
users managed with AlterUserScramCredentials; and what must be refused: a wrong password, a
plaintext client on a TLS listener, a request before authentication.

One broker (support.secure_broker) serves the whole module.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import ssl
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.framing import encode_request
from support.identity_provider import KEY_ID, sign
from support.kcat import kcat
from support.processes import READY_TIMEOUT_S, BrokerProcess
from support.raw import assert_closed, call, entity, recv_frame
from support.wait import wait_until
from support.secure_broker import (
    ADMIN,
    ADMIN_PASSWORD,
    CERT_USER,
    OAUTH_AUDIENCE,
    PLAIN_PASSWORD,
    PLAIN_USER,
    SecureBroker,
    start_secure_broker,
)
from support.metrics import scrape, total

MODES = ("classic", "active-tiered", "diskless")
# Each client round trip: over SASL_SSL with SCRAM-SHA-512 as the admin, and with PLAIN;
# and over SSL with the client certificate of CERT_USER (mutual TLS).
MUTUAL_TLS = "mTLS"
LOGINS = {"SCRAM-SHA-512": (ADMIN, ADMIN_PASSWORD), "PLAIN": (PLAIN_USER, PLAIN_PASSWORD),
          MUTUAL_TLS: (CERT_USER, None)}
RECORDS = 20


@pytest.fixture(scope="module")
def secure(tmp_path_factory, s3_endpoint) -> SecureBroker:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"), s3_endpoint)
    yield broker
    broker.process.stop()


def _topic(secure: SecureBroker, mode: str) -> str:
    """A new topic of ``mode``, created by the admin over SCRAM-SHA-512."""
    name = f"sec-{mode}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(secure.librdkafka("SASL_SSL", "SCRAM-SHA-512"))
    admin.create_topics([NewTopic(name, 1, 1, config={"kipper.storage.mode": mode})])[
        name].result(30)
    return name


def _values() -> list[str]:
    return [f"v-{i}" for i in range(RECORDS)]


def _confluent_round_trip(config: dict[str, str], topic: str) -> list[str]:
    producer = Producer(config)
    for value in _values():
        producer.produce(topic, value.encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value().decode())
    consumer.close()
    return got


def _librdkafka(secure: SecureBroker, mechanism: str) -> dict[str, str]:
    if mechanism == MUTUAL_TLS:
        return secure.librdkafka("SSL")
    user, password = LOGINS[mechanism]
    return secure.librdkafka("SASL_SSL", mechanism, user, password)


def _client_certificate(secure: SecureBroker):
    return secure.ca.clients[CERT_USER]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", LOGINS)
def test_confluent_kafka(secure, mode, mechanism):
    assert _confluent_round_trip(_librdkafka(secure, mechanism), _topic(secure, mode)) == \
        _values()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", LOGINS)
def test_kafka_python(secure, mode, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    user, password = LOGINS[mechanism]
    topic = _topic(secure, mode)
    if mechanism == MUTUAL_TLS:
        client = _client_certificate(secure)
        settings = dict(bootstrap_servers=secure.address("SSL"), security_protocol="SSL",
                        ssl_cafile=str(secure.ca.ca_certificate),
                        ssl_certfile=str(client.certificate), ssl_keyfile=str(client.key))
    else:
        settings = dict(bootstrap_servers=secure.address("SASL_SSL"),
                        security_protocol="SASL_SSL", sasl_mechanism=mechanism,
                        sasl_plain_username=user, sasl_plain_password=password,
                        ssl_cafile=str(secure.ca.ca_certificate))
    producer = KafkaProducer(acks="all", **settings)
    for value in _values():
        producer.send(topic, value.encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000, **settings)
    got = [message.value.decode() for _, message in zip(range(RECORDS), consumer)]
    consumer.close()
    assert got == _values()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", LOGINS)
def test_aiokafka(secure, mode, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    user, password = LOGINS[mechanism]
    topic = _topic(secure, mode)

    async def round_trip() -> list[str]:
        if mechanism == MUTUAL_TLS:
            client = _client_certificate(secure)
            settings = dict(bootstrap_servers=secure.address("SSL"), security_protocol="SSL",
                            ssl_context=create_ssl_context(
                                cafile=str(secure.ca.ca_certificate),
                                certfile=str(client.certificate), keyfile=str(client.key)))
        else:
            settings = dict(bootstrap_servers=secure.address("SASL_SSL"),
                            security_protocol="SASL_SSL", sasl_mechanism=mechanism,
                            sasl_plain_username=user, sasl_plain_password=password,
                            ssl_context=create_ssl_context(
                                cafile=str(secure.ca.ca_certificate)))
        producer = AIOKafkaProducer(acks="all", **settings)
        await producer.start()
        try:
            for value in _values():
                await producer.send_and_wait(topic, value.encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", **settings)
        await consumer.start()
        try:
            got = []
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value.decode())
                    if len(got) == RECORDS:
                        return got
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == _values()


def _kcat_settings(config: dict[str, str]) -> list[str]:
    names = {"bootstrap.servers": None, "sasl.mechanism": "sasl.mechanisms"}
    args = ["-b", config["bootstrap.servers"]]
    for name, value in config.items():
        if name != "bootstrap.servers":
            args += ["-X", f"{names.get(name, name)}={value}"]
    return args


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", LOGINS)
def test_kcat(secure, mode, mechanism):
    settings = _kcat_settings(_librdkafka(secure, mechanism))
    topic = _topic(secure, mode)
    kcat(*settings, "-P", "-t", topic, stdin="\n".join(_values()).encode() + b"\n")
    out = kcat(*settings, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-c", str(RECORDS))
    assert out.split() == _values()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mechanism", LOGINS)
def test_kafkajs(secure, mode, mechanism, kafkajs, tmp_path):
    user, password = LOGINS[mechanism]
    topic = _topic(secure, mode)
    if mechanism == MUTUAL_TLS:
        client = _client_certificate(secure)
        login = ["--bootstrap", secure.address("SSL"), "--cert", str(client.certificate),
                 "--key", str(client.key)]
    else:
        login = ["--bootstrap", secure.address("SASL_SSL"), "--mechanism", mechanism.lower(),
                 "--username", user, "--password", password]
    stderr_path = tmp_path / "kafkajs.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.run(
            [shutil.which("node"), str(kafkajs / "sasl_client.mjs"), *login, "--topic", topic,
             "--count", str(RECORDS), "--ca", str(secure.ca.ca_certificate)],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, timeout=120)
    assert proc.returncode == 0, stderr_path.read_text(errors="replace")[-4000:]
    assert json.loads(proc.stdout)["values"] == _values()


def test_metadata_names_the_listener_connected_to(secure):
    """Each listener's clients are told that listener's address (advertised per listener)."""
    for listener, mechanism in (("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                ("SSL", None)):
        user, password = LOGINS.get(mechanism, (ADMIN, ADMIN_PASSWORD))
        metadata = AdminClient(secure.librdkafka(listener, mechanism, user, password)
                               ).list_topics(timeout=10)
        assert [f"{b.host}:{b.port}" for b in metadata.brokers.values()] == [
            secure.address(listener)]


def test_ssl_listener_refuses_a_client_without_certificate(secure):
    context = ssl.create_default_context(cafile=str(secure.ca.ca_certificate))
    with socket.create_connection(("127.0.0.1", secure.port("SSL")), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                # TLS 1.3: the refusal of the missing certificate comes with the first read.
                tls.sendall(_api_versions_frame())
                assert tls.recv(4) == b""
        except (ssl.SSLError, ConnectionError):
            pass
    wait_until(lambda: "on listener SSL: TLS handshake failed" in secure.log_tail(), 10)


def test_oauthbearer(secure):
    now = int(time.time())
    token = sign(secure.signing_key, {"sub": "dave", "aud": OAUTH_AUDIENCE, "iat": now,
                                      "exp": now + 600}, KEY_ID)

    def oauth_cb(_config):
        return token, now + 600

    config = {**secure.librdkafka("SASL_SSL", "OAUTHBEARER"), "oauth_cb": oauth_cb}
    assert _confluent_round_trip(config, _topic(secure, "classic")) == _values()


def test_wrong_password_is_refused_and_the_connection_closed(secure):
    config = secure.librdkafka("SASL_SSL", "SCRAM-SHA-512", ADMIN, "pw-Zq9-wrong")
    failures = _failed_authentications(secure)
    with pytest.raises(KafkaException):
        AdminClient(config).list_topics(timeout=3)
    assert "SASL SCRAM-SHA-512 authentication failed" in secure.log_tail()
    assert "pw-Zq9-wrong" not in secure.log_tail()  # no secret in the log
    assert _failed_authentications(secure) > failures
    # The raw exchange: SASL_AUTHENTICATION_FAILED with a message, then the connection ends.
    with _sasl_plaintext(secure) as sock:
        _handshake(sock, "PLAIN")
        answer = _authenticate(sock, f"\0{PLAIN_USER}\0nope".encode())
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert_closed(sock)


def test_a_request_before_authentication_closes_the_connection(secure):
    with _sasl_plaintext(secure) as sock:
        sock.sendall(_metadata_frame())
        assert_closed(sock)
    with _sasl_plaintext(secure) as sock:  # after the handshake, still before authentication
        _handshake(sock, "PLAIN")
        sock.sendall(_metadata_frame())
        assert_closed(sock)
    assert "not authenticated yet" in secure.log_tail()


def test_unsupported_mechanism_lists_the_enabled_ones(secure):
    with _sasl_plaintext(secure) as sock:
        answer = call(sock, ApiKey.SASL_HANDSHAKE, 1, entity(
            ApiKey.SASL_HANDSHAKE, 1, "SaslHandshakeRequest", mechanism="GSSAPI"))
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                          "OAUTHBEARER"}
        assert_closed(sock)


def test_handshake_v0_then_bare_tokens(secure):
    """Kafka before 1.0 (and clients speaking its way): after SaslHandshake v0 the tokens
    travel bare, size-prefixed, with no request header."""
    with _sasl_plaintext(secure) as sock:
        answer = call(sock, ApiKey.SASL_HANDSHAKE, 0, entity(
            ApiKey.SASL_HANDSHAKE, 0, "SaslHandshakeRequest", mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.none
        token = f"\0{PLAIN_USER}\0{PLAIN_PASSWORD}".encode()
        sock.sendall(len(token).to_bytes(4, "big") + token)
        assert recv_frame(sock) == b""
        assert call(sock, ApiKey.METADATA, 1, _metadata_request()).brokers


def test_sasl_requests_on_a_plaintext_listener_are_illegal(shared_broker):
    with socket.create_connection(("127.0.0.1", shared_broker.port), timeout=10) as sock:
        answer = call(sock, ApiKey.SASL_HANDSHAKE, 1, entity(
            ApiKey.SASL_HANDSHAKE, 1, "SaslHandshakeRequest", mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert _authenticate(sock, b"x").error_code == ErrorCode.illegal_sasl_state
        assert call(sock, ApiKey.METADATA, 1, _metadata_request()).brokers


def test_plaintext_client_on_a_tls_listener_is_refused_and_the_broker_stays_up(secure):
    with socket.create_connection(("127.0.0.1", secure.port("SASL_SSL")), timeout=10) as sock:
        sock.sendall(_api_versions_frame())
        assert_closed(sock)
    AdminClient(secure.librdkafka("SASL_SSL", "SCRAM-SHA-512")).list_topics(timeout=10)


def test_a_broker_with_a_wrong_password_is_refused_and_backs_off(secure, tmp_path):
    """A node whose inter-broker login is refused cannot register, and retries its login at
    most every few seconds rather than at every registration attempt (every 0.5 s)."""
    refusals = secure.log_tail(10_000).count("SASL SCRAM-SHA-512 authentication failed")
    intruder = BrokerProcess(
        tmp_path / "broker-1", node_id=1,
        env={**secure.process.env, "KIPPER_INTER_BROKER_SASL_PASSWORD": "pw-Xk2-wrong"},
        extra_args=["--controller", secure.address("SASL_SSL")])
    intruder.launch()
    try:
        # (as long as a node may take to start: its first login comes after its imports)
        wait_until(lambda: "refused SASL SCRAM-SHA-512 authentication as 'kipper-broker'"
                   in intruder.log_tail(), READY_TIMEOUT_S)
        time.sleep(3)
        assert intruder.alive()
        assert 1 not in AdminClient(secure.librdkafka("SASL_SSL", "SCRAM-SHA-512")
                                    ).list_topics(timeout=10).brokers
        new_refusals = (secure.log_tail(10_000).count("SASL SCRAM-SHA-512 authentication failed")
                        - refusals)
        # At most one login (and one retry) per connection the broker opens to the
        # controller (registration and heartbeats, metadata fetches, ISR changes): a retry
        # at every registration attempt would be several per connection in these 3 s.
        assert 1 <= new_refusals <= 4, new_refusals
        assert "pw-Xk2-wrong" not in secure.log_tail(10_000) + intruder.log_tail(10_000)
    finally:
        intruder.kill()


def test_scram_users_are_managed_with_the_admin_api(secure):
    admin = AdminClient(secure.librdkafka("SASL_SSL", "SCRAM-SHA-512"))
    user = f"bob-{uuid.uuid4().hex[:6]}"
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-secret")
    admin.alter_user_scram_credentials([upsert])[user].result(30)
    described = admin.describe_user_scram_credentials([user])[user].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert {ADMIN, user} <= set(everyone)

    bob = secure.librdkafka("SASL_SSL", "SCRAM-SHA-256", user, "bob-secret")
    AdminClient(bob).list_topics(timeout=10)

    # Kafka's errors, per user: unacceptable iterations, deleting what does not exist.
    too_few = UserScramCredentialUpsertion(
        "eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 10), b"x")
    missing = UserScramCredentialDeletion(f"nobody-{uuid.uuid4().hex[:6]}",
                                          ScramMechanism.SCRAM_SHA_512)
    results = admin.alter_user_scram_credentials([too_few, missing])
    with pytest.raises(KafkaException) as refused:
        results["eve"].result(30)
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    with pytest.raises(KafkaException) as refused:
        results[missing.user].result(30)
    assert refused.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND

    admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        user, ScramMechanism.SCRAM_SHA_256)])[user].result(30)
    with pytest.raises(KafkaException) as refused:
        admin.describe_user_scram_credentials([user])[user].result(30)
    assert refused.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException):
        AdminClient(bob).list_topics(timeout=3)


def _failed_authentications(secure: SecureBroker) -> float:
    return total([scrape(secure.process.metrics_url)], "kipper_failed_authentications_total")


def test_scram_users_with_kafka_python_admin(secure):
    from kafka.admin import (KafkaAdminClient, UserScramCredentialDeletion,
                             UserScramCredentialUpsertion)
    from kafka import KafkaConsumer

    admin = KafkaAdminClient(
        bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN,
        sasl_plain_password=ADMIN_PASSWORD, ssl_cafile=str(secure.ca.ca_certificate))
    user = f"kp-{uuid.uuid4().hex[:6]}"
    try:
        assert admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, "SCRAM-SHA-512", "kp-secret", iterations=4096)]) == {user: None}
        described = admin.describe_user_scram_credentials([user])[user]
        assert described["error"] is None
        assert [(int(i["mechanism"]), i["iterations"]) for i in
                described["credential_infos"]] == [(2, 4096)]
        # The new user logs in with kafka-python's own SCRAM client.
        consumer = KafkaConsumer(
            bootstrap_servers=secure.address("SASL_SSL"), security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
            sasl_plain_password="kp-secret", ssl_cafile=str(secure.ca.ca_certificate))
        assert consumer.topics() is not None
        consumer.close()
        missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
            f"nobody-{uuid.uuid4().hex[:6]}", "SCRAM-SHA-256")])
        assert list(missing.values()) == [
            "Attempt to delete a user credential that does not exist"]
    finally:
        admin.close()


# --- raw frames -------------------------------------------------------------------------


def _sasl_plaintext(secure: SecureBroker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", secure.port("SASL_PLAINTEXT")), timeout=10)


def _handshake(sock: socket.socket, mechanism: str) -> None:
    answer = call(sock, ApiKey.SASL_HANDSHAKE, 1, entity(
        ApiKey.SASL_HANDSHAKE, 1, "SaslHandshakeRequest", mechanism=mechanism))
    assert answer.error_code == ErrorCode.none


def _authenticate(sock: socket.socket, auth_bytes: bytes, version: int = 2):
    return call(sock, ApiKey.SASL_AUTHENTICATE, version, entity(
        ApiKey.SASL_AUTHENTICATE, version, "SaslAuthenticateRequest", auth_bytes=auth_bytes))


def _metadata_request():
    return entity(ApiKey.METADATA, 1, "MetadataRequest", topics=None)


def _metadata_frame() -> bytes:
    return encode_request(ApiKey.METADATA, 1, 1, "test", _metadata_request())


def _api_versions_frame() -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 0, 1, "test",
                          entity(ApiKey.API_VERSIONS, 0, "ApiVersionsRequest"))
