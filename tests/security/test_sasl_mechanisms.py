"""PLAIN and SCRAM servers (broker/security) against the messages real clients send: scramp's
client side writes the SCRAM messages and checks the server's signature, PLAIN messages are
RFC 4616's as Kafka's PlainSaslClient writes them. Also the registry and the KIP-368 session
lifetime."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import scramp

from broker.security.plain import PlainServer, plain_users_from_jaas_options
from broker.security.sasl import (
    ENABLED,
    UNSUPPORTED_SASL_MECHANISM_MESSAGE,
    SaslAuthenticationFailed,
    SaslServerConfig,
    UnsupportedSaslMechanism,
    server_mechanism,
    session_lifetime_ms,
)
from broker.security.scram import ScramServer
from replication.scram_credentials import (
    ScramCredentials,
    ScramMechanism,
    credential_from_password,
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def invalid_credentials_text(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with SASL"
            f" mechanism {mechanism}")


# PLAIN ------------------------------------------------------------------------------------

def test_plain_accepts_the_right_password():
    server = PlainServer(USERS)
    assert server.step(b"\x00alice\x00alice-secret") == b""
    assert server.complete and server.principal == "User:alice"
    assert server.credential_expiry_ms is None


def test_plain_accepts_an_authzid_equal_to_the_user():
    server = PlainServer(USERS)
    server.step(b"alice\x00alice\x00alice-secret")
    assert server.principal == "User:alice"


@pytest.mark.parametrize("message", [b"\x00alice\x00bob-secret", b"\x00carol\x00alice-secret",
                                     b"\x00alice\x00alice-secret2", b"\x00alice\x00alice-secre"])
def test_plain_wrong_password_and_unknown_user_fail_alike(message):
    server = PlainServer(USERS)
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(message)
    assert failure.value.message == "Authentication failed: Invalid username or password"
    assert not server.complete


def test_plain_refuses_another_authzid_only_after_the_password_is_right():
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different"):
        PlainServer(USERS).step(b"bob\x00alice\x00alice-secret")
    with pytest.raises(SaslAuthenticationFailed, match="Invalid username or password"):
        PlainServer(USERS).step(b"bob\x00alice\x00wrong")


@pytest.mark.parametrize(("message", "text"), [
    (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
    (b"\x00alice\x00", "Authentication failed: password not specified"),
    (b"alice\x00alice-secret", invalid_credentials_text("PLAIN")),
    (b"\x00alice\x00alice-secret\x00", invalid_credentials_text("PLAIN")),
    (b"\x00alice\x00\xff\xfe", invalid_credentials_text("PLAIN")),
    (b"", invalid_credentials_text("PLAIN")),
])
def test_plain_malformed_messages(message, text):
    with pytest.raises(SaslAuthenticationFailed) as failure:
        PlainServer(USERS).step(message)
    assert failure.value.message == text


def test_plain_a_finished_exchange_takes_no_more_messages():
    server = PlainServer(USERS)
    server.step(b"\x00alice\x00alice-secret")
    with pytest.raises(SaslAuthenticationFailed):
        server.step(b"\x00alice\x00alice-secret")
    assert not server.complete
    with pytest.raises(RuntimeError):
        server.principal


def test_plain_failure_messages_never_hold_the_password():
    for message in (b"\x00alice\x00hunter2-guess", b"bob\x00alice\x00alice-secret"):
        with pytest.raises(SaslAuthenticationFailed) as failure:
            PlainServer(USERS).step(message)
        assert "secret" not in str(failure.value) and "hunter2" not in str(failure.value)


def test_plain_users_from_jaas_options():
    options = {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
               "user_alice": "alice-secret", "user_": "nobody"}
    assert plain_users_from_jaas_options(options) == {"admin": "admin-secret",
                                                      "alice": "alice-secret"}


# SCRAM ------------------------------------------------------------------------------------

def scram_store(iterations: int = 4096) -> ScramCredentials:
    store = ScramCredentials()
    for user, password in {**USERS, "a,b=c": "odd-secret"}.items():
        for mechanism in ScramMechanism:
            store.upsert(user, credential_from_password(mechanism, password, iterations))
    return store


def client_and_server(mechanism: ScramMechanism, user: str, password: str,
                      store: ScramCredentials | None = None):
    client = scramp.ScramClient([mechanism.value], user, password)
    return client, ScramServer(mechanism, (store or scram_store()).lookup)


def first_round(client, server) -> str:
    server_first = server.step(client.get_client_first().encode()).decode()
    client.set_server_first(server_first)
    return server_first


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("user", ["alice", "a,b=c"])
def test_scram_accepts_the_right_password(mechanism, user):
    password = USERS.get(user, "odd-secret")
    client, server = client_and_server(mechanism, user, password)
    first_round(client, server)
    assert not server.complete
    server_final = server.step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # scramp checks the server's signature
    assert server.complete and server.principal == f"User:{user}"
    assert server.credential_expiry_ms is None and server.name == mechanism.value


def test_scram_sends_the_stored_iteration_count():
    client, server = client_and_server(ScramMechanism.SCRAM_SHA_512, "alice", "alice-secret",
                                       scram_store(iterations=8192))
    assert first_round(client, server).endswith(",i=8192")
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.complete


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_scram_wrong_password_fails_at_the_proof(mechanism):
    client, server = client_and_server(mechanism, "alice", "bob-secret")
    first_round(client, server)
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(client.get_client_final().encode())
    assert failure.value.message == invalid_credentials_text(mechanism.value)
    assert not server.complete


def test_scram_unknown_user_runs_the_whole_exchange_and_fails_like_a_wrong_password():
    mechanism = ScramMechanism.SCRAM_SHA_256
    server_firsts = []
    for _ in range(2):
        client, server = client_and_server(mechanism, "mallory", "guess")
        server_firsts.append(first_round(client, server))
        with pytest.raises(SaslAuthenticationFailed) as failure:
            server.step(client.get_client_final().encode())
        assert failure.value.message == invalid_credentials_text(mechanism.value)
        assert not server.complete
    # The made-up salt is stable per user, as a real one is; the nonces differ.
    salts = [dict(attr.split("=", 1) for attr in first.split(","))["s"] for first in server_firsts]
    assert salts[0] == salts[1] and len(base64.b64decode(salts[0])) == 32
    assert all(first.endswith(",i=4096") for first in server_firsts)
    other_client, other_server = client_and_server(mechanism, "trudy", "guess")
    assert other_server.step(other_client.get_client_first().encode()).decode().split(",")[1] \
        != server_firsts[0].split(",")[1]


def test_scram_a_user_without_a_credential_of_this_mechanism_is_unknown():
    store = ScramCredentials()
    store.upsert("alice", credential_from_password(ScramMechanism.SCRAM_SHA_512, "alice-secret"))
    client, server = client_and_server(ScramMechanism.SCRAM_SHA_256, "alice", "alice-secret",
                                       store)
    first_round(client, server)
    with pytest.raises(SaslAuthenticationFailed):
        server.step(client.get_client_final().encode())


def replace_attribute(message: str, name: str, value: str) -> str:
    return ",".join(f"{name}={value}" if attr.startswith(f"{name}=") else attr
                    for attr in message.split(","))


def test_scram_refuses_a_final_message_with_another_nonce():
    client, server = client_and_server(ScramMechanism.SCRAM_SHA_256, "alice", "alice-secret")
    first_round(client, server)
    final = client.get_client_final()
    nonce = dict(attr.split("=", 1) for attr in final.split(","))["r"]
    # The nonce is random: its last character may already be "x".
    other_last = "y" if nonce.endswith("x") else "x"
    with pytest.raises(SaslAuthenticationFailed):
        server.step(replace_attribute(final, "r", nonce[:-1] + other_last).encode())


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_scram_refuses_a_tampered_proof(mechanism):
    client, server = client_and_server(mechanism, "alice", "alice-secret")
    first_round(client, server)
    final = client.get_client_final()
    proof = bytearray(base64.b64decode(final.rsplit("p=", 1)[1]))
    proof[0] ^= 1
    with pytest.raises(SaslAuthenticationFailed):
        server.step(replace_attribute(final, "p", base64.b64encode(proof).decode()).encode())
    assert not server.complete


def test_scram_refuses_a_channel_binding_that_does_not_repeat_the_gs2_header():
    client, server = client_and_server(ScramMechanism.SCRAM_SHA_256, "alice", "alice-secret")
    first_round(client, server)
    final = client.get_client_final()
    with pytest.raises(SaslAuthenticationFailed):
        server.step(replace_attribute(final, "c", base64.b64encode(b"y,,").decode()).encode())


def scram_first(message: str) -> ScramServer:
    server = ScramServer(ScramMechanism.SCRAM_SHA_256, scram_store().lookup)
    server.step(message.encode())
    return server


def test_scram_accepts_an_authzid_equal_to_the_user_and_refuses_another():
    assert scram_first("n,a=alice,n=alice,r=abcdef").name == "SCRAM-SHA-256"
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different"):
        scram_first("n,a=bob,n=alice,r=abcdef")


def client_final(mechanism: ScramMechanism, password: str, gs2_header: str,
                 client_first_bare: str, server_first: str) -> str:
    """RFC 5802's client-final-message, for the GS2 headers scramp does not write."""
    attributes = dict(attr.split("=", 1) for attr in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(),
                                 base64.b64decode(attributes["s"]), int(attributes["i"]))
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2_header.encode()).decode()},r={attributes['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, mechanism.hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_scram_with_an_authzid_binds_the_whole_gs2_header():
    """The channel binding of the final message repeats the whole GS2 header, authzid
    included (RFC 5802 section 7): a proof over "n,," does not pass for "n,a=alice,"."""
    mechanism = ScramMechanism.SCRAM_SHA_256
    for gs2_header, completes in (("n,a=alice,", True), ("n,,", False)):
        server = ScramServer(mechanism, scram_store().lookup)
        bare = "n=alice,r=clientnonce"
        server_first = server.step(f"n,a=alice,{bare}".encode()).decode()
        final = client_final(mechanism, "alice-secret", gs2_header, bare, server_first)
        if completes:
            server.step(final.encode())
            assert server.principal == "User:alice"
        else:
            with pytest.raises(SaslAuthenticationFailed):
                server.step(final.encode())


@pytest.mark.parametrize("message", [
    "n,,n=tokenid,r=abcdef,tokenauth=true",  # Kafka's delegation-token extension
    "y,,n=alice,r=abcdef",  # channel binding
    "p=tls-unique,,n=alice,r=abcdef",
    "n,,m=ext,n=alice,r=abcdef",  # a mandatory extension
    "n,,n=alice",
    "n,,r=abcdef,n=alice",
    "n,,n=,r=abcdef",
    "n,,n=al=ice,r=abcdef",  # '=' not escaped
    "n,,n=alice,r=",
    "n,,n=alice,r=ab\x7fcd",
    "n,,n=alice,r=abc,=x",
    "n,x=alice,n=alice,r=abc",
    "n,n=alice,r=abc",
    "",
])
def test_scram_malformed_client_first_messages(message):
    with pytest.raises(SaslAuthenticationFailed):
        scram_first(message)


def test_scram_ignores_unknown_extensions_of_the_first_message():
    assert scram_first("n,,n=alice,r=abcdef,foo=bar") is not None


def test_scram_failure_messages_never_hold_secrets():
    client, server = client_and_server(ScramMechanism.SCRAM_SHA_256, "alice", "hunter2")
    first_round(client, server)
    final = client.get_client_final()
    with pytest.raises(SaslAuthenticationFailed) as failure:
        server.step(final.encode())
    proof = final.rsplit("p=", 1)[1]
    assert "hunter2" not in str(failure.value) and proof not in str(failure.value)


# registry and session lifetime ---------------------------------------------------------------

def test_registry_creates_a_fresh_server_per_exchange():
    config = SaslServerConfig(("PLAIN", "SCRAM-SHA-512"), USERS, scram_store().lookup)
    first = server_mechanism("PLAIN", config)
    first.step(b"\x00alice\x00alice-secret")
    second = server_mechanism("PLAIN", config)
    assert first is not second and not second.complete
    scram = server_mechanism("SCRAM-SHA-512", config)
    assert isinstance(scram, ScramServer) and scram.name == "SCRAM-SHA-512"


def test_registry_refuses_mechanisms_the_listener_does_not_offer():
    config = SaslServerConfig(("SCRAM-SHA-256",))
    for name in ("PLAIN", "GSSAPI", "scram-sha-256", "OAUTHBEARER"):
        with pytest.raises(UnsupportedSaslMechanism) as failure:
            server_mechanism(name, config)
        assert failure.value.message == f"Unsupported SASL mechanism {name}"
    assert UNSUPPORTED_SASL_MECHANISM_MESSAGE == \
        "The broker does not support the requested SASL mechanism."


def test_scram_without_a_store_knows_no_user():
    server = server_mechanism("SCRAM-SHA-256", SaslServerConfig(("SCRAM-SHA-256",)))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    first_round(client, server)
    with pytest.raises(SaslAuthenticationFailed):
        server.step(client.get_client_final().encode())


def test_config_checks_the_enabled_mechanisms():
    assert ENABLED == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslServerConfig(("PLAIN", "GSSAPI"))
    with pytest.raises(ValueError, match="JWKS"):
        SaslServerConfig(("OAUTHBEARER",))


@pytest.mark.parametrize(("expiry_ms", "max_reauth_ms", "now_ms", "lifetime_ms"), [
    (None, 0, 1000, 0),  # neither limits the session: no re-authentication
    (None, 60_000, 1000, 60_000),
    (61_000, 0, 1000, 60_000),  # the token's lifetime alone
    (61_000, 30_000, 1000, 30_000),  # the smaller of the two
    (21_000, 30_000, 1000, 20_000),
    (1000, 30_000, 1000, 1),  # expiring now (within clock skew): at once, never "0 = no limit"
    (500, 0, 1000, 1),
])
def test_session_lifetime(expiry_ms, max_reauth_ms, now_ms, lifetime_ms):
    assert session_lifetime_ms(expiry_ms, max_reauth_ms, now_ms) == lifetime_ms
