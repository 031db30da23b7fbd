"""What every server-side SASL mechanism shares: the failure type and the state machine
frame (issue #18).

A mechanism is a pure state machine: the connection layer hands it each SaslAuthenticate
``auth_bytes`` and sends back what :meth:`SaslServerMechanism.step` returns, so the
mechanisms are tested without sockets. Only :class:`SaslAuthenticationFailed` leaves
``step``; its message goes to the client as SaslAuthenticate's ``error_message`` and so
never holds a password, a token or anything else the client should not learn (such as
whether a user exists).
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class SaslAuthenticationFailed(Exception):
    """Authentication failed (SASL_AUTHENTICATION_FAILED); ``message`` is client-safe."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def invalid_credentials(mechanism: str) -> SaslAuthenticationFailed:
    """Kafka's reply when a SaslServer fails with a plain SaslException: one text for
    malformed messages, unknown users and wrong secrets alike, so none can be told apart."""
    return SaslAuthenticationFailed(
        "Authentication failed during authentication due to invalid credentials with SASL"
        f" mechanism {mechanism}")


class SaslServerMechanism(ABC):
    """One authentication exchange of one mechanism; a new instance per (re-)authentication.

    Once the exchange has failed or completed every further step fails, and the exchange then
    counts as failed: a client can neither retry inside a failed exchange nor append
    messages to a finished one.
    """

    # The SASL mechanism name, as SaslHandshake carries it.
    name: str

    def __init__(self) -> None:
        self._authorization_id: str | None = None
        self._failed = False

    def step(self, client_bytes: bytes) -> bytes:
        """Consume the client's next message and return the server's reply."""
        if self._failed or self.complete:
            self._failed = True
            raise invalid_credentials(self.name)
        try:
            return self._step(client_bytes)
        except SaslAuthenticationFailed:
            self._failed = True
            self._authorization_id = None
            raise

    @abstractmethod
    def _step(self, client_bytes: bytes) -> bytes:
        """The mechanism's own step; it calls :meth:`_succeed` when the client has proved
        its identity and raises :class:`SaslAuthenticationFailed` on anything else."""

    def _succeed(self, authorization_id: str) -> None:
        self._authorization_id = authorization_id

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None and not self._failed

    @property
    def authorization_id(self) -> str:
        """The authenticated name (SaslServer.getAuthorizationID); only once complete."""
        if not self.complete:
            raise RuntimeError("the SASL exchange has not completed")
        assert self._authorization_id is not None
        return self._authorization_id

    @property
    def principal(self) -> str:
        """The Kafka principal the connection acts as (DefaultKafkaPrincipalBuilder)."""
        return f"User:{self.authorization_id}"

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential this session rests on expires (epoch ms), which bounds the
        KIP-368 session lifetime; None for credentials without an expiry."""
        return None


def session_lifetime_ms(credential_expiry_ms: int | None, connections_max_reauth_ms: int,
                        now_ms: int) -> int:
    """SaslAuthenticate's ``session_lifetime_ms`` as Kafka's SaslServerAuthenticator computes
    it: 0 (no re-authentication needed) when neither connections.max.reauth.ms nor the
    credential sets a limit, else the smaller of the two. A credential expiring within the
    clock skew the validator tolerated yields 1 ms rather than 0, which would mean "never"."""
    if credential_expiry_ms is None:
        return max(connections_max_reauth_ms, 0)
    remaining = max(credential_expiry_ms - now_ms, 1)
    if connections_max_reauth_ms > 0:
        return min(remaining, connections_max_reauth_ms)
    return remaining
