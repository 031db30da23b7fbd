"""Kafka's listener settings (broker/security/listeners.py): what parses, what Kafka refuses and
with which words, and the endpoint Metadata advertises per listener."""

from __future__ import annotations

import socket

import pytest

from broker.security.listeners import (
    Listener,
    ListenerConfig,
    ListenerConfigError,
    SecurityProtocol,
)


def test_protocols_say_whether_they_use_tls_and_sasl():
    assert [(p.uses_tls, p.uses_sasl) for p in SecurityProtocol] == [
        (False, False), (True, False), (False, True), (True, True)]


def test_default_map_names_listeners_after_their_protocol():
    config = ListenerConfig.parse("PLAINTEXT://127.0.0.1:9092,SSL://:9093,sasl_ssl://host:9094")
    assert config.listeners == (
        Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),
        Listener("SSL", SecurityProtocol.SSL, "", 9093),
        Listener("SASL_SSL", SecurityProtocol.SASL_SSL, "host", 9094))
    assert config.advertised == config.listeners
    assert config.inter_broker == config.listeners[0]


def test_empty_host_binds_every_interface_and_port_zero_is_allowed_twice():
    config = ListenerConfig.parse("A://:0,B://localhost:0",
                                  listener_security_protocol_map="A:SSL,B:PLAINTEXT")
    assert [listener.bind_host for listener in config.listeners] == [None, "localhost"]
    assert [listener.port for listener in config.listeners] == [0, 0]


def test_ipv6_host_in_brackets():
    config = ListenerConfig.parse("PLAINTEXT://[::1]:9092")
    listener = config.listeners[0]
    assert (listener.host, listener.port) == ("::1", 9092)
    assert listener.address == "[::1]:9092"
    assert str(listener) == "PLAINTEXT://[::1]:9092"


def test_named_listeners_with_a_protocol_map_and_blanks_around_commas():
    config = ListenerConfig.parse(
        " client://0.0.0.0:9093 , internal://10.0.0.5:9092 ",
        advertised_listeners="CLIENT://broker.example.com:443,INTERNAL://10.0.0.5:9092",
        listener_security_protocol_map="CLIENT:sasl_ssl, INTERNAL:SSL",
        inter_broker_listener_name="internal")
    assert [(listener.name, listener.protocol) for listener in config.listeners] == [
        ("CLIENT", SecurityProtocol.SASL_SSL), ("INTERNAL", SecurityProtocol.SSL)]
    assert config.inter_broker == Listener("INTERNAL", SecurityProtocol.SSL, "10.0.0.5", 9092)
    assert config.listener("client").host == "0.0.0.0"


def test_metadata_answers_with_the_listener_the_client_connected_to():
    config = ListenerConfig.parse(
        "CLIENT://:9093,INTERNAL://:9092",
        advertised_listeners="CLIENT://lb.example.com:443,INTERNAL://b1.internal:9092",
        listener_security_protocol_map="CLIENT:SASL_SSL,INTERNAL:PLAINTEXT")
    assert config.advertised_for("client").address == "lb.example.com:443"
    assert config.advertised_for("INTERNAL").address == "b1.internal:9092"


def test_a_listener_that_is_not_advertised_has_no_endpoint():
    config = ListenerConfig.parse("CLIENT://:9093,INTERNAL://:9092",
                                  advertised_listeners="INTERNAL://b1:9092",
                                  listener_security_protocol_map="CLIENT:SSL,INTERNAL:PLAINTEXT",
                                  inter_broker_listener_name="INTERNAL")
    assert config.advertised_for("CLIENT") is None


def test_bound_ports_replace_port_zero_and_an_empty_advertised_host_gets_this_host():
    config = ListenerConfig.parse("PLAINTEXT://127.0.0.1:0,SSL://:0")
    bound = config.with_bound_ports({"PLAINTEXT": 40001, "SSL": 40002})
    assert [listener.address for listener in bound.listeners] == ["127.0.0.1:40001", ":40002"]
    assert bound.advertised_for("SSL").address == f"{socket.getfqdn()}:40002"
    assert bound.inter_broker.address == "127.0.0.1:40001"


def test_two_listeners_may_share_a_port_when_one_is_ipv4_and_the_other_ipv6():
    config = ListenerConfig.parse("PLAINTEXT://127.0.0.1:9092,SSL://[::1]:9092")
    assert [listener.port for listener in config.listeners] == [9092, 9092]


def test_advertised_listeners_may_share_ports():
    config = ListenerConfig.parse("A://:9092,B://:9093",
                                  advertised_listeners="A://lb:443,B://lb:443",
                                  listener_security_protocol_map="A:SSL,B:SSL")
    assert {listener.address for listener in config.advertised} == {"lb:443"}


@pytest.mark.parametrize(("settings", "message"), [
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
     "Each listener must have a different name, listeners: PLAINTEXT://:9092,PLAINTEXT://:9093"),
    ({"listeners": "PLAINTEXT://:9092,plaintext://:9093"},
     "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://a:9092,SSL://b:9092"},
     "Each listener must have a different port, listeners: PLAINTEXT://a:9092,SSL://b:9092"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.2:9092"},
     "If you have two listeners on the same port then one needs to be IPv4 and the other IPv6, "
     "listeners: PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.2:9092, port: 9092"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SSL://host:9092"},
     "Each listener must have a different port unless exactly one listener has an IPv4 address "
     "and the other IPv6 address"),
    ({"listeners": "CLIENT://:9092"},
     "Error creating broker listeners from 'CLIENT://:9092': No security protocol defined for "
     "listener CLIENT"),
    ({"listeners": "PLAINTEXT:9092"},
     "Error creating broker listeners from 'PLAINTEXT:9092': Unable to parse PLAINTEXT:9092 to a "
     "broker endpoint"),
    ({"listeners": "PLAINTEXT://host"}, "Unable to parse PLAINTEXT://host to a broker endpoint"),
    ({"listeners": "PLAINTEXT://host:70000"}, "port 70000 of PLAINTEXT://host:70000 is not in"),
    ({"listeners": "://host:9092"}, "The provided listener name is null or empty string"),
    ({"listeners": ""}, "There must be at least one broker advertised listener."),
    ({"listeners": "A://:9092", "listener_security_protocol_map": "A:TLS"},
     "Invalid security protocol `TLS` defined in listener.security.protocol.map"),
    ({"listeners": "A://:9092", "listener_security_protocol_map": "A"},
     "Error parsing configuration property 'listener.security.protocol.map': `A` is not "
     "NAME:PROTOCOL"),
    ({"listeners": "A://:9092", "listener_security_protocol_map": "A:SSL,a:PLAINTEXT"},
     "Listener name A appears more than once in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:9092", "advertised_listeners": "SSL://host:9093"},
     "advertised.listeners listener names must be equal to or a subset of the ones defined in "
     "listeners. Found SSL. The valid options based on the current configuration are PLAINTEXT"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP "
     "address."),
    ({"listeners": "PLAINTEXT://:9092", "advertised_listeners": "PLAINTEXT://[::]:9092"},
     "advertised.listeners cannot use the nonroutable meta-address ::."),
    ({"listeners": "PLAINTEXT://:9092", "inter_broker_listener_name": "INTERNAL"},
     "Listener with name INTERNAL defined in inter.broker.listener.name not found in "
     "listener.security.protocol.map."),
    ({"listeners": "PLAINTEXT://:9092", "inter_broker_listener_name": "SSL"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The "
     "valid options based on currently configured listeners are PLAINTEXT"),
])
def test_kafka_refuses_with_its_message(settings, message):
    with pytest.raises(ListenerConfigError) as refused:
        ListenerConfig.parse(**settings)
    assert message in str(refused.value)
