"""SCRAM credentials as the cluster metadata holds them (KIP-554, issue #18).

Kafka keeps, per user and SCRAM mechanism, only what RFC 5802 lets a server verify a
client with — the salt, StoredKey, ServerKey and iteration count — never the password.
AlterUserScramCredentials carries the client-side *salted* password (the admin client
runs PBKDF2 itself), so the metadata layer derives the keys from that; ``kafka-storage
format --add-scram`` and tests start from a password instead. Both paths meet in
:class:`ScramCredential`.

This module lives in the replication layer because the metadata image holds the store; it
imports nothing from the broker or coordinator layers. Records are plain JSON-safe dicts
(bytes as base64) so the store can be written to the metadata log as is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# Kafka's ScramMechanism.minIterations / maxIterations: below 4096 PBKDF2 is too cheap to
# brute-force offline, above 16384 every login costs the broker too much CPU.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = MIN_ITERATIONS
# Salt length when the broker itself salts a password (Kafka's admin client sends ~26).
GENERATED_SALT_BYTES = 32


class InvalidScramCredential(ValueError):
    """A credential Kafka would refuse with UNACCEPTABLE_CREDENTIAL (the message is safe to
    return to the client: it never contains secret material)."""


class UnknownScramMechanism(InvalidScramCredential):
    """A mechanism name or type id that is not SCRAM-SHA-256/512 (UNSUPPORTED_SASL_MECHANISM
    in AlterUserScramCredentials)."""


class ScramMechanism(StrEnum):
    """The SCRAM mechanisms Kafka supports; the value is the SASL mechanism name."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def type_id(self) -> int:
        """The ``Mechanism`` byte of AlterUserScramCredentials / DescribeUserScramCredentials
        and of the metadata records."""
        return _TYPE_IDS[self]

    @property
    def hash_name(self) -> str:
        """The hashlib name of the mechanism's hash (H and HMAC of RFC 5802)."""
        return _HASH_NAMES[self]

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    @classmethod
    def from_type_id(cls, type_id: int) -> ScramMechanism:
        for mechanism, known_id in _TYPE_IDS.items():
            if known_id == type_id:
                return mechanism
        raise UnknownScramMechanism(f"Unknown SCRAM mechanism type {type_id}")

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        try:
            return cls(name)
        except ValueError:
            raise UnknownScramMechanism(f"Unknown SCRAM mechanism {name!r}") from None


_TYPE_IDS = {ScramMechanism.SCRAM_SHA_256: 1, ScramMechanism.SCRAM_SHA_512: 2}
_HASH_NAMES = {ScramMechanism.SCRAM_SHA_256: "sha256", ScramMechanism.SCRAM_SHA_512: "sha512"}


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and mechanism (RFC 5802 section 3).

    The keys and salt are left out of ``repr`` so a credential logged by accident does not
    hand out the material an offline attack or a fake server would need.
    """

    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


@dataclass(frozen=True)
class ScramCredentialInfo:
    """One line of DescribeUserScramCredentials: the mechanism and its iteration count."""

    mechanism: ScramMechanism
    iterations: int


def validate_iterations(iterations: int) -> None:
    """Kafka's bounds, with its UNACCEPTABLE_CREDENTIAL messages."""
    if iterations < MIN_ITERATIONS:
        raise InvalidScramCredential("Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise InvalidScramCredential("Too many iterations")


def credential_from_salted_password(mechanism: ScramMechanism, salted_password: bytes,
                                    salt: bytes, iterations: int) -> ScramCredential:
    """The credential of an AlterUserScramCredentials upsertion, which carries
    SaltedPassword = Hi(password, salt, i) rather than the password."""
    validate_iterations(iterations)
    if not salt:
        raise InvalidScramCredential("Salt must not be empty")
    if not salted_password:
        raise InvalidScramCredential("Salted password must not be empty")
    client_key = hmac.digest(salted_password, b"Client Key", mechanism.hash_name)
    return ScramCredential(
        mechanism=mechanism,
        salt=salt,
        stored_key=hashlib.new(mechanism.hash_name, client_key).digest(),
        server_key=hmac.digest(salted_password, b"Server Key", mechanism.hash_name),
        iterations=iterations,
    )


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes,
                    iterations: int) -> bytes:
    """Hi() of RFC 5802, i.e. PBKDF2-HMAC; the password is UTF-8 encoded without SASLprep,
    as Kafka's ScramFormatter does, so a password set here matches what Kafka clients send."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_password(mechanism: ScramMechanism, password: str,
                             iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    """A credential for ``password`` (a fresh random salt unless one is given)."""
    validate_iterations(iterations)
    salt = secrets.token_bytes(GENERATED_SALT_BYTES) if salt is None else salt
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def credential_record(user: str, credential: ScramCredential) -> dict[str, Any]:
    """The JSON-safe form of one credential (Kafka's UserScramCredentialRecord fields)."""
    return {
        "name": user,
        "mechanism": credential.mechanism.type_id,
        "salt": base64.b64encode(credential.salt).decode("ascii"),
        "stored_key": base64.b64encode(credential.stored_key).decode("ascii"),
        "server_key": base64.b64encode(credential.server_key).decode("ascii"),
        "iterations": credential.iterations,
    }


def credential_from_record(record: Mapping[str, Any]) -> tuple[str, ScramCredential]:
    """The inverse of :func:`credential_record`."""
    return record["name"], ScramCredential(
        mechanism=ScramMechanism.from_type_id(record["mechanism"]),
        salt=base64.b64decode(record["salt"], validate=True),
        stored_key=base64.b64decode(record["stored_key"], validate=True),
        server_key=base64.b64decode(record["server_key"], validate=True),
        iterations=int(record["iterations"]),
    )


class ScramCredentials:
    """All users' SCRAM credentials, at most one per (user, mechanism)."""

    def __init__(self) -> None:
        self._by_user: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    def upsert(self, user: str, credential: ScramCredential) -> None:
        if not user:
            raise InvalidScramCredential("Username must not be empty")
        validate_iterations(credential.iterations)
        self._by_user.setdefault(user, {})[credential.mechanism] = credential

    def delete(self, user: str, mechanism: ScramMechanism) -> bool:
        """Whether there was such a credential (Kafka answers RESOURCE_NOT_FOUND if not)."""
        credentials = self._by_user.get(user)
        if credentials is None or credentials.pop(mechanism, None) is None:
            return False
        if not credentials:
            del self._by_user[user]
        return True

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def describe(self, users: Iterable[str] | None = None) -> dict[str, list[ScramCredentialInfo]]:
        """DescribeUserScramCredentials: every user with a credential, or the named ones that
        have one (the caller answers RESOURCE_NOT_FOUND for the others), mechanisms in type
        id order."""
        names = sorted(self._by_user) if users is None else [u for u in users if u in self._by_user]
        return {
            user: [ScramCredentialInfo(mechanism, credential.iterations)
                   for mechanism, credential in sorted(self._by_user[user].items(),
                                                       key=lambda item: item[0].type_id)]
            for user in names
        }

    def to_records(self) -> list[dict[str, Any]]:
        return [credential_record(user, credential)
                for user in sorted(self._by_user)
                for credential in sorted(self._by_user[user].values(),
                                         key=lambda c: c.mechanism.type_id)]

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> ScramCredentials:
        store = cls()
        for record in records:
            store.upsert(*credential_from_record(record))
        return store

    def __len__(self) -> int:
        return sum(len(credentials) for credentials in self._by_user.values())
