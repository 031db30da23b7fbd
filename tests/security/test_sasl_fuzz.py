"""Hypothesis feeds every step of every mechanism random, mutated, format-shaped and
oversized (1 MiB) client messages. Two properties: only SaslAuthenticationFailed ever leaves
a step, and an exchange completes only when an independent check confirms the client
proved the password or presented a token the identity provider really signed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

import jwt
import pytest
import scramp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.identity_provider import NOW, initial_response, rsa_private_key, sign

from broker.security.oauthbearer import OAuthBearerServer
from broker.security.plain import PlainServer
from broker.security.sasl import SaslAuthenticationFailed, SaslServerMechanism
from broker.security.scram import ScramServer
from replication.scram_credentials import (
    ScramCredentials,
    ScramMechanism,
    credential_from_password,
)

MiB = 1 << 20
USERS = {"alice": "alice-secret", "bob": "b"}
SCRAM_STORE = ScramCredentials()
for _user, _password in USERS.items():
    for _mechanism in ScramMechanism:
        SCRAM_STORE.upsert(_user, credential_from_password(_mechanism, _password))

OVERSIZED = [
    b"a" * MiB,
    os.urandom(MiB),
    b"\x00alice\x00" + b"x" * MiB,
    b"n,,n=" + b"a" * MiB + b",r=abc",
    b"n,,n=alice,r=" + b"r" * MiB,
    b"c=biws,r=" + b"r" * MiB + b",p=" + b"A" * MiB,
    initial_response("a" * MiB),
    initial_response("e30." * (MiB // 4)),
    b"n,,\x01" + b"k=v\x01" * (MiB // 4) + b"\x01",
]
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass(frozen=True)
class Edit:
    """What becomes of a valid client message: ``insert`` in place of ``delete`` bytes at
    ``at`` (modulo the length, so edits land anywhere in messages of any size; no change
    when both are empty), or ``replacement`` for the whole message."""

    at: int = 0
    delete: int = 0
    insert: bytes = b""
    replacement: bytes | None = None

    def apply(self, valid: bytes) -> bytes:
        if self.replacement is not None:
            return self.replacement
        at = self.at % (len(valid) + 1)
        return valid[:at] + self.insert + valid[at + self.delete:]


# Built once: the strategies do not depend on the message they edit, which keeps Hypothesis'
# per-example overhead low.
EDITS = st.one_of(
    st.just(Edit()),
    st.builds(Edit, st.integers(0, 1000), st.integers(0, 8), st.binary(max_size=8)),
    # One character for another, as a bit flip in a proof or a signature would be.
    st.builds(Edit, st.integers(0, 1000), st.just(1),
              st.sampled_from(b"AQZaqz09+/-_=.,").map(lambda c: bytes([c]))),
    st.builds(Edit, st.integers(0, 1000), st.integers(0, 2),
              st.sampled_from([b",", b"=", b"\x00", b"\x01", b"=2C", b"a=", b",m=x",
                               b",tokenauth=true", b"\xff", b"\x01\x01", b"."])),
    st.builds(Edit, replacement=st.text(alphabet="nar,=cpsiv0123456789AbBearer\x00\x01 +/.",
                                        max_size=80).map(str.encode)),
    st.builds(Edit, replacement=st.binary(max_size=300)),
    st.builds(Edit, replacement=st.sampled_from(OVERSIZED)),
)


def feed(server: SaslServerMechanism, messages: list[bytes]) -> bool:
    """Step through ``messages``; False once the exchange failed. Anything but
    SaslAuthenticationFailed propagates and fails the test."""
    for message in messages:
        try:
            server.step(message)
        except SaslAuthenticationFailed:
            assert not server.complete
            return False
    return True


def assert_finished_exchanges_take_no_more(server: SaslServerMechanism, extra: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailed):
        server.step(extra)
    assert not server.complete


# PLAIN ------------------------------------------------------------------------------------

def plain_messages() -> st.SearchStrategy[bytes]:
    names = st.sampled_from(["", "alice", "bob", "carol", "alice-secret", "b"])
    structured = st.builds(lambda z, c, p: f"{z}\x00{c}\x00{p}".encode(), names, names, names)
    edited = EDITS.map(lambda edit: edit.apply(b"\x00alice\x00alice-secret"))
    return st.one_of(structured, edited)


@FUZZ
@given(messages=st.lists(plain_messages(), min_size=1, max_size=3), extra=st.binary(max_size=20))
def test_plain(messages, extra):
    server = PlainServer(USERS)
    if feed(server, messages):
        assert server.complete  # PLAIN has a single step
        authzid, user, password = messages[0].decode().split("\x00")
        assert len(messages) == 1 and USERS.get(user) == password and authzid in ("", user)
        assert server.principal == f"User:{user}"
    assert_finished_exchanges_take_no_more(server, extra)


# SCRAM ------------------------------------------------------------------------------------

def proves_password(mechanism: ScramMechanism, client_first: bytes, server_first: bytes,
                    client_final: bytes) -> bool:
    """Recompute, independently of the server, that the final message carries the proof the
    user's real password yields for this exact exchange."""
    first = client_first.decode()
    bare = first.split(",", 2)[2]
    user = bare.split(",")[0][2:].replace("=2C", ",").replace("=3D", "=")
    attributes = dict(attr.split("=", 1) for attr in server_first.decode().split(","))
    final = client_final.decode()
    without_proof, _, proof = final.rpartition(",p=")
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, USERS[user].encode(),
                                 base64.b64decode(attributes["s"]), int(attributes["i"]))
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    auth_message = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, mechanism.hash_name)
    return base64.b64decode(proof) == bytes(a ^ b for a, b in zip(client_key, signature))


@FUZZ
@given(data=st.data(), mechanism=st.sampled_from(list(ScramMechanism)),
       user=st.sampled_from(["alice", "bob", "mallory"]),
       password=st.sampled_from(["alice-secret", "b", "guess"]), extra=st.binary(max_size=20))
def test_scram(data, mechanism, user, password, extra):
    client = scramp.ScramClient([mechanism.value], user, password)
    valid_first = client.get_client_first().encode()
    first = data.draw(EDITS, label="client-first edit").apply(valid_first)
    server = ScramServer(mechanism, SCRAM_STORE.lookup)
    try:
        server_first = server.step(first)
    except SaslAuthenticationFailed:
        assert not server.complete
        return
    assert not server.complete
    if first == valid_first:
        client.set_server_first(server_first.decode())
        valid_final = client.get_client_final().encode()
    else:
        nonce = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
        valid_final = f"c=biws,r={nonce},p={base64.b64encode(b'x' * 32).decode()}".encode()
    finals = [edit.apply(valid_final) for edit in data.draw(
        st.lists(EDITS, min_size=1, max_size=2), label="client-final edits")]
    if feed(server, finals):
        assert server.complete and len(finals) == 1
        assert user in USERS and proves_password(mechanism, first, server_first, finals[0])
        assert server.principal == f"User:{user}"
    assert_finished_exchanges_take_no_more(server, extra)


# OAUTHBEARER ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokens(sign_token) -> list[str]:
    """A valid token, and the ones a client without valid credentials could hold."""
    return [sign_token(), sign_token(exp=NOW - 3600), sign_token(sub=None),
            sign(rsa_private_key(), {"sub": "alice", "exp": NOW + 3600})]


def signed_by_the_provider(message: bytes, signing_key) -> str | None:
    """The subject of the token in ``message`` if the provider's key really signed it and it
    is unexpired, verified by PyJWT alone; None otherwise."""
    token = message.decode().split("auth=", 1)[1].split("\x01", 1)[0].split(" ")[-1]
    try:
        claims = jwt.decode(token, signing_key.public_key(), algorithms=["RS256"],
                            options={"verify_exp": False, "verify_iat": False,
                                     "verify_nbf": False})
    except jwt.PyJWTError:
        return None
    return claims.get("sub") if claims["exp"] > NOW else None


@FUZZ
@given(data=st.data(), extra=st.binary(max_size=20))
def test_oauthbearer(data, extra, validator, tokens, signing_key):
    valid = initial_response(data.draw(st.sampled_from(tokens), label="token"))
    acknowledgement = Edit(replacement=b"\x01")
    messages = [edit.apply(valid) for edit in data.draw(
        st.lists(st.one_of(EDITS, st.just(acknowledgement)), min_size=1, max_size=3))]
    server = OAuthBearerServer(validator)
    if feed(server, messages):
        if server.complete:
            assert signed_by_the_provider(messages[-1], signing_key) == "alice"
            assert server.principal == "User:alice"
            assert server.credential_expiry_ms == (NOW + 3600) * 1000
        else:
            return  # the RFC 7628 error was sent and not yet acknowledged
    assert_finished_exchanges_take_no_more(server, extra)
