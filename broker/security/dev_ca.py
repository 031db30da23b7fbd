"""A development certificate authority: TLS for a laptop cluster and its tests in one call.

``create_dev_ca(directory, broker_ids=(0, 1, 2), users=("alice",))`` leaves under
``directory`` a CA, a certificate per broker that clients on this machine accept (its names
include ``localhost`` and ``127.0.0.1``) and a client certificate per user for mutual TLS, all
PEM, keys readable by their owner alone. A second call reuses the CA and every certificate
still valid for what is asked, so clients configured against the CA keep working across
``kipper cluster up`` runs. ``write_client_properties`` writes the ``client.properties`` that
Kafka's tools, kcat and confluent-kafka read. Not for production: the CA key sits unencrypted
next to the certificates it signs.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# A certificate expiring sooner than this is issued again rather than reused.
RENEW_BEFORE = datetime.timedelta(days=30)
ORGANIZATION = "kipper dev"
CA_COMMON_NAME = "kipper dev CA"
# The names every broker certificate carries: clients on the same machine connect to these.
LOCAL_NAMES = ("localhost", "127.0.0.1")

_USER_NAME = re.compile(r"[A-Za-z0-9._-]+")

CA_CERTIFICATE = "ca.pem"
CA_KEY = "ca.key"


@dataclass(frozen=True)
class IssuedCertificate:
    """One identity's files. ``keystore`` holds the key and then the certificate: Kafka's
    ``ssl.keystore.type=PEM`` file; ``certificate`` and ``key`` apart are what librdkafka's
    ``ssl.certificate.location`` / ``ssl.key.location`` take."""

    certificate: Path
    key: Path
    keystore: Path


@dataclass(frozen=True)
class DevCa:
    """Where ``create_dev_ca`` put everything: ``ca_certificate`` is the truststore
    (``ssl.truststore.location`` / ``ssl.ca.location``) of brokers and clients."""

    directory: Path
    ca_certificate: Path
    ca_key: Path
    brokers: Mapping[int, IssuedCertificate]
    clients: Mapping[str, IssuedCertificate]


def create_dev_ca(directory: Path, broker_ids: Iterable[int] = (0,),
                  host_names: Iterable[str] = (), users: Iterable[str] = (),
                  key_password: str | None = None) -> DevCa:
    """Create (or reuse) the CA under ``directory`` and a certificate per broker and per user.

    Broker certificates name ``localhost``, ``127.0.0.1`` and every one of ``host_names`` (an
    IP address becomes an IP entry), and serve as client certificates too (a broker is a
    client of the others). A user's certificate has the subject
    ``CN=<user>,OU=clients,O=kipper dev``, the principal ``ssl.principal.mapping.rules`` maps.
    ``key_password`` encrypts the broker and user keys (PKCS#8, ``ssl.key.password``)."""
    users = tuple(users)
    for user in users:
        if not _USER_NAME.fullmatch(user):
            raise ValueError(f"user name {user!r}: letters, digits, '.', '_' and '-' only (it "
                             "names the certificate's files)")
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_certificate = _certificate_authority(directory)
    subject_names = (*LOCAL_NAMES, *host_names)
    brokers = {
        broker_id: _issue(directory, f"broker-{broker_id}", ca_key, ca_certificate,
                          _name(f"broker-{broker_id}", "brokers"), subject_names,
                          (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
                          key_password)
        for broker_id in broker_ids}
    clients = {
        user: _issue(directory, f"client-{user}", ca_key, ca_certificate, _name(user, "clients"),
                     (), (ExtendedKeyUsageOID.CLIENT_AUTH,), key_password)
        for user in users}
    return DevCa(directory, directory / CA_CERTIFICATE, directory / CA_KEY, brokers, clients)


def write_client_properties(path: Path, bootstrap_servers: str, security_protocol: str, *,
                            ca_certificate: Path | None = None,
                            client_certificate: IssuedCertificate | None = None,
                            key_password: str | None = None,
                            sasl_mechanism: str | None = None, sasl_username: str | None = None,
                            sasl_password: str | None = None) -> Path:
    """Write a client configuration in the names librdkafka (kcat, confluent-kafka) reads.

    ``client_certificate`` (mutual TLS) adds ``ssl.certificate.location`` and
    ``ssl.key.location``. The file is readable by its owner alone: it may hold a password.
    Kafka's Java tools read the same file given ``ssl.truststore.type=PEM`` and its
    ``ssl.truststore.location`` instead."""
    properties = {
        "bootstrap.servers": bootstrap_servers,
        "security.protocol": security_protocol,
        "sasl.mechanism": sasl_mechanism,
        "sasl.username": sasl_username,
        "sasl.password": sasl_password,
        "ssl.ca.location": ca_certificate,
        "ssl.certificate.location": client_certificate and client_certificate.certificate,
        "ssl.key.location": client_certificate and client_certificate.key,
        "ssl.key.password": key_password,
    }
    lines = [f"{name}={_property_value(str(value))}"
             for name, value in properties.items() if value is not None]
    _write_private(path, "".join(line + "\n" for line in lines).encode())
    return path


def _property_value(value: str) -> str:
    """A value as a .properties line keeps it: backslashes and line breaks escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    """A subject in ASN.1 order (O, OU, CN), so its RFC 2253 form starts with the CN."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION)]
    if unit is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _certificate_authority(directory: Path) -> tuple[ec.EllipticCurvePrivateKey,
                                                      x509.Certificate]:
    """The CA of ``directory``: the existing one unless missing or about to expire."""
    key_path, certificate_path = directory / CA_KEY, directory / CA_CERTIFICATE
    if key_path.exists() and certificate_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        certificate = x509.load_pem_x509_certificate(certificate_path.read_bytes())
        if isinstance(key, ec.EllipticCurvePrivateKey) and not _expiring(certificate):
            return key, certificate
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(CA_COMMON_NAME)
    certificate = (
        _builder(subject, subject, key.public_key(), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256()))
    _write_private(key_path, _key_pem(key, None))
    _write_public(certificate_path, certificate.public_bytes(serialization.Encoding.PEM))
    return key, certificate


def _issue(directory: Path, stem: str, ca_key: ec.EllipticCurvePrivateKey,
           ca_certificate: x509.Certificate, subject: x509.Name, subject_names: Iterable[str],
           usages: tuple[x509.ObjectIdentifier, ...],
           key_password: str | None) -> IssuedCertificate:
    """The certificate ``stem``.pem (key ``stem``.key, both in ``stem``.keystore.pem), reused
    when the CA issued it, it names all of ``subject_names`` and is not about to expire."""
    paths = IssuedCertificate(directory / f"{stem}.pem", directory / f"{stem}.key",
                              directory / f"{stem}.keystore.pem")
    alternative_names = [_general_name(name) for name in dict.fromkeys(subject_names)]
    if _reusable(paths, ca_certificate, alternative_names, key_password):
        return paths
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject, ca_certificate.subject, key.public_key(), ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=False, crl_sign=False, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False))
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names),
                                        critical=False)
    certificate_pem = builder.sign(ca_key, hashes.SHA256()).public_bytes(
        serialization.Encoding.PEM)
    key_pem = _key_pem(key, key_password)
    _write_private(paths.key, key_pem)
    _write_private(paths.keystore, key_pem + certificate_pem)
    _write_public(paths.certificate, certificate_pem)
    return paths


def _reusable(paths: IssuedCertificate, ca_certificate: x509.Certificate,
              alternative_names: list[x509.GeneralName], key_password: str | None) -> bool:
    if not all(path.exists() for path in (paths.certificate, paths.key, paths.keystore)):
        return False
    certificate = x509.load_pem_x509_certificate(paths.certificate.read_bytes())
    try:
        certificate.verify_directly_issued_by(ca_certificate)
        serialization.load_pem_private_key(
            paths.key.read_bytes(), password=key_password.encode() if key_password else None)
    except (ValueError, TypeError, InvalidSignature):
        return False  # another CA's, or a key under another password
    try:
        named = list(certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound:
        # A client's certificate names no host. (Not an empty SubjectAlternativeName:
        # cryptography 51 refuses to make one.)
        named = []
    return not _expiring(certificate) and all(name in named for name in alternative_names)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             issuer_public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    """What every certificate here has: a year's validity from a minute ago (clock skew),
    a random serial, and the key identifiers chain building (and Python 3.13's strict
    verification) look for."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(issuer).public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_public_key),
                       critical=False))


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _expiring(certificate: x509.Certificate) -> bool:
    now = datetime.datetime.now(datetime.timezone.utc)
    return certificate.not_valid_after_utc - RENEW_BEFORE < now


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None) -> bytes:
    """PKCS#8, the one private-key format Kafka's PEM keystore reads (encrypted or not)."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption)


def _write_private(path: Path, content: bytes) -> None:
    """Write ``content`` readable by the owner alone, never visible half-written or with
    wider permissions (the temporary file is created 0600, then renamed)."""
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(content)
    os.chmod(temporary, 0o600)  # O_CREAT's mode only applies to a file it creates
    os.replace(temporary, path)


def _write_public(path: Path, content: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)
