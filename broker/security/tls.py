"""TLS for SSL and SASL_SSL listeners: contexts from Kafka's ``ssl.*`` settings, and the
principal a client certificate authenticates.

The settings keep Kafka's names (and accept librdkafka's for the same thing), so a broker's or
a client's ``.properties`` file carries over: ``ssl.keystore.location`` (Kafka's PEM keystore:
private key and certificate chain in one file) or ``ssl.certificate.location`` with
``ssl.key.location``; ``ssl.key.password`` for an encrypted key; ``ssl.truststore.location`` or
``ssl.ca.location`` for the CA bundle; ``ssl.client.auth``; ``ssl.enabled.protocols``;
``ssl.cipher.suites``; ``ssl.endpoint.identification.algorithm``;
``ssl.principal.mapping.rules``. Files are PEM only: Python's ``ssl`` reads no JKS or PKCS#12.

The principal is Kafka's (KIP-371, ``SslPrincipalMapper``): the certificate subject in the
RFC 2253 form Java's ``X500Principal.getName()`` gives, mapped by the rules, as ``User:<name>``;
a client without a certificate is ``User:ANONYMOUS``. ACLs written for a Kafka cluster then
name the same principals here.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from cryptography import x509

ANONYMOUS = "User:ANONYMOUS"
PROTOCOL_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.3 suites are OpenSSL's built-in set: Python's ssl can list them but not choose them,
# so ssl.cipher.suites restricts TLS 1.2 alone.
TLS13_SUITE_PREFIXES = ("TLS_AES_", "TLS_CHACHA20_")
# The TLS 1.2 suites worth enabling, by the IANA names Kafka's (Java's) configs use, with the
# OpenSSL names Python's set_ciphers takes. OpenSSL names are accepted as they are.
IANA_TO_OPENSSL = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
}


class TlsConfigError(ValueError):
    """An ``ssl.*`` setting that cannot make a working context; the message names it."""


class PrincipalMappingError(Exception):
    """No ``ssl.principal.mapping.rules`` rule gives a name for a certificate: Kafka fails the
    client's authentication."""


class ClientAuth(Enum):
    """``ssl.client.auth``: whether a listener asks clients for a certificate."""

    NONE = "none"
    REQUESTED = "requested"  # asked for, not required: a client without one is anonymous
    REQUIRED = "required"


class _Rule:
    """One rule of ``ssl.principal.mapping.rules``: DEFAULT, or RULE:pattern/replacement/[LU]."""

    def __init__(self, pattern: str | None = None, replacement: str = "",
                 case: str = "") -> None:
        self.source = pattern
        try:
            self.pattern = None if pattern is None else re.compile(pattern)
        except re.error as error:
            raise TlsConfigError(f"Invalid rule pattern `{pattern}` in "
                                 f"ssl.principal.mapping.rules: {error}") from None
        self.replacement = replacement
        self.case = case

    def apply(self, distinguished_name: str) -> str | None:
        if self.pattern is None:
            return distinguished_name
        if self.pattern.fullmatch(distinguished_name) is None:
            return None
        name = self.pattern.sub(lambda match: _java_replacement(self.replacement, match),
                                distinguished_name)
        return {"L": name.lower(), "U": name.upper()}.get(self.case, name)

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.source}/{self.replacement}" + (f"/{self.case}" if self.case else "")


# Kafka's grammar (SslPrincipalMapper.RULE_PATTERN / RULE_SPLITTER), group for group.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


class PrincipalMapper:
    """``ssl.principal.mapping.rules``: rules tried in order, the first that matches the whole
    distinguished name gives the principal name. ``DEFAULT`` keeps the name as it is;
    ``RULE:^CN=(.*?),OU=.*$/$1/L`` keeps the CN, lower-cased. ``$n`` in a replacement is Java's
    group reference (``$n`` naming no group stays literal text, as in Kafka); ``\\`` escapes.
    Patterns go to Python's ``re``, which reads the Java syntax rules commonly use alike;
    Java-only syntax (``(?<name>...)``, ``\\Q...\\E``) fails when the rules are read, not at a
    client's login."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        texts = (match[1] for match in _RULE_SPLITTER.finditer(rules.strip()))
        self.rules = [rule for rule in map(_parse_rule, texts) if rule is not None]

    def name_for(self, distinguished_name: str) -> str:
        for rule in self.rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise PrincipalMappingError(f"No rules apply to {distinguished_name}, rules "
                                    f"[{', '.join(map(str, self.rules))}]")


def _parse_rule(text: str) -> _Rule | None:
    """A rule, or None for an empty one (Kafka skips them: ``DEFAULT,`` is valid)."""
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        raise TlsConfigError(f"Invalid rule: `{text}`, unmatched substring: "
                             f"`{text[match.end() if match else 0:]}`")
    if match[1] is not None:
        return _Rule()
    if match[2] is not None:
        return _Rule(match[2], match[4], match[6])
    return None


def _java_replacement(template: str, match: re.Match[str]) -> str:
    """``template`` expanded as Java's ``Matcher.appendReplacement`` does after Kafka's
    ``escapeLiteralBackReferences``: ``$12`` is group 12 if there is one, else group 1 and a
    literal 2; ``$n`` whose first digit names no group is literal (when the pattern has
    groups); a backslash makes the next character literal."""
    groups = match.re.groups
    expanded: list[str] = []
    position = 0
    while position < len(template):
        character = template[position]
        if character == "\\":
            if position + 1 == len(template):
                raise PrincipalMappingError(
                    f"character to be escaped is missing in replacement `{template}`")
            expanded.append(template[position + 1])
            position += 2
        elif character == "$":
            digit = template[position + 1:position + 2]
            if not digit.isascii() or not digit.isdigit():
                raise PrincipalMappingError(
                    f"Illegal group reference in replacement `{template}`")
            if groups and digit != "0" and int(digit) > groups:
                expanded.append("$")  # Kafka escapes a reference to no group
                position += 1
                continue
            group = int(digit)
            position += 2
            while (position < len(template) and template[position] in "0123456789"
                   and group * 10 + int(template[position]) <= groups):
                group = group * 10 + int(template[position])
                position += 1
            if group > groups:
                raise PrincipalMappingError(f"No group {group} in replacement `{template}`")
            expanded.append(match[group] or "")
        else:
            expanded.append(character)
            position += 1
    return "".join(expanded)


@dataclass(frozen=True)
class TlsSettings:
    """One listener's (or one client's) TLS settings, read from Kafka-named properties."""

    certificate: Path | None = None  # PEM certificate chain, or key and chain (a keystore)
    key: Path | None = None  # None: the key is in ``certificate`` (Kafka's PEM keystore)
    key_password: str | None = None
    ca: Path | None = None
    client_auth: ClientAuth = ClientAuth.NONE
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()  # empty: OpenSSL's defaults
    check_hostname: bool = True  # ssl.endpoint.identification.algorithm=https, clients only
    principal_mapper: PrincipalMapper = field(default_factory=PrincipalMapper)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str],
                        listener_name: str | None = None) -> TlsSettings:
        """Settings from ``properties``; with ``listener_name``, a
        ``listener.name.<name>.ssl.*`` value overrides ``ssl.*`` for that listener, as in
        Kafka (``listener.name.client.ssl.keystore.location``)."""
        prefix = f"listener.name.{listener_name.lower()}." if listener_name else None

        def get(name: str, default: str | None = None) -> str | None:
            if prefix is not None and prefix + name in properties:
                return properties[prefix + name].strip()
            value = properties.get(name)
            return default if value is None else value.strip()

        for store in ("keystore", "truststore"):
            store_type = get(f"ssl.{store}.type", "PEM")
            if store_type.upper() != "PEM":
                raise TlsConfigError(f"ssl.{store}.type={store_type} is not supported: kipper "
                                     f"reads PEM files (ssl.{store}.type=PEM)")
        if get("ssl.keystore.password"):
            raise TlsConfigError("SSL key store password cannot be specified with PEM format, "
                                 "only key password may be specified")
        keystore, certificate, key = (get("ssl.keystore.location"),
                                      get("ssl.certificate.location"), get("ssl.key.location"))
        if keystore and (certificate or key):
            raise TlsConfigError("Set ssl.keystore.location, or ssl.certificate.location and "
                                 "ssl.key.location, not both")
        if bool(certificate) != bool(key):
            raise TlsConfigError("ssl.certificate.location and ssl.key.location go together")
        truststore, ca_location = get("ssl.truststore.location"), get("ssl.ca.location")
        if truststore and ca_location and truststore != ca_location:
            raise TlsConfigError("ssl.truststore.location and ssl.ca.location name different "
                                 "files; set one")
        client_auth = get("ssl.client.auth", "none").lower()
        if client_auth not in {auth.value for auth in ClientAuth}:
            raise TlsConfigError(f"Invalid value {client_auth} for configuration "
                                 "ssl.client.auth: String must be one of: required, requested, "
                                 "none")
        protocols = tuple(_csv(get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")))
        identification = get("ssl.endpoint.identification.algorithm", "https")
        if identification.lower() not in ("https", ""):
            raise TlsConfigError(f"ssl.endpoint.identification.algorithm={identification} is "
                                 "not supported: https (check the host name) or empty (do not)")
        settings = cls(
            certificate=Path(keystore or certificate) if keystore or certificate else None,
            key=Path(key) if key else None,
            key_password=get("ssl.key.password"),
            ca=Path(truststore or ca_location) if truststore or ca_location else None,
            client_auth=ClientAuth(client_auth),
            enabled_protocols=protocols,
            cipher_suites=tuple(_csv(get("ssl.cipher.suites", ""))),
            check_hostname=identification != "",
            principal_mapper=PrincipalMapper(get("ssl.principal.mapping.rules", "DEFAULT")))
        _protocol_range(settings.enabled_protocols)
        return settings


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a TLS listener: its certificate, and clients' checked against ``ca``
    when ``client_auth`` asks for them."""
    if settings.certificate is None:
        raise TlsConfigError("A TLS listener needs ssl.keystore.location, or "
                             "ssl.certificate.location and ssl.key.location")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _restrict(context, settings)
    _load_identity(context, settings)
    if settings.client_auth is not ClientAuth.NONE:
        if settings.ca is None:
            raise TlsConfigError(f"ssl.client.auth={settings.client_auth.value} needs "
                                 "ssl.truststore.location (the CA of client certificates)")
        _load_ca(context, settings.ca)
    context.verify_mode = {ClientAuth.NONE: ssl.CERT_NONE,
                           ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
                           ClientAuth.REQUIRED: ssl.CERT_REQUIRED}[settings.client_auth]
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a client (or a broker connecting to another) uses: the server's
    certificate checked against ``ca`` (the system's CAs if unset) and, unless
    ``check_hostname`` is off, against the host name connected to; its own certificate
    offered if it has one (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _restrict(context, settings)
    if settings.ca is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        _load_ca(context, settings.ca)
    context.check_hostname = settings.check_hostname
    if settings.certificate is not None:
        _load_identity(context, settings)
    return context


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None,
                   mapper: PrincipalMapper) -> str:
    """``User:<name>`` of the client certificate of a connection
    (``writer.get_extra_info("ssl_object")``), ``User:ANONYMOUS`` without one. Raises
    PrincipalMappingError when no rule maps its subject."""
    certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not certificate:
        return ANONYMOUS
    return "User:" + mapper.name_for(distinguished_name(certificate))


def distinguished_name(certificate_der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` writes it (RFC
    2253): most specific RDN first, ``CN=alice,OU=eng,O=acme,C=US``. Kafka's mapping rules
    are written against this string, so it must be Java's to the character: its keywords,
    its escapes (``,=+<>#;"\\`` and outer spaces), and ``OID=#hex`` for other attributes
    (an e-mail address is ``1.2.840.113549.1.9.1=#16...``)."""
    subject = x509.load_der_x509_certificate(certificate_der).subject.public_bytes()
    relative_names = []
    for _, rdn, _ in _der_items(_der_content(subject)):
        assertions = []
        for _, assertion, _ in _der_items(rdn):
            (_, oid, _), (tag, value, encoded) = _der_items(assertion)
            assertions.append(_attribute(_oid(oid), tag, value, encoded))
        relative_names.append("+".join(assertions))
    return ",".join(reversed(relative_names))


# Java's RFC 2253 keywords (AVAKeyword, rfc2253Compliant); any other type is written as its OID.
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
_BMP_STRING = 0x1E
# The string types Java writes as text (DerValue tags: UTF8, Printable, T61, IA5, General, BMP).
_STRING_TAGS = {0x0C, 0x13, 0x14, 0x16, 0x1B, _BMP_STRING}
_ESCAPED = set(',=+<>#;"\\')


def _attribute(oid: str, tag: int, value: bytes, encoded: bytes) -> str:
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{encoded.hex()}"
    text = value.decode("utf-16-be" if tag == _BMP_STRING else "utf-8", errors="replace")
    characters = ["\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text]
    lead = next((i for i, c in enumerate(characters) if c not in (" ", "\r")), len(characters))
    trail = next((i for i in reversed(range(len(characters))) if characters[i] not in (" ", "\r")),
                 -1)
    return keyword + "=" + "".join("\\" + c if i < lead or i > trail else c
                                   for i, c in enumerate(characters))


def _der_content(encoded: bytes) -> bytes:
    """The content of the one DER element ``encoded`` is."""
    ((_, content, _),) = _der_items(encoded)
    return content


def _der_items(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """The DER elements one after another in ``data``: (tag, content, whole encoding)."""
    items = []
    offset = 0
    while offset < len(data):
        tag, length, header = data[offset], data[offset + 1], 2
        if length & 0x80:
            size = length & 0x7F
            length = int.from_bytes(data[offset + 2:offset + 2 + size], "big")
            header += size
        end = offset + header + length
        items.append((tag, data[offset + header:end], data[offset:end]))
        offset = end
    return items


def _oid(content: bytes) -> str:
    """A DER OBJECT IDENTIFIER's content as dotted decimal."""
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _csv(value: str) -> list[str]:
    return [item for item in re.split(r"\s*,\s*", value.strip()) if item]


def _protocol_range(protocols: tuple[str, ...]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    unsupported = [name for name in protocols if name not in PROTOCOL_VERSIONS]
    if unsupported or not protocols:
        raise TlsConfigError(f"ssl.enabled.protocols={','.join(protocols)}: kipper speaks "
                             "TLSv1.2 and TLSv1.3 (TLS 1.2 is the minimum)")
    versions = sorted(PROTOCOL_VERSIONS[name] for name in protocols)
    return versions[0], versions[-1]


def _restrict(context: ssl.SSLContext, settings: TlsSettings) -> None:
    """Protocol versions and TLS 1.2 suites, as ``ssl.enabled.protocols`` and
    ``ssl.cipher.suites`` say."""
    context.minimum_version, context.maximum_version = _protocol_range(
        settings.enabled_protocols)
    if not settings.cipher_suites:
        return
    tls13 = {cipher["name"] for cipher in context.get_ciphers()
             if cipher["name"].startswith(TLS13_SUITE_PREFIXES)}
    unknown = [name for name in settings.cipher_suites
               if name.startswith(TLS13_SUITE_PREFIXES) and name not in tls13]
    if unknown:
        raise TlsConfigError(f"ssl.cipher.suites: unknown TLS 1.3 suites {','.join(unknown)}")
    tls12 = [IANA_TO_OPENSSL.get(name, name) for name in settings.cipher_suites
             if not name.startswith(TLS13_SUITE_PREFIXES)]
    if not tls12:
        if "TLSv1.2" in settings.enabled_protocols:
            raise TlsConfigError("ssl.cipher.suites names no TLS 1.2 suite but "
                                 "ssl.enabled.protocols has TLSv1.2")
        return
    try:
        context.set_ciphers(":".join(tls12))
    except ssl.SSLError:
        raise TlsConfigError(f"ssl.cipher.suites: no usable suite among "
                             f"{','.join(settings.cipher_suites)}") from None


def _load_identity(context: ssl.SSLContext, settings: TlsSettings) -> None:
    assert settings.certificate is not None
    # A key password of "" rather than None: OpenSSL would otherwise prompt on the terminal.
    try:
        context.load_cert_chain(settings.certificate, settings.key,
                                password=settings.key_password or "")
    except (OSError, ssl.SSLError) as error:
        files = str(settings.certificate) + (f" and {settings.key}" if settings.key else "")
        raise TlsConfigError(f"cannot load the certificate and key of {files} (wrong "
                             f"ssl.key.password?): {error}") from None


def _load_ca(context: ssl.SSLContext, ca: Path) -> None:
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as error:
        raise TlsConfigError(f"cannot load the CA certificates of {ca}: {error}") from None
