"""The development CA (broker/security/dev_ca.py): what it issues, that a second call reuses
it, and that the files work with the tools clients use (openssl, librdkafka)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from broker.security.dev_ca import CA_KEY, create_dev_ca, write_client_properties
from broker.security.tls import (
    ClientAuth,
    PrincipalMapper,
    TlsSettings,
    peer_principal,
    server_context,
)

TIMEOUT_S = 20


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def contents(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_ca_broker_and_client_certificates(tmp_path):
    dev_ca = create_dev_ca(tmp_path, broker_ids=(0, 1), host_names=("kafka.local", "10.1.2.3"),
                           users=("alice",))
    ca = load(dev_ca.ca_certificate)
    ca.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert set(dev_ca.brokers) == {0, 1}
    for broker_id, issued in dev_ca.brokers.items():
        certificate = load(issued.certificate)
        certificate.verify_directly_issued_by(ca)
        assert (certificate.subject.rfc4514_string()
                == f"CN=broker-{broker_id},OU=brokers,O=kipper dev")
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.DNSName) == ["localhost", "kafka.local"]
        assert names.get_values_for_type(x509.IPAddress) == [
            ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.1.2.3")]
        usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
        assert datetime.timedelta(days=364) < lifetime < datetime.timedelta(days=366)
    alice = load(dev_ca.clients["alice"].certificate)
    alice.verify_directly_issued_by(ca)
    assert alice.subject.rfc4514_string() == "CN=alice,OU=clients,O=kipper dev"


def test_keys_are_readable_by_their_owner_alone(tmp_path):
    dev_ca = create_dev_ca(tmp_path, users=("alice",))
    secrets = [dev_ca.ca_key, dev_ca.brokers[0].key, dev_ca.brokers[0].keystore,
               dev_ca.clients["alice"].key, dev_ca.clients["alice"].keystore]
    assert {stat.S_IMODE(path.stat().st_mode) for path in secrets} == {0o600}
    assert not [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")]


def test_keystore_is_the_key_then_the_certificate(tmp_path):
    issued = create_dev_ca(tmp_path).brokers[0]
    assert issued.keystore.read_bytes() == issued.key.read_bytes() + issued.certificate.read_bytes()
    assert issued.key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8


def test_a_second_call_reuses_everything(tmp_path):
    create_dev_ca(tmp_path, broker_ids=(0, 1), users=("alice",))
    before = contents(tmp_path)
    create_dev_ca(tmp_path, broker_ids=(0, 1), users=("alice",))
    assert contents(tmp_path) == before


def test_a_new_host_name_reissues_the_broker_certificates_under_the_same_ca(tmp_path):
    create_dev_ca(tmp_path, users=("alice",))
    before = contents(tmp_path)
    dev_ca = create_dev_ca(tmp_path, host_names=("kafka.local",), users=("alice",))
    after = contents(tmp_path)
    changed = {name for name in after if after[name] != before[name]}
    assert changed == {"broker-0.pem", "broker-0.key", "broker-0.keystore.pem"}
    names = load(dev_ca.brokers[0].certificate).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert "kafka.local" in names.get_values_for_type(x509.DNSName)


def test_a_lost_ca_key_means_a_new_ca_and_new_certificates(tmp_path):
    create_dev_ca(tmp_path, users=("alice",))
    before = contents(tmp_path)
    (tmp_path / CA_KEY).unlink()
    dev_ca = create_dev_ca(tmp_path, users=("alice",))
    after = contents(tmp_path)
    assert all(after[name] != before[name] for name in before if name != CA_KEY)
    load(dev_ca.clients["alice"].certificate).verify_directly_issued_by(
        load(dev_ca.ca_certificate))


def test_encrypted_keys_are_reused_with_their_password_only(tmp_path):
    dev_ca = create_dev_ca(tmp_path, key_password="s3cret")
    key_pem = dev_ca.brokers[0].key.read_bytes()
    assert key_pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    serialization.load_pem_private_key(key_pem, password=b"s3cret")
    assert create_dev_ca(tmp_path, key_password="s3cret").brokers[0].key.read_bytes() == key_pem
    assert create_dev_ca(tmp_path, key_password="other").brokers[0].key.read_bytes() != key_pem


@pytest.mark.parametrize("user", ["../alice", "", "a b"])
def test_a_user_name_must_make_a_file_name(tmp_path, user):
    with pytest.raises(ValueError, match="letters, digits"):
        create_dev_ca(tmp_path, users=(user,))
    assert not tmp_path.joinpath("..", "client-alice.pem").exists()


def test_client_properties(tmp_path):
    dev_ca = create_dev_ca(tmp_path, users=("alice",))
    path = write_client_properties(
        tmp_path / "client.properties", "localhost:9093", "SASL_SSL",
        ca_certificate=dev_ca.ca_certificate, sasl_mechanism="SCRAM-SHA-256",
        sasl_username="alice", sasl_password="pa\\ss")
    assert path.read_text().splitlines() == [
        "bootstrap.servers=localhost:9093",
        "security.protocol=SASL_SSL",
        "sasl.mechanism=SCRAM-SHA-256",
        "sasl.username=alice",
        "sasl.password=pa\\\\ss",
        f"ssl.ca.location={dev_ca.ca_certificate}",
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_client_properties_for_mutual_tls(tmp_path):
    alice = create_dev_ca(tmp_path, users=("alice",)).clients["alice"]
    path = write_client_properties(tmp_path / "client.properties", "localhost:9093", "SSL",
                                   client_certificate=alice)
    assert path.read_text().splitlines() == [
        "bootstrap.servers=localhost:9093", "security.protocol=SSL",
        f"ssl.certificate.location={alice.certificate}", f"ssl.key.location={alice.key}"]


def test_openssl_accepts_the_files(tmp_path):
    dev_ca = create_dev_ca(tmp_path, users=("alice",), key_password="s3cret")
    verified = subprocess.run(
        ["openssl", "verify", "-x509_strict", "-purpose", "sslserver", "-CAfile",
         str(dev_ca.ca_certificate), str(dev_ca.brokers[0].certificate)],
        capture_output=True, text=True, timeout=TIMEOUT_S)
    assert verified.returncode == 0, verified.stderr
    verified = subprocess.run(
        ["openssl", "verify", "-x509_strict", "-purpose", "sslclient", "-CAfile",
         str(dev_ca.ca_certificate), str(dev_ca.clients["alice"].certificate)],
        capture_output=True, text=True, timeout=TIMEOUT_S)
    assert verified.returncode == 0, verified.stderr
    key = subprocess.run(["openssl", "pkey", "-in", str(dev_ca.clients["alice"].key),
                          "-passin", "pass:s3cret", "-noout"],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert key.returncode == 0, key.stderr


async def test_librdkafka_connects_with_the_client_properties(tmp_path):
    """confluent-kafka reads the written client.properties as they are and completes a mutual
    TLS handshake with a listener built from the broker's files; the listener here is no
    Kafka broker, so the client's request then goes unanswered."""
    admin_client = pytest.importorskip("confluent_kafka.admin")
    dev_ca = create_dev_ca(tmp_path, users=("alice",), key_password="s3cret")
    properties = write_client_properties(
        tmp_path / "client.properties", "", "SSL", ca_certificate=dev_ca.ca_certificate,
        client_certificate=dev_ca.clients["alice"], key_password="s3cret")
    context = server_context(TlsSettings(
        certificate=dev_ca.brokers[0].keystore, key_password="s3cret",
        ca=dev_ca.ca_certificate, client_auth=ClientAuth.REQUIRED))
    principals: asyncio.Queue[str] = asyncio.Queue()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        principals.put_nowait(peer_principal(writer.get_extra_info("ssl_object"),
                                             PrincipalMapper()))
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0, ssl=context)
    try:
        config = dict(line.split("=", 1) for line in properties.read_text().splitlines())
        config["bootstrap.servers"] = f"localhost:{server.sockets[0].getsockname()[1]}"
        # its complaints (the listener answers no request) go to logging, not to stderr
        admin = admin_client.AdminClient(config, logger=logging.getLogger("librdkafka"))
        listing = asyncio.get_running_loop().run_in_executor(
            None, lambda: admin.list_topics(timeout=1))
        principal = await asyncio.wait_for(principals.get(), TIMEOUT_S)
        with pytest.raises(admin_client.KafkaException):
            await listing
    finally:
        server.close()
        await server.wait_closed()
    assert principal == "User:CN=alice,OU=clients,O=kipper dev"
