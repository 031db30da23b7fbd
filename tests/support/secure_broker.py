"""A broker on secured listeners for the security system tests: SASL_SSL, SASL_PLAINTEXT and
SSL (mutual TLS) listeners with certificates of the development CA, SCRAM users created at
start, PLAIN users, OAUTHBEARER tokens of the test identity provider, and an object store so
its topics can be of every storage mode.

The inter-broker listener is SASL_SSL: the broker reaches its own controller through it with
SCRAM-SHA-512 as the broker user, the path every node of a secured cluster takes.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from broker.security.dev_ca import DevCa, create_dev_ca

from .identity_provider import KEY_ID, public_jwk, rsa_private_key
from .processes import BrokerProcess
from .s3 import S3Endpoint

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
BROKER_USER, BROKER_PASSWORD = "kipper-broker", "broker-secret"
PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-secret"
OTHER_PLAIN_USER, OTHER_PLAIN_PASSWORD = "mallory", "mallory-secret"
# The client certificate's user: its principal is User:CN=carol,OU=clients,O=kipper dev.
CERT_USER = "carol"
OAUTH_AUDIENCE = "kipper-test"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"


@dataclass
class SecureBroker:
    process: BrokerProcess
    ca: DevCa
    signing_key: object  # signs OAUTHBEARER tokens the broker accepts

    def address(self, listener: str) -> str:
        return self.process.listeners[listener]

    def port(self, listener: str) -> int:
        return int(self.address(listener).rsplit(":", 1)[1])

    def librdkafka(self, listener: str, mechanism: str | None = None,
                   user: str = ADMIN, password: str = ADMIN_PASSWORD) -> dict[str, str]:
        """A confluent-kafka / kcat configuration for ``listener``: SASL as ``user`` with
        ``mechanism`` (SASL listeners), the CA (TLS listeners), the client certificate
        (SSL)."""
        config = {"bootstrap.servers": self.address(listener), "security.protocol": listener}
        if "SSL" in listener:
            config["ssl.ca.location"] = str(self.ca.ca_certificate)
        if listener == "SSL":
            client = self.ca.clients[CERT_USER]
            config["ssl.certificate.location"] = str(client.certificate)
            config["ssl.key.location"] = str(client.key)
        if mechanism is not None:
            config["sasl.mechanism"] = mechanism
            if mechanism != "OAUTHBEARER":
                config["sasl.username"] = user
                config["sasl.password"] = password
        return config

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)


def start_secure_broker(root: Path, s3: S3Endpoint, env: dict[str, str] | None = None
                        ) -> SecureBroker:
    ca = create_dev_ca(root / "tls", [0], users=[CERT_USER])
    signing_key = rsa_private_key()
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public_jwk(signing_key, KEY_ID)]}))
    broker_env = {
        "KIPPER_LISTENERS": ("SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                             "SSL://127.0.0.1:0"),
        "KIPPER_INTER_BROKER_LISTENER_NAME": "SASL_SSL",
        "KIPPER_SSL_KEYSTORE_LOCATION": str(ca.brokers[0].keystore),
        "KIPPER_SSL_TRUSTSTORE_LOCATION": str(ca.ca_certificate),
        "KIPPER_SSL_CLIENT_AUTH": "required",
        "KIPPER_SASL_ENABLED_MECHANISMS": MECHANISMS,
        "KIPPER_SASL_SCRAM_BOOTSTRAP_USERS": json.dumps({ADMIN: ADMIN_PASSWORD,
                                                         BROKER_USER: BROKER_PASSWORD}),
        "KIPPER_SASL_PLAIN_USERS": json.dumps({PLAIN_USER: PLAIN_PASSWORD,
                                               OTHER_PLAIN_USER: OTHER_PLAIN_PASSWORD}),
        "KIPPER_INTER_BROKER_SASL_USERNAME": BROKER_USER,
        "KIPPER_INTER_BROKER_SASL_PASSWORD": BROKER_PASSWORD,
        "KIPPER_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(jwks),
        "KIPPER_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": OAUTH_AUDIENCE,
        "KIPPER_S3_KEY_PREFIX": f"test-{uuid.uuid4().hex[:12]}/",
        **(env or {}),
    }
    process = BrokerProcess(root / "broker-0", env=broker_env, extra_args=[
        "--metrics-listener", "127.0.0.1:0", "--s3-endpoint", s3.url,
        "--s3-access-key", s3.access_key, "--s3-secret-key", s3.secret_key]).start()
    return SecureBroker(process, ca, signing_key)
