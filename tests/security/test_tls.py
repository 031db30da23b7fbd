"""TLS listeners (broker/security/tls.py): real handshakes over 127.0.0.1 between an asyncio
server and client built from Kafka-named settings and dev_ca certificates; the principal of a
client certificate, as Kafka's SslPrincipalMapper gives it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker.security.dev_ca import DevCa, create_dev_ca
from broker.security.tls import (
    ANONYMOUS,
    ClientAuth,
    PrincipalMapper,
    PrincipalMappingError,
    TlsConfigError,
    TlsSettings,
    client_context,
    distinguished_name,
    peer_principal,
    server_context,
)

ALICE_DN = "CN=alice,OU=clients,O=kipper dev"
CN_RULE = "RULE:^CN=(.*?),OU=.*$/$1/L"
TIMEOUT_S = 10
# How a refused client learns it: a TLS alert, or the connection closed or reset after it.
REFUSED = (ssl.SSLError, ConnectionError)
# What a Kafka client configured for PLAINTEXT sends first: ApiVersions v3 (header v2: key 18,
# version 3, correlation id 1, client id, no tags; body: compact software name and version).
_API_VERSIONS = (struct.pack(">hhih", 18, 3, 1, 9) + b"kafka-cli" + b"\x00"
                 + b"\x06kafka" + b"\x042.0" + b"\x00")
API_VERSIONS_REQUEST = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS


@pytest.fixture(scope="module")
def dev_ca(tmp_path_factory) -> DevCa:
    return create_dev_ca(tmp_path_factory.mktemp("pki"), broker_ids=(0,), users=("alice",))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory) -> DevCa:
    """A second CA, trusted by nobody."""
    return create_dev_ca(tmp_path_factory.mktemp("other-pki"), broker_ids=(0,),
                         users=("mallory",))


def broker_settings(dev_ca: DevCa, **changes) -> TlsSettings:
    return replace(TlsSettings(certificate=dev_ca.brokers[0].keystore, ca=dev_ca.ca_certificate),
                   **changes)


def client_settings(dev_ca: DevCa, user: str | None = None, **changes) -> TlsSettings:
    identity = dev_ca.clients[user] if user else None
    return replace(TlsSettings(ca=dev_ca.ca_certificate,
                               certificate=identity and identity.certificate,
                               key=identity and identity.key), **changes)


@dataclass
class Accepted:
    """What the server saw of each connection it served."""

    principals: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def tls_server(context: ssl.SSLContext,
                     mapper: PrincipalMapper | None = None) -> AsyncIterator[tuple[int, Accepted]]:
    """A server on 127.0.0.1 (ephemeral port) that records each client's principal and
    echoes one line; closed on exit."""
    accepted = Accepted()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        accepted.principals.append(peer_principal(ssl_object, mapper or PrincipalMapper()))
        accepted.versions.append(ssl_object.version())
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()
        await server.wait_closed()


async def echo(port: int, context: ssl.SSLContext, server_hostname: str = "localhost") -> str:
    """Connect, send a line, return the negotiated TLS version once it comes back."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=server_hostname), TIMEOUT_S)
    try:
        writer.write(b"ping\n")
        answer = await asyncio.wait_for(reader.readline(), TIMEOUT_S)
        if not answer:
            raise ConnectionAbortedError("the server closed the connection")
        assert answer == b"ping\n"
        return writer.get_extra_info("ssl_object").version()
    finally:
        writer.close()
        with contextlib.suppress(ssl.SSLError, ConnectionError):
            await writer.wait_closed()


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
async def test_handshake_with_each_protocol_version(dev_ca, version):
    context = server_context(broker_settings(dev_ca, enabled_protocols=(version,)))
    async with tls_server(context) as (port, accepted):
        assert await echo(port, client_context(client_settings(dev_ca))) == version
    assert accepted.principals == [ANONYMOUS]
    assert accepted.versions == [version]


async def test_a_client_limited_to_tls_1_2_cannot_reach_a_tls_1_3_listener(dev_ca):
    context = server_context(broker_settings(dev_ca, enabled_protocols=("TLSv1.3",)))
    async with tls_server(context) as (port, accepted):
        with pytest.raises(REFUSED):
            await echo(port, client_context(client_settings(dev_ca,
                                                            enabled_protocols=("TLSv1.2",))))
    assert accepted.principals == []


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
async def test_mutual_tls_gives_the_certificate_subject_as_principal(dev_ca, version):
    context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUIRED,
                                             enabled_protocols=(version,)))
    async with tls_server(context) as (port, accepted):
        await echo(port, client_context(client_settings(dev_ca, "alice")))
    assert accepted.principals == [f"User:{ALICE_DN}"]


async def test_mapping_rules_shorten_the_principal(dev_ca):
    context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUIRED))
    async with tls_server(context, PrincipalMapper(f"{CN_RULE},DEFAULT")) as (port, accepted):
        await echo(port, client_context(client_settings(dev_ca, "alice")))
    assert accepted.principals == ["User:alice"]


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
async def test_required_client_auth_refuses_a_client_without_certificate(dev_ca, version):
    """TLS 1.2 fails the handshake; in TLS 1.3 the client finishes its side first and learns
    of the refusal (an alert, then the close) on its first read. Either way the server never
    serves it."""
    context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUIRED,
                                             enabled_protocols=(version,)))
    async with tls_server(context) as (port, accepted):
        with pytest.raises(REFUSED):
            await echo(port, client_context(client_settings(dev_ca)))
        # the listener still serves a client that has one
        await echo(port, client_context(client_settings(dev_ca, "alice")))
    assert accepted.principals == [f"User:{ALICE_DN}"]


async def test_required_client_auth_refuses_a_certificate_of_another_ca(dev_ca, other_ca):
    context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUIRED))
    mallory = client_settings(dev_ca, certificate=other_ca.clients["mallory"].certificate,
                              key=other_ca.clients["mallory"].key)
    async with tls_server(context) as (port, accepted):
        with pytest.raises(REFUSED):
            await echo(port, client_context(mallory))
    assert accepted.principals == []


async def test_requested_client_auth_lets_a_client_without_certificate_in_as_anonymous(dev_ca):
    context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUESTED))
    async with tls_server(context) as (port, accepted):
        await echo(port, client_context(client_settings(dev_ca)))
        await echo(port, client_context(client_settings(dev_ca, "alice")))
    assert accepted.principals == [ANONYMOUS, f"User:{ALICE_DN}"]


async def test_client_refuses_a_broker_certificate_of_an_untrusted_ca(dev_ca, other_ca):
    async with tls_server(server_context(broker_settings(other_ca))) as (port, accepted):
        with pytest.raises(ssl.SSLCertVerificationError):
            await echo(port, client_context(client_settings(dev_ca)))
    assert accepted.principals == []


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
async def test_hostname_verification_accepts_the_names_of_the_broker_certificate(dev_ca, host):
    async with tls_server(server_context(broker_settings(dev_ca))) as (port, _):
        await echo(port, client_context(client_settings(dev_ca)), server_hostname=host)


async def test_hostname_verification_refuses_another_name_unless_turned_off(dev_ca):
    async with tls_server(server_context(broker_settings(dev_ca))) as (port, accepted):
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await echo(port, client_context(client_settings(dev_ca)),
                       server_hostname="kafka.example.com")
        unchecked = TlsSettings.from_properties({
            "ssl.truststore.location": str(dev_ca.ca_certificate),
            "ssl.endpoint.identification.algorithm": ""})
        await echo(port, client_context(unchecked), server_hostname="kafka.example.com")
    assert accepted.principals == [ANONYMOUS]


async def test_a_plaintext_client_gets_a_closed_connection_and_the_server_goes_on(dev_ca):
    """A Kafka client on the wrong protocol sends a request frame where a ClientHello should
    be: the server's handshake fails with an SSL error, the client sees its connection closed,
    and the listener goes on serving. (asyncio reports the failure to the loop's exception
    handler in debug mode only: a server using ``start_server(ssl=...)`` never sees it.)"""
    loop = asyncio.get_running_loop()
    reported: list[BaseException | None] = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    loop.set_debug(True)
    try:
        async with tls_server(server_context(broker_settings(dev_ca))) as (port, accepted):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(API_VERSIONS_REQUEST)
            with contextlib.suppress(ConnectionError):
                while await asyncio.wait_for(reader.read(1024), TIMEOUT_S):
                    pass  # a TLS alert at most, then the end of the stream
            writer.close()
            await echo(port, client_context(client_settings(dev_ca)))
    finally:
        loop.set_debug(False)
        loop.set_exception_handler(None)
    assert accepted.principals == [ANONYMOUS]
    assert reported and all(isinstance(error, ssl.SSLError) for error in reported), reported


@pytest.mark.parametrize("event_loop_run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_server_that_upgrades_its_connections_sees_each_handshake_fail(dev_ca, event_loop_run):
    """Accepting plain TCP and calling ``writer.start_tls`` (rather than ``start_server(ssl=)``)
    lets the broker see, log and count failed handshakes, as Kafka logs failed
    authentications, and bound the handshake."""
    async def serve_one_plaintext_client() -> BaseException | None:
        failure: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        async def upgrade(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await writer.start_tls(server_context(broker_settings(dev_ca)),
                                       ssl_handshake_timeout=TIMEOUT_S)
                failure.set_result(None)
            except (ssl.SSLError, ConnectionError) as error:
                failure.set_result(error)
            finally:
                writer.close()

        server = await asyncio.start_server(upgrade, "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(API_VERSIONS_REQUEST)
            with contextlib.suppress(ConnectionError):
                while await asyncio.wait_for(reader.read(1024), TIMEOUT_S):
                    pass
            writer.close()
            return await asyncio.wait_for(failure, TIMEOUT_S)
        finally:
            server.close()
            await server.wait_closed()

    assert isinstance(event_loop_run(serve_one_plaintext_client()), ssl.SSLError)


def test_handshake_and_principal_under_uvloop(dev_ca):
    """The broker runs on uvloop, whose TLS transport is its own implementation."""
    async def handshake() -> list[str]:
        context = server_context(broker_settings(dev_ca, client_auth=ClientAuth.REQUIRED))
        async with tls_server(context, PrincipalMapper(CN_RULE)) as (port, accepted):
            await echo(port, client_context(client_settings(dev_ca, "alice")))
        return accepted.principals

    assert uvloop.run(handshake()) == ["User:alice"]


async def test_cipher_suites_restrict_tls_1_2_by_iana_or_openssl_name(dev_ca):
    for name in ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"):
        context = server_context(broker_settings(dev_ca, enabled_protocols=("TLSv1.2",),
                                                 cipher_suites=(name,)))
        async with tls_server(context) as (port, _):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(client_settings(dev_ca)),
                server_hostname="localhost")
            negotiated = writer.get_extra_info("ssl_object").cipher()[0]
            writer.close()
        assert negotiated in (name, "ECDHE-ECDSA-CHACHA20-POLY1305")


async def test_an_encrypted_key_with_its_password(tmp_path):
    protected = create_dev_ca(tmp_path, broker_ids=(0,), key_password="s3cret")
    assert b"ENCRYPTED PRIVATE KEY" in protected.brokers[0].key.read_bytes()
    settings = TlsSettings.from_properties({
        "ssl.certificate.location": str(protected.brokers[0].certificate),
        "ssl.key.location": str(protected.brokers[0].key),
        "ssl.key.password": "s3cret"})
    async with tls_server(server_context(settings)) as (port, _):
        await echo(port, client_context(client_settings(protected)))
    for password in ("wrong", None):
        with pytest.raises(TlsConfigError, match="cannot load the certificate and key"):
            server_context(replace(settings, key_password=password))


# Kafka's SslPrincipalMapperTest, case for case.

@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules):
    PrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "RULE:^CN=(.*?/$1/",  # a pattern that does not compile
    "RULE:^CN=(?<name>.*)$/${name}/",  # Java-only syntax: refused up front
    "RULE:\\Qa.b\\E/x/",
])
def test_invalid_rules(rules):
    with pytest.raises(TlsConfigError):
        PrincipalMapper(rules)


def test_rules_tried_in_order_first_match_wins():
    mapper = PrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name_for("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name_for("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name_for("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name_for("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (mapper.name_for("OU=JavaSoft,O=Sun Microsystems,C=US")
            == "OU=JavaSoft,O=Sun Microsystems,C=US")


@pytest.mark.parametrize(("rules", "expected"), [
    ("", ""),
    ("DEFAULT", "DEFAULT"),
    ("RULE://", "RULE:/"),
    ("RULE:/.*/", "RULE:/.*"),
    ("RULE:/.*/L", "RULE:/.*/L"),
    ("RULE://,DEFAULT", "RULE:/, DEFAULT"),
    ("  RULE:// ,  DEFAULT  ", "RULE:/, DEFAULT"),
    ("  RULE:   /     / ,  DEFAULT  ", "RULE:   /     , DEFAULT"),
    ("  RULE:  /     /U   ,DEFAULT  ", "RULE:  /     /U, DEFAULT"),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
     "RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT"),
    (",   , , ,      , , ,   ", ""),
    (",,RULE://,,,DEFAULT,,", "RULE:/, DEFAULT"),
    (",  , RULE: /   /    ,,,   DEFAULT, ,   ", "RULE: /   , DEFAULT"),
    ("     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,", "RULE:   /  /U, DEFAULT"),
    ("RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/"),
    ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "RULE:\\**\\/+/*/L, RULE:\\/*\\**/**"),
    ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
     "/DEFAULT/,DEFAULT",
     "RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
     "/DEFAULT, DEFAULT"),
])
def test_rules_splitting(rules, expected):
    assert ", ".join(map(str, PrincipalMapper(rules).rules)) == expected


def test_comma_with_whitespace():
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name_for("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_no_matching_rule_fails_the_authentication():
    with pytest.raises(PrincipalMappingError,
                       match=r"No rules apply to CN=alice,O=acme, rules \[RULE:\^CN=bob\$/x\]"):
        PrincipalMapper("RULE:^CN=bob$/x/").name_for("CN=alice,O=acme")


@pytest.mark.parametrize(("rules", "name"), [
    ("RULE:^CN=(.*?),O=(.*?)$/$2:$1/", "acme:alice"),
    ("RULE:^CN=(.*?),O=(.*?)$/$3$1/", "$3alice"),  # no group 3: literal, as in Kafka
    ("RULE:^CN=(.*?),O=(.*?)$/$12/", "alice2"),  # group 1 then a literal 2
    ("RULE:^CN=(.*?),O=(.*?)$/\\$1 $0/", "$1 CN=alice,O=acme"),
    ("RULE:^CN=(.*?),O=.*$/$1/U", "ALICE"),
])
def test_replacements_follow_java(rules, name):
    assert PrincipalMapper(rules).name_for("CN=alice,O=acme") == name


def _certificate_der(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                   .public_key(key.public_key()).serial_number(1).not_valid_before(now)
                   .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return certificate.public_bytes(serialization.Encoding.DER)


def test_distinguished_name_is_javas_rfc_2253_form():
    subject = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COUNTRY_NAME, "US")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                           "Acme, Inc.")]),
        x509.RelativeDistinguishedName([
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "acme")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS,
                                                           "alice@acme.com")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME,
                                                           " #alice=1+2<x>;\"\\ ")]),
    ])
    email = "alice@acme.com".encode()
    assert distinguished_name(_certificate_der(subject)) == (
        'CN=\\ \\#alice\\=1\\+2\\<x\\>\\;\\"\\\\\\ ,'
        f"1.2.840.113549.1.9.1=#16{len(email):02x}{email.hex()},"
        "OU=eng+DC=acme,O=Acme\\, Inc.,C=US")


def test_distinguished_name_of_the_dev_ca_client_certificate(dev_ca):
    certificate = x509.load_pem_x509_certificate(dev_ca.clients["alice"].certificate.read_bytes())
    assert distinguished_name(certificate.public_bytes(serialization.Encoding.DER)) == ALICE_DN


def test_settings_from_kafka_properties_with_a_listener_override(dev_ca):
    properties = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/etc/kafka/default.pem",
        "listener.name.client.ssl.keystore.location": str(dev_ca.brokers[0].keystore),
        "ssl.truststore.location": str(dev_ca.ca_certificate),
        "ssl.client.auth": "required",
        "ssl.enabled.protocols": "TLSv1.3",
        "ssl.principal.mapping.rules": CN_RULE,
    }
    settings = TlsSettings.from_properties(properties, listener_name="CLIENT")
    assert settings.certificate == dev_ca.brokers[0].keystore
    assert settings.key is None
    assert settings.ca == dev_ca.ca_certificate
    assert settings.client_auth is ClientAuth.REQUIRED
    assert settings.enabled_protocols == ("TLSv1.3",)
    assert settings.principal_mapper.name_for(ALICE_DN) == "alice"
    assert TlsSettings.from_properties(properties).certificate == Path("/etc/kafka/default.pem")
    assert server_context(settings).minimum_version is ssl.TLSVersion.TLSv1_3


def test_librdkafka_names_for_the_same_files(dev_ca):
    settings = TlsSettings.from_properties({
        "ssl.certificate.location": str(dev_ca.clients["alice"].certificate),
        "ssl.key.location": str(dev_ca.clients["alice"].key),
        "ssl.ca.location": str(dev_ca.ca_certificate)})
    assert (settings.certificate, settings.key, settings.ca) == (
        dev_ca.clients["alice"].certificate, dev_ca.clients["alice"].key, dev_ca.ca_certificate)
    assert settings.check_hostname


@pytest.mark.parametrize(("properties", "message"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS is not supported"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type=PKCS12 is not supported"),
    ({"ssl.keystore.password": "x"}, "SSL key store password cannot be specified with PEM"),
    ({"ssl.keystore.location": "a.pem", "ssl.key.location": "b.key"}, "not both"),
    ({"ssl.certificate.location": "a.pem"}, "go together"),
    ({"ssl.truststore.location": "a.pem", "ssl.ca.location": "b.pem"}, "set one"),
    ({"ssl.client.auth": "always"}, "Invalid value always for configuration ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"}, "TLS 1.2 is the minimum"),
    ({"ssl.enabled.protocols": ""}, "TLS 1.2 is the minimum"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "not supported"),
    ({"ssl.principal.mapping.rules": "RULE:x/y"}, "Invalid rule"),
])
def test_settings_kafka_would_refuse(properties, message):
    with pytest.raises(TlsConfigError, match=message):
        TlsSettings.from_properties(properties)


def test_contexts_refuse_what_cannot_work(dev_ca, tmp_path):
    with pytest.raises(TlsConfigError, match="needs ssl.keystore.location"):
        server_context(TlsSettings())
    with pytest.raises(TlsConfigError, match="needs ssl.truststore.location"):
        server_context(broker_settings(dev_ca, ca=None, client_auth=ClientAuth.REQUIRED))
    with pytest.raises(TlsConfigError, match="cannot load the CA certificates"):
        client_context(TlsSettings(ca=tmp_path / "missing.pem"))
    with pytest.raises(TlsConfigError, match="no usable suite"):
        server_context(broker_settings(dev_ca, cipher_suites=("NO-SUCH-SUITE",)))
    with pytest.raises(TlsConfigError, match="names no TLS 1.2 suite"):
        server_context(broker_settings(dev_ca, cipher_suites=("TLS_AES_128_GCM_SHA256",)))
    with pytest.raises(TlsConfigError, match="unknown TLS 1.3 suites"):
        server_context(broker_settings(dev_ca, cipher_suites=("TLS_AES_512_XYZ",)))


def test_tls_1_3_suite_names_alone_are_fine_when_only_tls_1_3_is_enabled(dev_ca):
    server_context(broker_settings(dev_ca, enabled_protocols=("TLSv1.3",),
                                   cipher_suites=("TLS_AES_256_GCM_SHA384",)))
