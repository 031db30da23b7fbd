"""An identity provider for the SASL tests (tests/security): an RSA signing key whose public
half is published in a JWKS file, a signer of access tokens and the OAUTHBEARER client
message, all without network."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.security.oauthbearer import JwksKeys, OAuthBearerValidator

# The validators' fixed "now", so token times are exact.
NOW = 1_800_000_000
KEY_ID = "kipper-test-key"

TokenSigner = Callable[..., str]


def rsa_private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(private_key: Any, key_id: str, algorithm: str = "RS256") -> dict[str, Any]:
    algorithm_type = jwt.get_algorithm_by_name(algorithm)
    jwk = algorithm_type.to_jwk(private_key.public_key(), as_dict=True)
    return {**jwk, "kid": key_id, "alg": algorithm, "use": "sig"}


def sign(private_key: Any, claims: dict[str, Any], key_id: str | None = KEY_ID,
         algorithm: str = "RS256") -> str:
    headers = {} if key_id is None else {"kid": key_id}
    return jwt.encode(claims, private_key, algorithm=algorithm, headers=headers)


def initial_response(token: str, authzid: str = "", extensions: str = "") -> bytes:
    """The client's first OAUTHBEARER message, as Kafka's OAuthBearerClientInitialResponse
    writes it."""
    authzid_attribute = f"a={authzid}" if authzid else ""
    extension_part = f"\x01{extensions}" if extensions else ""
    return f"n,{authzid_attribute},\x01auth=Bearer {token}{extension_part}\x01\x01".encode()


@pytest.fixture(scope="session")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa_private_key()


@pytest.fixture(scope="session")
def jwks_path(tmp_path_factory, signing_key):
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(signing_key, KEY_ID)]}))
    return path


@pytest.fixture(scope="session")
def jwks_keys(jwks_path) -> JwksKeys:
    return JwksKeys.from_file(jwks_path)


@pytest.fixture(scope="session")
def validator(jwks_keys) -> OAuthBearerValidator:
    return OAuthBearerValidator(jwks_keys, clock=lambda: NOW)


@pytest.fixture(scope="session")
def sign_token(signing_key) -> TokenSigner:
    """A token for ``sub`` valid for an hour from NOW; keyword arguments add or override
    claims (None removes one)."""

    def signer(**overrides: Any) -> str:
        claims = {"sub": "alice", "iat": NOW, "exp": NOW + 3600, **overrides}
        return sign(signing_key, {k: v for k, v in claims.items() if v is not None})

    return signer
