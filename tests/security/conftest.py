"""Fixtures of the SASL tests; they are defined in tests/support/identity_provider.py."""

from support.identity_provider import (  # noqa: F401
    jwks_keys,
    jwks_path,
    sign_token,
    signing_key,
    validator,
)
