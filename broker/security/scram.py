"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 on the server (RFC 5802, RFC 7677), as Kafka's
ScramSaslServer runs them: no channel binding (the GS2 header is ``n,,`` or
``n,a=<authzid>,``), credentials from the metadata image's SCRAM store.

Why not scramp's server: it SASLprep-normalises user names where Kafka looks them up
verbatim, it refuses salts shorter than 12 bytes where Kafka accepts any salt an admin
sets, and it fails an unknown user at the first message. Here an unknown user goes through
the whole exchange against a made-up credential (a salt that is stable per user name, so
two probes look like a real user's) and fails at the proof exactly as a wrong password
does: a client cannot tell which user names exist. scramp's client drives the tests, an
independent implementation of the other side.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from replication.scram_credentials import (
    DEFAULT_ITERATIONS,
    GENERATED_SALT_BYTES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
)

from .sasl_mechanism import (
    SaslAuthenticationFailed,
    SaslServerMechanism,
    invalid_credentials,
)

ScramCredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]

# Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG: the client authenticates with a delegation
# token (KIP-48), which this broker does not issue.
TOKEN_AUTH_EXTENSION = "tokenauth"
# Keys the made-up salts of unknown users; per process, so they cannot be precomputed.
_UNKNOWN_USER_SALT_KEY = secrets.token_bytes(32)
# RFC 5802 attribute values: nonces are printable ASCII but ',', extension keys are letters.
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")
_EXTENSION = re.compile(r"([A-Za-z]+)=[^,]+")
_ESCAPE = re.compile(r"=(?!2C|3D)")


class ScramServer(SaslServerMechanism):
    """client-first -> server-first -> client-final -> server-final (then complete)."""

    def __init__(self, mechanism: ScramMechanism, credentials: ScramCredentialLookup) -> None:
        super().__init__()
        self.name = mechanism.value
        self._mechanism = mechanism
        self._credentials = credentials
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._username = ""
        self._credential: ScramCredential | None = None
        self._user_known = False

    def _step(self, client_bytes: bytes) -> bytes:
        try:
            message = client_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_credentials(self.name) from None
        if self._credential is None:
            return self._client_first(message)
        return self._client_final(message)

    def _client_first(self, message: str) -> bytes:
        if not message.startswith("n,"):
            # 'y' or 'p=': the client wants channel binding, which Kafka never offers.
            raise invalid_credentials(self.name)
        authzid_attribute, separator, bare = message[2:].partition(",")
        if not separator:
            raise invalid_credentials(self.name)
        self._gs2_header = f"n,{authzid_attribute},"
        requested_authorization_id = ""
        if authzid_attribute:
            if not authzid_attribute.startswith("a="):
                raise invalid_credentials(self.name)
            requested_authorization_id = self._sasl_name(authzid_attribute[2:])

        attributes = bare.split(",")
        if (len(attributes) < 2 or not attributes[0].startswith("n=")
                or not attributes[1].startswith("r=")):
            # Also a leading "m=": a mandatory extension we cannot honour (RFC 5802 5.1).
            raise invalid_credentials(self.name)
        self._username = self._sasl_name(attributes[0][2:])
        client_nonce = attributes[1][2:]
        if not _NONCE.fullmatch(client_nonce):
            raise invalid_credentials(self.name)
        for extension in attributes[2:]:
            match = _EXTENSION.fullmatch(extension)
            if match is None:
                raise invalid_credentials(self.name)
            if match.group(1) == TOKEN_AUTH_EXTENSION:
                raise SaslAuthenticationFailed(
                    "Authentication failed: delegation tokens are not supported")
        if requested_authorization_id and requested_authorization_id != self._username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different"
                " from username")

        credential = self._credentials(self._username, self._mechanism)
        # A credential under Kafka's minimum iterations (only a hand-made lookup can hold one;
        # the store refuses them) is refused as Kafka refuses it, but only at the proof.
        self._user_known = (credential is not None and credential.mechanism == self._mechanism
                            and credential.iterations >= MIN_ITERATIONS)
        self._credential = credential if self._user_known else self._unknown_user_credential()
        self._client_first_bare = bare
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode("ascii")

    def _client_final(self, message: str) -> bytes:
        assert self._credential is not None
        attributes = message.split(",")
        if (len(attributes) < 3 or not attributes[0].startswith("c=")
                or not attributes[1].startswith("r=") or not attributes[-1].startswith("p=")
                or not all(_EXTENSION.fullmatch(extension) for extension in attributes[2:-1])):
            raise invalid_credentials(self.name)
        channel_binding = _base64(attributes[0][2:])
        # The nonce must end with the one sent, as Kafka's ScramSaslServer checked it until
        # 3.x (endsWith): librdkafka 2.0 (Debian's kcat) repeats its own nonce in front of
        # it. The proof covers the message as sent, and the server part is still fresh.
        if (channel_binding != self._gs2_header.encode("utf-8")
                or not attributes[1][2:].endswith(self._nonce)):
            raise invalid_credentials(self.name)
        proof = _base64(attributes[-1][2:])
        if proof is None or len(proof) != self._mechanism.digest_size:
            raise invalid_credentials(self.name)

        hash_name = self._mechanism.hash_name
        without_proof = message[:-len(attributes[-1]) - 1]
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode("utf-8")
        client_signature = hmac.digest(self._credential.stored_key, auth_message, hash_name)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        stored_key = hashlib.new(hash_name, client_key).digest()
        if not hmac.compare_digest(stored_key, self._credential.stored_key) or not self._user_known:
            raise invalid_credentials(self.name)
        server_signature = hmac.digest(self._credential.server_key, auth_message, hash_name)
        self._succeed(self._username)
        return b"v=" + base64.b64encode(server_signature)

    def _sasl_name(self, escaped: str) -> str:
        """A saslname of RFC 5802: ',' and '=' travel as '=2C' and '=3D'."""
        if not escaped or "\x00" in escaped or _ESCAPE.search(escaped):
            raise invalid_credentials(self.name)
        return escaped.replace("=2C", ",").replace("=3D", "=")

    def _unknown_user_credential(self) -> ScramCredential:
        """A credential no password matches, whose salt is the same at every attempt."""
        salt_input = f"{self._mechanism.value}\x00{self._username}".encode("utf-8")
        digest_size = self._mechanism.digest_size
        return ScramCredential(
            mechanism=self._mechanism,
            salt=hmac.digest(_UNKNOWN_USER_SALT_KEY, salt_input, "sha256")[:GENERATED_SALT_BYTES],
            stored_key=secrets.token_bytes(digest_size),
            server_key=secrets.token_bytes(digest_size),
            iterations=DEFAULT_ITERATIONS,
        )


def _base64(text: str) -> bytes | None:
    """Strict base64, None when ``text`` is not."""
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return None
