"""broker.security.listener_security: kipper's original single-listener flags still mean one
PLAINTEXT listener, Kafka's listener settings take over when given, and PLAIN users come
from the TOML table and a JAAS-style file."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.security.dev_ca import create_dev_ca
from broker.security.listener_security import (
    AuthenticationFailures,
    inter_broker_security,
    listener_config,
    listener_securities,
    plain_users,
    tls_properties,
)
from broker.security.listeners import SecurityProtocol


def test_the_single_listener_flags_are_one_plaintext_listener():
    listeners = listener_config(BrokerConfig(listener="127.0.0.1:0",
                                             advertised_listener="broker0:9092"))
    [listener] = listeners.listeners
    assert (listener.name, listener.protocol, listener.address) == (
        "PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1:0")
    assert listeners.inter_broker.address == "broker0:9092"
    assert inter_broker_security(BrokerConfig(), listener_config(BrokerConfig())).tls is None


def test_kafka_listener_settings_take_over():
    config = BrokerConfig(listeners="CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                          listener_security_protocol_map="CLIENT:SASL_PLAINTEXT,"
                                                         "INTERNAL:PLAINTEXT",
                          inter_broker_listener_name="INTERNAL")
    listeners = listener_config(config)
    assert [listener.name for listener in listeners.listeners] == ["CLIENT", "INTERNAL"]
    assert listeners.inter_broker.name == "INTERNAL"
    securities = listener_securities(config, listeners, lambda user, mechanism: None,
                                     AuthenticationFailures())
    assert [s.sasl is not None for s in securities] == [True, False]
    assert securities[0].sasl.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def test_a_sasl_inter_broker_listener_needs_the_brokers_user():
    config = BrokerConfig(listeners="SASL_PLAINTEXT://127.0.0.1:0")
    with pytest.raises(ValueError, match="inter_broker_sasl_username"):
        inter_broker_security(config, listener_config(config))
    config.inter_broker_sasl_username, config.inter_broker_sasl_password = "b", "pw"
    security = inter_broker_security(config, listener_config(config))
    assert (security.sasl_mechanism, security.username) == ("SCRAM-SHA-512", "b")
    assert "pw" not in repr(security)


def test_plain_users_from_a_jaas_style_file_and_the_table(tmp_path: Path):
    users_file = tmp_path / "plain.properties"
    users_file.write_text('# users\nuser_alice="alice-secret";\nuser_bob=bob secret\n'
                          'username="broker"\n')
    config = BrokerConfig(sasl_plain_users_file=users_file, sasl_plain_users={"bob": "b2"})
    assert plain_users(config) == {"alice": "alice-secret", "bob": "b2"}


def test_tls_settings_under_kafkas_names():
    config = BrokerConfig(ssl_keystore_location="/k.pem", ssl_client_auth="required")
    properties = tls_properties(config)
    assert properties["ssl.keystore.location"] == "/k.pem"
    assert properties["ssl.client.auth"] == "required"
    assert "ssl.key.password" not in properties


def test_per_listener_tls_settings_override_the_common_ones(tmp_path: Path):
    ca = create_dev_ca(tmp_path, [0])
    config = BrokerConfig(
        listeners="SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        listener_security_protocol_map="SSL:SSL,SASL_SSL:SASL_SSL,INTERNAL:SSL",
        inter_broker_listener_name="INTERNAL",
        ssl_keystore_location=str(ca.brokers[0].keystore),
        ssl_truststore_location=str(ca.ca_certificate), ssl_client_auth="required",
        listener_ssl_settings={"listener.name.internal.ssl.client.auth": "none",
                               "listener.name.sasl_ssl.ssl.client.auth": "requested"})
    securities = listener_securities(config, listener_config(config),
                                     lambda user, mechanism: None, AuthenticationFailures())
    assert [s.tls.verify_mode for s in securities] == [
        ssl.CERT_REQUIRED, ssl.CERT_OPTIONAL, ssl.CERT_NONE]
    config.listener_ssl_settings = {"ssl.client.auth": "none"}
    with pytest.raises(ValueError, match="listener.name"):
        tls_properties(config)


def test_a_setting_that_cannot_work_stops_the_node_with_one_line(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "broker.cli", "broker", "--data-dir", str(tmp_path)],
        env={**os.environ, "KIPPER_LISTENERS": "PLAINTEXT://0.0.0.0:0"},
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot start node 0: advertised.listeners cannot use the nonroutable " \
           "meta-address 0.0.0.0" in proc.stderr
    assert "Traceback" not in proc.stderr
