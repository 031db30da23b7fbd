"""SASL/PLAIN on the server (RFC 4616), as Kafka's PlainSaslServer with the JAAS
``PlainLoginModule`` user list (``user_<name>="<password>"``).

PLAIN sends the password itself, so it belongs on TLS listeners only; the broker checks it
against the configured users in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from .sasl_mechanism import (
    SaslAuthenticationFailed,
    SaslServerMechanism,
    invalid_credentials,
)

# Kafka's PlainServerCallbackHandler reads the users from the JAAS options with this prefix.
JAAS_USER_PREFIX = "user_"
# Compared against when the user is unknown, so an unknown user costs what a known one does.
_ABSENT_PASSWORD = b"\x00" * 32


def plain_users_from_jaas_options(options: Mapping[str, str]) -> dict[str, str]:
    """The user -> password map of a PlainLoginModule JAAS entry's options: every
    ``user_<name>`` option; the others (``username``/``password``, the broker's own
    inter-broker login) are not users."""
    return {key[len(JAAS_USER_PREFIX):]: value for key, value in options.items()
            if key.startswith(JAAS_USER_PREFIX) and len(key) > len(JAAS_USER_PREFIX)}


class PlainServer(SaslServerMechanism):
    """One message, ``[authzid] NUL authcid NUL passwd``, answered with an empty reply.

    The error texts are Kafka's (its clients show them); "Invalid username or password"
    covers unknown users and wrong passwords alike, and the authzid is only judged once the
    password is right so it reveals nothing about the password either.
    """

    name = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        super().__init__()
        self._users = users

    def _step(self, client_bytes: bytes) -> bytes:
        try:
            message = client_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_credentials(self.name) from None
        fields = message.split("\x00")
        if len(fields) != 3:
            raise invalid_credentials(self.name)
        requested_authorization_id, username, password = fields
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        expected_bytes = _ABSENT_PASSWORD if expected is None else expected.encode("utf-8")
        if not hmac.compare_digest(password.encode("utf-8"), expected_bytes) or expected is None:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if requested_authorization_id and requested_authorization_id != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different"
                " from username")
        self._succeed(username)
        return b""
