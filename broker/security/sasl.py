"""Server-side SASL for the connection layer (issue #18): the mechanisms a listener offers
and the state machine that runs one exchange.

The connection layer answers SaslHandshake from :attr:`SaslServerConfig.enabled_mechanisms`
(UNSUPPORTED_SASL_MECHANISM with :data:`UNSUPPORTED_SASL_MECHANISM_MESSAGE` otherwise),
creates the mechanism with :func:`server_mechanism`, feeds it each SaslAuthenticate's
``auth_bytes`` and, once it is complete, sets ``session_lifetime_ms`` with
:func:`session_lifetime_ms` and acts as its :attr:`~SaslServerMechanism.principal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from replication.scram_credentials import ScramCredential, ScramMechanism

from .oauthbearer import OAuthBearerServer, OAuthBearerValidator
from .plain import PlainServer
from .sasl_mechanism import (
    SaslAuthenticationFailed,
    SaslServerMechanism,
    session_lifetime_ms,
)
from .scram import ScramCredentialLookup, ScramServer

__all__ = [
    "ENABLED",
    "UNSUPPORTED_SASL_MECHANISM_MESSAGE",
    "SaslAuthenticationFailed",
    "SaslServerConfig",
    "SaslServerMechanism",
    "UnsupportedSaslMechanism",
    "server_mechanism",
    "session_lifetime_ms",
]

# The mechanisms this broker implements, i.e. what sasl.enabled.mechanisms may name.
ENABLED: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kafka's text for the error code (Errors.UNSUPPORTED_SASL_MECHANISM); SaslHandshakeResponse
# has no message field, so this is for responses and logs that do.
UNSUPPORTED_SASL_MECHANISM_MESSAGE = "The broker does not support the requested SASL mechanism."


class UnsupportedSaslMechanism(Exception):
    """A SaslHandshake for a mechanism the listener does not offer; the message is the one
    Kafka's SaslServerAuthenticator raises (UnsupportedSaslMechanismException)."""

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.message = f"Unsupported SASL mechanism {mechanism}"
        super().__init__(self.message)


def _no_scram_users(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return None


@dataclass(frozen=True)
class SaslServerConfig:
    """What a listener's mechanisms check credentials against.

    ``plain_users`` is PlainLoginModule's ``user_<name>`` list (see
    :func:`broker.security.plain.plain_users_from_jaas_options`); ``scram_credentials`` looks
    a user's credential up in the metadata image (``ScramCredentials.lookup``);
    ``oauthbearer`` validates tokens. A mechanism is offered when it is in
    ``enabled_mechanisms`` (sasl.enabled.mechanisms), which must only name mechanisms of
    :data:`ENABLED` and OAUTHBEARER only with a validator.
    """

    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_credentials: ScramCredentialLookup = field(default=_no_scram_users)
    oauthbearer: OAuthBearerValidator | None = None

    def __post_init__(self) -> None:
        unknown = [name for name in self.enabled_mechanisms if name not in ENABLED]
        if unknown:
            raise ValueError(f"sasl.enabled.mechanisms names unsupported mechanisms {unknown};"
                             f" supported: {', '.join(ENABLED)}")
        if "OAUTHBEARER" in self.enabled_mechanisms and self.oauthbearer is None:
            raise ValueError("OAUTHBEARER needs a JWKS (sasl.oauthbearer.jwks.endpoint.url)")


def server_mechanism(name: str, config: SaslServerConfig) -> SaslServerMechanism:
    """A fresh server for one exchange of ``name`` (mechanism names are case-sensitive in
    Kafka); :class:`UnsupportedSaslMechanism` when the listener does not offer it."""
    if name not in config.enabled_mechanisms:
        raise UnsupportedSaslMechanism(name)
    if name == "PLAIN":
        return PlainServer(config.plain_users)
    if name == "OAUTHBEARER":
        assert config.oauthbearer is not None  # SaslServerConfig checks it
        return OAuthBearerServer(config.oauthbearer)
    return ScramServer(ScramMechanism(name), config.scram_credentials)
