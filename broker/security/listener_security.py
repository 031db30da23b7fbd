"""A node's listeners as its settings describe them: what each binds, how its connections
are secured (a TLS context, the SASL mechanisms it offers), and how the node's own
connections to other nodes authenticate on the inter-broker listener.

Everything here is built once at start-up from ``BrokerConfig``, so a mistake (a missing
keystore, an unknown mechanism, an unreadable JWKS) stops the node with one line before it
binds anything, as Kafka refuses a bad ``server.properties``.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from replication.node_client import NodeSecurity
from replication.scram_credentials import ScramCredential, ScramMechanism

from ..config import BrokerConfig
from .listeners import Listener, ListenerConfig, SecurityProtocol
from .oauthbearer import JwksKeys, OAuthBearerValidator
from .plain import plain_users_from_jaas_options
from .sasl import SaslServerConfig
from .tls import PrincipalMapper, TlsSettings, client_context, server_context

ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class AuthenticationFailures:
    """Connections refused at authentication, counted for the metrics: a failed TLS
    handshake or SASL exchange (Kafka's failed-authentication-total)."""

    def __init__(self) -> None:
        self.count = 0

    def add(self) -> None:
        self.count += 1


@dataclass(frozen=True)
class ListenerSecurity:
    """One listener and what its connections go through before their first request."""

    listener: Listener
    tls: ssl.SSLContext | None
    # The principal of a client certificate (SSL listeners; SASL_SSL takes SASL's).
    principal_mapper: PrincipalMapper
    sasl: SaslServerConfig | None
    failures: AuthenticationFailures

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def protocol(self) -> SecurityProtocol:
        return self.listener.protocol


def listener_config(config: BrokerConfig) -> ListenerConfig:
    """Kafka's four listener settings; without ``listeners``, the single PLAINTEXT listener
    of ``listener`` / ``advertised_listener`` (kipper's original flags)."""
    if config.listeners is not None:
        return ListenerConfig.parse(config.listeners, config.advertised_listeners,
                                    config.listener_security_protocol_map,
                                    config.inter_broker_listener_name)
    advertised = config.advertised_listeners or (
        f"PLAINTEXT://{config.advertised_listener}" if config.advertised_listener else None)
    return ListenerConfig.parse(f"PLAINTEXT://{config.listener}", advertised,
                                config.listener_security_protocol_map,
                                config.inter_broker_listener_name)


def tls_properties(config: BrokerConfig) -> dict[str, str]:
    """The ``ssl_*`` settings under Kafka's names, and the per-listener ones
    (``listener.name.<x>.ssl.*``), for :class:`TlsSettings`."""
    names = ("keystore_location", "certificate_location", "key_location", "key_password",
             "truststore_location", "client_auth", "enabled_protocols", "cipher_suites",
             "principal_mapping_rules", "endpoint_identification_algorithm")
    properties = {"ssl." + name.replace("_", "."): value for name in names
                  if (value := getattr(config, "ssl_" + name)) is not None}
    for name in config.listener_ssl_settings:
        if not re.fullmatch(r"listener\.name\.[^.]+\.ssl\..+", name):
            raise ValueError(f"listener_ssl_settings: {name!r} is not "
                             "listener.name.<listener>.ssl.<setting>")
    return {**properties, **config.listener_ssl_settings}


def plain_users(config: BrokerConfig) -> dict[str, str]:
    """PLAIN's users: the file's ``user_<name>=<password>`` lines, then the TOML table."""
    users: dict[str, str] = {}
    if config.sasl_plain_users_file is not None:
        users.update(plain_users_from_jaas_options(_properties(config.sasl_plain_users_file)))
    users.update(config.sasl_plain_users)
    return users


def _properties(path: Path) -> dict[str, str]:
    """A Java-style properties file's ``key=value`` (or ``key: value``) lines; values may be
    quoted as in a JAAS file."""
    options = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, separator, value = line.partition("=")
        if not separator:
            key, separator, value = line.partition(":")
        value = value.strip().rstrip(";").strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        options[key.strip()] = value
    return options


def sasl_server_config(config: BrokerConfig, scram_lookup: ScramLookup) -> SaslServerConfig:
    mechanisms = tuple(m.strip() for m in config.sasl_enabled_mechanisms.split(",")
                       if m.strip())
    validator = None
    if config.sasl_oauthbearer_jwks_endpoint_url:
        source = config.sasl_oauthbearer_jwks_endpoint_url.removeprefix("file://")
        keys = JwksKeys(source)
        keys.refresh()  # a bad JWKS stops the node now, as in Kafka
        audience = tuple(a.strip() for a in
                         (config.sasl_oauthbearer_expected_audience or "").split(",")
                         if a.strip())
        validator = OAuthBearerValidator(
            keys, expected_audience=audience,
            expected_issuer=config.sasl_oauthbearer_expected_issuer,
            principal_claim=config.sasl_oauthbearer_sub_claim_name)
    return SaslServerConfig(mechanisms, plain_users(config), scram_lookup, validator)


def listener_securities(config: BrokerConfig, listeners: ListenerConfig,
                        scram_lookup: ScramLookup, failures: AuthenticationFailures,
                        ) -> list[ListenerSecurity]:
    """Each bound listener with its TLS context and SASL configuration."""
    properties = tls_properties(config)
    sasl = None
    if any(listener.protocol.uses_sasl for listener in listeners.listeners):
        sasl = sasl_server_config(config, scram_lookup)
    securities = []
    for listener in listeners.listeners:
        # As in Kafka, ssl.client.auth is for SSL listeners: a SASL_SSL client proves who
        # it is with SASL, and is asked for a certificate only by the listener's own
        # listener.name.<x>.ssl.client.auth.
        settings = TlsSettings.from_properties(
            {**properties, "ssl.client.auth": "none"} if listener.protocol.uses_sasl
            else properties, listener.name)
        securities.append(ListenerSecurity(
            listener, server_context(settings) if listener.protocol.uses_tls else None,
            settings.principal_mapper, sasl if listener.protocol.uses_sasl else None, failures))
    return securities


def inter_broker_security(config: BrokerConfig, listeners: ListenerConfig) -> NodeSecurity:
    """How this node's connections to other nodes authenticate on the inter-broker
    listener: TLS (with the node's own certificate, for a listener requiring mTLS) and SASL
    as ``inter_broker_sasl_username``."""
    protocol = listeners.inter_broker.protocol
    context = None
    if protocol.uses_tls:
        settings = TlsSettings.from_properties(tls_properties(config),
                                               listeners.inter_broker.name)
        context = client_context(settings)
    if not protocol.uses_sasl:
        return NodeSecurity(context)
    if not config.inter_broker_sasl_username or config.inter_broker_sasl_password is None:
        raise ValueError(f"the inter-broker listener {listeners.inter_broker.name} uses "
                         f"{protocol.value}: set inter_broker_sasl_username and "
                         "inter_broker_sasl_password (KIPPER_INTER_BROKER_SASL_PASSWORD)")
    return NodeSecurity(context, config.sasl_mechanism_inter_broker_protocol,
                        config.inter_broker_sasl_username, config.inter_broker_sasl_password)
