"""SASL/OAUTHBEARER on the server (RFC 7628), with the semantics of Kafka's built-in JWT
validation (KIP-255, KIP-768): the client sends a JWT access token, the broker checks its
signature against the identity provider's JWKS and its time and audience/issuer claims, and
the principal is one of its claims (``sasl.oauthbearer.sub.claim.name``, ``sub`` by default).

A rejected token is answered, as RFC 7628 and Kafka do, with the JSON error
``{"status":"invalid_token"}``; the client acknowledges with a lone ``\\x01`` and only then
does the exchange fail. The token's ``exp`` bounds the session (KIP-368), so a connection
re-authenticates before its token expires.

Key material comes from a :class:`JwksKeys` cache that :meth:`SaslServerMechanism.step`
only reads: loading it (a file read or an HTTP GET) is the connection layer's job, off the
event loop, at start-up and whenever :meth:`JwksKeys.refresh_due` says so.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from .sasl_mechanism import (
    SaslAuthenticationFailed,
    SaslServerMechanism,
    invalid_credentials,
)

log = logging.getLogger(__name__)

# The RFC 7628 error a client receives for any token the broker will not accept; Kafka sends
# the same status whatever the cause, which keeps validation details from the client.
INVALID_TOKEN_ERROR = b'{"status":"invalid_token"}'
# Kafka's defaults: sasl.oauthbearer.clock.skew.seconds, sasl.oauthbearer.jwks.endpoint.refresh.ms.
DEFAULT_CLOCK_SKEW_S = 30
DEFAULT_JWKS_REFRESH_S = 3600.0
# The client's acknowledgement of an error reply (RFC 7628 section 3.2.3).
_ERROR_ACKNOWLEDGEMENT = b"\x01"
# Asymmetric signatures only: an HMAC ("HS256") token would be verified with a public key
# as the shared secret, and "none" is no signature at all.
_ALGORITHMS_BY_KEY_TYPE = {
    "RSA": frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    "EC": frozenset({"ES256", "ES384", "ES512"}),
    "OKP": frozenset({"EdDSA"}),
}
# Grammar of the client's initial response (RFC 7628 section 3.1, as Kafka's
# OAuthBearerClientInitialResponse parses it).
_GS2_HEADER = re.compile(r"n,(?:a=((?:[^\x00=,]|=2C|=3D)+))?,")
_KEY_VALUE = re.compile(r"([A-Za-z]+)=([\x21-\x7e \t\r\n]+)")
_BEARER = re.compile(r"([A-Za-z0-9_]+) +([-_.A-Za-z0-9]+)")
# Tokens naming a key id the cache lacks ask for a refresh at most this often, so clients
# sending made-up key ids cannot make the broker hammer the identity provider.
UNKNOWN_KEY_REFRESH_BACKOFF_S = 10.0
# The largest JWKS document the loader reads: real ones are a few kilobytes.
_MAX_JWKS_BYTES = 1 << 20
_JWKS_HTTP_TIMEOUT_S = 10.0


class JwksUnavailable(Exception):
    """The JWKS could not be read or holds no usable signing key."""


@dataclass(frozen=True)
class JwksKey:
    """One signing key of a JWKS."""

    key_id: str | None
    key_type: str
    # The JWK's own "alg", when it names one: the only algorithm the key may verify.
    algorithm: str | None
    # The public key object (cryptography's) PyJWT verifies signatures with.
    verification_key: Any


class JwksKeys:
    """The signing keys of an identity provider, from a JWKS file or http(s) URL
    (``sasl.oauthbearer.jwks.endpoint.url`` accepts both), kept until refreshed."""

    def __init__(self, source: str, refresh_interval_s: float = DEFAULT_JWKS_REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self._is_url = source.startswith(("https://", "http://"))
        self._refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._keys: list[JwksKey] = []
        self._loaded_at: float | None = None
        self._file_mtime_ns: int | None = None
        self._unknown_key_seen = False

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> JwksKeys:
        """A JWKS file, read now so a bad file stops the broker at start-up as in Kafka."""
        keys = cls(os.fspath(path))
        keys.refresh()
        return keys

    def refresh(self) -> None:
        """Read the JWKS again (blocking I/O). On failure the keys already held stay."""
        if self._is_url:
            document = self._fetch_url()
        else:
            try:
                self._file_mtime_ns = os.stat(self.source).st_mtime_ns
                with open(self.source, "rb") as jwks_file:
                    document = jwks_file.read(_MAX_JWKS_BYTES + 1)
            except OSError as error:
                raise JwksUnavailable(f"cannot read JWKS file {self.source}: {error}") from error
        self._keys = _parse_jwks(document)
        self._loaded_at = self._clock()
        self._unknown_key_seen = False

    def refresh_due(self) -> bool:
        """Whether :meth:`refresh` should run: never loaded, a token named a key id the
        cache lacks (the provider rotated its keys; at most every
        UNKNOWN_KEY_REFRESH_BACKOFF_S), the refresh interval has passed (URL), or the file
        changed."""
        if self._loaded_at is None:
            return True
        age = self._clock() - self._loaded_at
        if self._unknown_key_seen and age >= UNKNOWN_KEY_REFRESH_BACKOFF_S:
            return True
        if self._is_url:
            return age >= self._refresh_interval_s
        try:
            return os.stat(self.source).st_mtime_ns != self._file_mtime_ns
        except OSError:
            return False

    def signing_key(self, key_id: str | None) -> JwksKey | None:
        """The key a token's ``kid`` names; a token without ``kid`` may only use the sole
        key of a one-key set (jose4j's rule, which Kafka inherits)."""
        if key_id is None:
            return self._keys[0] if len(self._keys) == 1 else None
        for key in self._keys:
            if key.key_id == key_id:
                return key
        self._unknown_key_seen = True
        return None

    def _fetch_url(self) -> bytes:
        try:
            with urllib.request.urlopen(self.source, timeout=_JWKS_HTTP_TIMEOUT_S) as response:
                return response.read(_MAX_JWKS_BYTES + 1)
        except OSError as error:
            raise JwksUnavailable(f"cannot fetch JWKS from {self.source}: {error}") from error


def _parse_jwks(document: bytes) -> list[JwksKey]:
    if len(document) > _MAX_JWKS_BYTES:
        raise JwksUnavailable("JWKS document too large")
    try:
        parsed = json.loads(document)
    except ValueError as error:
        raise JwksUnavailable("JWKS is not JSON") from error
    entries = parsed.get("keys") if isinstance(parsed, dict) else None
    if not isinstance(entries, list):
        raise JwksUnavailable("JWKS has no \"keys\" list")
    keys = []
    for entry in entries:
        if (not isinstance(entry, dict) or entry.get("kty") not in _ALGORITHMS_BY_KEY_TYPE
                or entry.get("use", "sig") != "sig"):
            continue
        try:
            verification_key = jwt.PyJWK(entry).key
        except (jwt.PyJWTError, ValueError):
            continue  # a key type, curve or value PyJWT cannot use, as PyJWKSet skips them
        key_id, algorithm = entry.get("kid"), entry.get("alg")
        keys.append(JwksKey(key_id if isinstance(key_id, str) else None, entry["kty"],
                             algorithm if isinstance(algorithm, str) else None,
                             verification_key))
    if not keys:
        raise JwksUnavailable("JWKS holds no usable signing key")
    return keys


@dataclass(frozen=True)
class ValidatedToken:
    """What the broker keeps of an accepted token."""

    principal_name: str
    expiry_ms: int


class TokenRejected(Exception):
    """Why a token was refused; for the broker's debug log only (never holds the token)."""


@dataclass(frozen=True)
class OAuthBearerValidator:
    """Kafka's broker-side JWT checks (its BrokerJwtValidator): a signature by a JWKS key,
    ``exp`` required, ``nbf``/``iat`` not in the future, all with ``clock_skew_s`` of
    tolerance; the expected audience (any of them) and issuer when configured; the principal
    from ``principal_claim``."""

    keys: JwksKeys
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_s: int = DEFAULT_CLOCK_SKEW_S
    principal_claim: str = "sub"
    clock: Callable[[], float] = time.time

    def validate(self, token: str) -> ValidatedToken:
        claims = self._verified_claims(token)
        now = self.clock()
        expiry = _numeric_date(claims, "exp")
        if expiry is None:
            raise TokenRejected("no exp claim")
        if now >= expiry + self.clock_skew_s:
            raise TokenRejected("expired")
        not_before = _numeric_date(claims, "nbf")
        if not_before is not None and now + self.clock_skew_s < not_before:
            raise TokenRejected("not yet valid (nbf)")
        issued_at = _numeric_date(claims, "iat")
        if issued_at is not None and now + self.clock_skew_s < issued_at:
            raise TokenRejected("issued in the future (iat)")
        if self.expected_audience:
            audience = claims.get("aud")
            audiences = [audience] if isinstance(audience, str) else audience
            if not isinstance(audiences, list) or not set(self.expected_audience).intersection(
                    a for a in audiences if isinstance(a, str)):
                raise TokenRejected("unexpected audience")
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise TokenRejected("unexpected issuer")
        principal_name = claims.get(self.principal_claim)
        if not isinstance(principal_name, str) or not principal_name.strip():
            raise TokenRejected(f"no {self.principal_claim} claim")
        return ValidatedToken(principal_name, math.floor(expiry * 1000))

    def _verified_claims(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            key_id = header.get("kid")
            key = self.keys.signing_key(key_id if isinstance(key_id, str) else None)
            if key is None:
                raise TokenRejected("no JWKS key for the token's kid")
            if (not isinstance(algorithm, str)
                    or algorithm not in _ALGORITHMS_BY_KEY_TYPE[key.key_type]
                    or key.algorithm not in (None, algorithm)):
                raise TokenRejected("algorithm not allowed for the key")
            payload = jwt.PyJWS().decode_complete(token, key.verification_key,
                                                  algorithms=[algorithm])["payload"]
            claims = json.loads(payload)
        except jwt.PyJWTError as error:
            raise TokenRejected(type(error).__name__) from None
        except (ValueError, RecursionError):
            # Not JSON, or JSON nested beyond the parser's depth.
            raise TokenRejected("malformed token") from None
        if not isinstance(claims, dict):
            raise TokenRejected("claims are not a JSON object")
        return claims


def _numeric_date(claims: dict[str, Any], name: str) -> float | None:
    """A NumericDate claim (seconds since the epoch), None when absent; a claim that is not
    a finite number rejects the token (JSON's NaN and Infinity parse in Python)."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenRejected(f"{name} is not a NumericDate")
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond any float
        raise TokenRejected(f"{name} is not a NumericDate") from None
    if not math.isfinite(seconds):
        raise TokenRejected(f"{name} is not a NumericDate")
    return seconds


class OAuthBearerServer(SaslServerMechanism):
    """``n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]...\\x01`` -> empty reply
    (accepted) or the RFC 7628 error, then failure at the client's ``\\x01``.

    SASL extensions (Kafka's ``sasl.oauthbearer.extensions``) are accepted and ignored: no
    extension validator is configured, as in Kafka's default.
    """

    name = "OAUTHBEARER"

    def __init__(self, validator: OAuthBearerValidator) -> None:
        super().__init__()
        self._validator = validator
        self._error_sent = False
        self._expiry_ms: int | None = None

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._expiry_ms

    def _step(self, client_bytes: bytes) -> bytes:
        if self._error_sent:
            if client_bytes == _ERROR_ACKNOWLEDGEMENT:
                raise SaslAuthenticationFailed(INVALID_TOKEN_ERROR.decode("ascii"))
            raise invalid_credentials(self.name)
        requested_authorization_id, token = self._parse_initial_response(client_bytes)
        try:
            validated = self._validator.validate(token)
        except TokenRejected as rejection:
            log.debug("SASL/OAUTHBEARER token rejected: %s", rejection)
            self._error_sent = True
            return INVALID_TOKEN_ERROR
        if requested_authorization_id and requested_authorization_id != validated.principal_name:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different"
                " from the token's principal name")
        self._expiry_ms = validated.expiry_ms
        self._succeed(validated.principal_name)
        return b""

    def _parse_initial_response(self, client_bytes: bytes) -> tuple[str, str]:
        """The requested authorization id ("" if none) and the bearer token."""
        try:
            message = client_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise invalid_credentials(self.name) from None
        gs2_header, separator, rest = message.partition("\x01")
        header = _GS2_HEADER.fullmatch(gs2_header)
        # rest = kvpair \x01 ... kvpair \x01 \x01, i.e. the pairs then two empty fields.
        fields = rest.split("\x01")
        if header is None or not separator or len(fields) < 3 or fields[-2:] != ["", ""]:
            raise invalid_credentials(self.name)
        values: dict[str, str] = {}
        for field in fields[:-2]:
            pair = _KEY_VALUE.fullmatch(field)
            if pair is None or pair.group(1) in values:
                raise invalid_credentials(self.name)
            values[pair.group(1)] = pair.group(2)
        bearer = _BEARER.fullmatch(values.get("auth", ""))
        if bearer is None or bearer.group(1).lower() != "bearer":
            raise invalid_credentials(self.name)
        authorization_id = (header.group(1) or "").replace("=2C", ",").replace("=3D", "=")
        return authorization_id, bearer.group(2)
