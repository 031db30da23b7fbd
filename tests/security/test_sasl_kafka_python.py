"""The servers driven by the SASL code of real Python Kafka clients, which build the exact
bytes those clients send and check the server's replies, without a socket: kafka-python's
mechanisms (kafka.net.sasl) and aiokafka's SCRAM authenticator."""

from __future__ import annotations

import pytest
from aiokafka.conn import ScramAuthenticator
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram

from broker.security.oauthbearer import OAuthBearerServer
from broker.security.plain import PlainServer
from broker.security.sasl import SaslAuthenticationFailed, SaslServerMechanism
from broker.security.scram import ScramServer
from replication.scram_credentials import (
    ScramCredentials,
    ScramMechanism,
    credential_from_password,
)
from support.identity_provider import NOW

USERS = {"alice": "alice-secret"}


def authenticate(client, server: SaslServerMechanism) -> None:
    """kafka-python's loop: send auth_bytes, hand the reply to the mechanism, until done."""
    while not client.is_done():
        client.receive(server.step(client.auth_bytes()))
    assert client.is_authenticated()


def test_plain():
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    server = PlainServer(USERS)
    authenticate(client, server)  # kafka-python sends the user as authzid too
    assert server.principal == "User:alice"


def test_plain_wrong_password():
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="nope")
    with pytest.raises(SaslAuthenticationFailed, match="Invalid username or password"):
        authenticate(client, PlainServer(USERS))


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize(("password", "accepted"), [("alice-secret", True), ("nope", False)])
def test_scram(mechanism, password, accepted):
    store = ScramCredentials()
    store.upsert("alice", credential_from_password(mechanism, "alice-secret", 8192))
    client = SaslMechanismScram(sasl_plain_username="alice", sasl_plain_password=password,
                                sasl_mechanism=mechanism.value)
    server = ScramServer(mechanism, store.lookup)
    if accepted:
        authenticate(client, server)  # the client checks the server signature
        assert server.principal == "User:alice"
    else:
        with pytest.raises(SaslAuthenticationFailed):
            authenticate(client, server)
        assert not server.complete


class FixedToken(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict[str, str]) -> None:
        super().__init__()
        self._token = token
        self._extensions = extensions

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


def test_oauthbearer(validator, sign_token):
    client = SaslMechanismOAuth(sasl_oauth_token_provider=FixedToken(
        sign_token(), {"logicalCluster": "lkc-1"}))
    server = OAuthBearerServer(validator)
    authenticate(client, server)
    assert server.principal == "User:alice"
    assert server.credential_expiry_ms == (NOW + 3600) * 1000


def test_oauthbearer_expired_token_takes_the_error_round(validator, sign_token):
    client = SaslMechanismOAuth(sasl_oauth_token_provider=FixedToken(
        sign_token(exp=NOW - 3600), {}))
    server = OAuthBearerServer(validator)
    with pytest.raises(SaslAuthenticationFailed) as failure:
        authenticate(client, server)  # error reply, then the client's \x01
    assert failure.value.message == '{"status":"invalid_token"}'
    assert not server.complete


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_aiokafka_scram_with_a_user_name_to_escape(mechanism):
    """aiokafka escapes ',' and '=' in user names (kafka-python does not)."""
    store = ScramCredentials()
    store.upsert("ops,team=1", credential_from_password(mechanism, "pw-1"))
    client = ScramAuthenticator(loop=None, sasl_plain_username="ops,team=1",
                                sasl_plain_password="pw-1", sasl_mechanism=mechanism.value)
    server = ScramServer(mechanism, store.lookup)
    reply = None
    while (request := client._step(reply)) is not None:  # its executor-run generator step
        reply = server.step(request[0])
    assert server.principal == "User:ops,team=1"
