"""The OAUTHBEARER server (broker/security/oauthbearer.py) with RS256 tokens signed by a key
of the test identity provider, whose JWKS is a file: what Kafka's JWT validation accepts and
refuses, the RFC 7628 error round, and the JWKS cache."""

from __future__ import annotations

import base64
import json
import os

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from support.identity_provider import (
    KEY_ID,
    NOW,
    initial_response,
    public_jwk,
    rsa_private_key,
    sign,
)

from broker.security.oauthbearer import (
    INVALID_TOKEN_ERROR,
    UNKNOWN_KEY_REFRESH_BACKOFF_S,
    JwksKeys,
    JwksUnavailable,
    OAuthBearerServer,
    OAuthBearerValidator,
)
from broker.security.sasl import (
    SaslAuthenticationFailed,
    SaslServerConfig,
    server_mechanism,
    session_lifetime_ms,
)


def assert_rejected(server: OAuthBearerServer, message: bytes) -> None:
    """The RFC 7628 round of a refused token: the JSON error, then failure at the client's
    acknowledgement, with the error as Kafka's message."""
    assert server.step(message) == INVALID_TOKEN_ERROR
    assert not server.complete
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(b"\x01")
    assert failure.value.message == '{"status":"invalid_token"}'
    assert not server.complete


def test_a_valid_token_authenticates_its_subject(validator, sign_token):
    server = OAuthBearerServer(validator)
    assert server.step(initial_response(sign_token())) == b""
    assert server.complete and server.principal == "User:alice"
    assert server.credential_expiry_ms == (NOW + 3600) * 1000
    assert session_lifetime_ms(server.credential_expiry_ms, 600_000, NOW * 1000) == 600_000
    assert session_lifetime_ms(server.credential_expiry_ms, 0, NOW * 1000) == 3_600_000


def test_through_the_registry(validator, sign_token):
    server = server_mechanism("OAUTHBEARER", SaslServerConfig(("OAUTHBEARER",),
                                                              oauthbearer=validator))
    server.step(initial_response(sign_token(sub="bob")))
    assert server.principal == "User:bob"


def test_extensions_and_a_matching_authzid_are_accepted(validator, sign_token):
    server = OAuthBearerServer(validator)
    message = initial_response(sign_token(), authzid="alice",
                               extensions="logicalCluster=lkc-1\x01traceId=abc def")
    assert server.step(message) == b""
    assert server.principal == "User:alice"


def test_another_authzid_than_the_principal_fails(validator, sign_token):
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different"):
        OAuthBearerServer(validator).step(initial_response(sign_token(), authzid="bob"))


def test_the_scheme_is_case_insensitive(validator, sign_token):
    message = initial_response(sign_token()).replace(b"Bearer", b"bEARER")
    assert OAuthBearerServer(validator).step(message) == b""


@pytest.mark.parametrize("claims", [
    {"exp": NOW - 31},  # expired beyond the 30 s clock skew
    {"exp": None},  # Kafka requires exp
    {"exp": "tomorrow"},
    {"exp": True},
    {"nbf": NOW + 31},
    {"iat": NOW + 31},
    {"sub": None},
    {"sub": ""},
])
def test_tokens_kafka_refuses(validator, sign_token, claims):
    assert_rejected(OAuthBearerServer(validator), initial_response(sign_token(**claims)))


def test_non_finite_and_huge_numeric_dates_are_refused(validator, signing_key):
    for exp in ("Infinity", "NaN", "1" + "0" * 400):
        header = base64.urlsafe_b64encode(json.dumps(
            {"alg": "RS256", "kid": KEY_ID, "typ": "JWT"}).encode()).rstrip(b"=")
        payload = base64.urlsafe_b64encode(
            f'{{"sub":"alice","exp":{exp}}}'.encode()).rstrip(b"=")
        signing_input = header + b"." + payload
        signature = jwt.get_algorithm_by_name("RS256").sign(signing_input, signing_key)
        token = (signing_input + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()
        assert_rejected(OAuthBearerServer(validator), initial_response(token))


@pytest.mark.parametrize("claims", [{"exp": NOW - 29}, {"nbf": NOW + 29}, {"iat": NOW + 29}])
def test_the_clock_skew_is_tolerated(validator, sign_token, claims):
    assert OAuthBearerServer(validator).step(initial_response(sign_token(**claims))) == b""


def test_a_token_signed_by_another_key_is_refused(validator):
    token = sign(rsa_private_key(), {"sub": "alice", "exp": NOW + 60})
    assert_rejected(OAuthBearerServer(validator), initial_response(token))


def test_an_unknown_kid_is_refused_and_asks_for_a_refresh_now_and_then(jwks_path, signing_key):
    clock = [0.0]
    keys = JwksKeys(str(jwks_path), clock=lambda: clock[0])
    keys.refresh()
    assert not keys.refresh_due()
    token = sign(signing_key, {"sub": "alice", "exp": NOW + 60}, key_id="rotated-key")
    assert_rejected(OAuthBearerServer(OAuthBearerValidator(keys, clock=lambda: NOW)),
                    initial_response(token))
    assert not keys.refresh_due()  # just loaded: made-up kids do not force reloads
    clock[0] = UNKNOWN_KEY_REFRESH_BACKOFF_S
    assert keys.refresh_due()
    keys.refresh()
    assert not keys.refresh_due()


def test_a_token_without_kid_uses_the_only_key(validator, signing_key):
    token = sign(signing_key, {"sub": "alice", "exp": NOW + 60}, key_id=None)
    assert OAuthBearerServer(validator).step(initial_response(token)) == b""


@pytest.mark.parametrize("algorithm", ["HS256", "none"])
def test_symmetric_and_unsigned_tokens_are_refused(validator, jwks_path, algorithm):
    """The classic confusion: an HMAC token keyed with the public JWK the server publishes."""
    public_key_text = jwks_path.read_text()
    key = public_key_text if algorithm == "HS256" else None
    header = {"alg": algorithm, "kid": KEY_ID, "typ": "JWT"}
    segments = [base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=")
                for part in (header, {"sub": "admin", "exp": NOW + 60})]
    signing_input = b".".join(segments)
    signature = b"" if key is None else jwt.get_algorithm_by_name("HS256").sign(
        signing_input, key.encode())
    token = (signing_input + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()
    assert_rejected(OAuthBearerServer(validator), initial_response(token))


def test_the_expected_audience_and_issuer(jwks_keys, sign_token):
    validator = OAuthBearerValidator(jwks_keys, expected_audience=("kafka", "kipper"),
                                     expected_issuer="https://idp.example", clock=lambda: NOW)
    good = {"aud": ["other", "kipper"], "iss": "https://idp.example"}
    assert OAuthBearerServer(validator).step(initial_response(sign_token(**good))) == b""
    assert OAuthBearerServer(validator).step(
        initial_response(sign_token(**{**good, "aud": "kafka"}))) == b""
    for bad in ({"aud": "other"}, {"aud": None}, {"aud": [1, 2]}, {"iss": "https://evil"},
                {"iss": None}):
        assert_rejected(OAuthBearerServer(validator),
                        initial_response(sign_token(**{**good, **bad})))


def test_no_expected_audience_means_any(validator, sign_token):
    assert OAuthBearerServer(validator).step(initial_response(sign_token(aud="anyone"))) == b""


def test_the_principal_claim_is_configurable(jwks_keys, sign_token):
    validator = OAuthBearerValidator(jwks_keys, principal_claim="client_id", clock=lambda: NOW)
    server = OAuthBearerServer(validator)
    server.step(initial_response(sign_token(client_id="svc-orders")))
    assert server.principal == "User:svc-orders"
    assert_rejected(OAuthBearerServer(validator), initial_response(sign_token()))


def test_an_ec_key_of_the_jwks(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(key, "ec-key", "ES256")]}))
    validator = OAuthBearerValidator(JwksKeys.from_file(path), clock=lambda: NOW)
    token = sign(key, {"sub": "alice", "exp": NOW + 60}, key_id="ec-key", algorithm="ES256")
    assert OAuthBearerServer(validator).step(initial_response(token)) == b""
    # The key's "alg" pins it: a token naming it with ES384 is refused before verification.
    token = sign(ec.generate_private_key(ec.SECP384R1()), {"sub": "alice", "exp": NOW + 60},
                 key_id="ec-key", algorithm="ES384")
    assert_rejected(OAuthBearerServer(validator), initial_response(token))


def test_a_deeply_nested_header_is_refused_not_crashed(validator):
    header = base64.urlsafe_b64encode(b"[" * 200_000 + b"]" * 200_000).rstrip(b"=").decode()
    assert_rejected(OAuthBearerServer(validator), initial_response(f"{header}.e30.c2ln"))


@pytest.mark.parametrize("message", [
    b"n,,auth=Bearer abc\x01\x01",  # no \x01 after the GS2 header
    b"n,,\x01auth=Bearer abc\x01",  # one terminator only
    b"n,,\x01auth=Basic abc\x01\x01",
    b"n,,\x01auth=Bearer\x01\x01",
    b"n,,\x01auth=Bearer a b\x01\x01",
    b"n,,\x01auth=Bearer abc\x01auth=Bearer abc\x01\x01",
    b"n,,\x01key=value\x01\x01",
    b"n,,\x01auth=Bearer abc\x01=x\x01\x01",
    b"y,,\x01auth=Bearer abc\x01\x01",
    b"n,b=alice,\x01auth=Bearer abc\x01\x01",
    b"\x01",  # an acknowledgement before any error
    b"",
    b"\xff\xfe",
])
def test_malformed_initial_responses_fail_at_once(validator, message):
    server = OAuthBearerServer(validator)
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(message)
    assert "OAUTHBEARER" in failure.value.message and not server.complete


def test_after_the_error_only_the_acknowledgement_is_expected(validator, sign_token):
    server = OAuthBearerServer(validator)
    assert server.step(initial_response(sign_token(exp=NOW - 3600))) == INVALID_TOKEN_ERROR
    with pytest.raises(SaslAuthenticationFailed):
        server.step(initial_response(sign_token()))  # no second try inside one exchange
    assert not server.complete


def test_failures_never_show_the_token(validator, sign_token, caplog):
    token = sign_token(exp=NOW - 3600)
    caplog.set_level("DEBUG", logger="broker.security.oauthbearer")
    server = OAuthBearerServer(validator)
    reply = server.step(initial_response(token))
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(b"\x01")
    signature = token.rsplit(".", 1)[1]
    assert signature not in reply.decode() + str(failure.value) + caplog.text
    assert "expired" in caplog.text
    with pytest.raises(SaslAuthenticationFailed) as failure:
        OAuthBearerServer(validator).step(initial_response(sign_token(), authzid="bob"))
    assert sign_token() not in str(failure.value)


# the JWKS cache --------------------------------------------------------------------------------

def test_a_jwks_file_is_read_again_when_it_changes(tmp_path, signing_key):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [public_jwk(signing_key, "old")]}))
    keys = JwksKeys.from_file(path)
    assert keys.signing_key("old") is not None and not keys.refresh_due()
    new_key = rsa_private_key()
    path.write_text(json.dumps({"keys": [public_jwk(new_key, "new")]}))
    os.utime(path, ns=(0, 1))  # a different mtime even on coarse clocks
    assert keys.refresh_due()
    keys.refresh()
    assert keys.signing_key("new") is not None and keys.signing_key("old") is None


@pytest.mark.parametrize("document", [
    "not json", "[]", '{"keys": 1}', '{"keys": []}',
    '{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}',  # symmetric keys are never used
    '{"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}]}',
])
def test_a_jwks_without_usable_signing_keys_is_refused(tmp_path, document):
    path = tmp_path / "jwks.json"
    path.write_text(document)
    with pytest.raises(JwksUnavailable):
        JwksKeys.from_file(path)


def test_encryption_keys_are_skipped(tmp_path, signing_key):
    path = tmp_path / "jwks.json"
    encryption_key = {**public_jwk(rsa_private_key(), "enc"), "use": "enc"}
    path.write_text(json.dumps({"keys": [encryption_key, public_jwk(signing_key, "sig")]}))
    keys = JwksKeys.from_file(path)
    assert keys.signing_key("enc") is None and keys.signing_key("sig") is not None


def test_a_missing_file_fails_and_keeps_the_keys(tmp_path, jwks_path):
    with pytest.raises(JwksUnavailable):
        JwksKeys.from_file(tmp_path / "absent.json")
    path = tmp_path / "jwks.json"
    path.write_text(jwks_path.read_text())
    keys = JwksKeys.from_file(path)
    path.unlink()
    with pytest.raises(JwksUnavailable):
        keys.refresh()
    assert keys.signing_key(KEY_ID) is not None


def test_an_url_source_loads_nothing_by_itself():
    """No network in a step: until the connection layer refreshes it, an URL source has no
    key and every token is refused."""
    keys = JwksKeys("https://idp.example/jwks", refresh_interval_s=60)
    assert keys.refresh_due() and keys.signing_key(KEY_ID) is None
    validator = OAuthBearerValidator(keys, clock=lambda: NOW)
    token = sign(rsa_private_key(), {"sub": "alice", "exp": NOW + 60})
    assert_rejected(OAuthBearerServer(validator), initial_response(token))


def test_an_url_source_is_due_every_refresh_interval(jwks_path, monkeypatch):
    """The HTTP GET itself is left out (no network in unit tests): the fetch is replaced."""
    clock = [0.0]
    keys = JwksKeys("https://idp.example/jwks", refresh_interval_s=60, clock=lambda: clock[0])
    monkeypatch.setattr(keys, "_fetch_url", lambda: jwks_path.read_bytes())
    keys.refresh()
    assert keys.signing_key(KEY_ID) is not None and not keys.refresh_due()
    clock[0] = 59.0
    assert not keys.refresh_due()
    clock[0] = 60.0
    assert keys.refresh_due()
