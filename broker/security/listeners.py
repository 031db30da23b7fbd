"""Kafka's listener settings, parsed and validated into typed values.

A broker may listen on several addresses, each with a name and a security protocol:
``listeners=CLIENT://:9093,INTERNAL://10.0.0.5:9092`` with
``listener.security.protocol.map=CLIENT:SASL_SSL,INTERNAL:SSL``. ``advertised.listeners`` says
what clients and other brokers are told (a load balancer's address, say), and
``inter.broker.listener.name`` which listener brokers use between themselves. The syntax, the
defaults and the error messages are Kafka's (``SocketServerConfigs.listenerListToEndPoints``,
``CoreUtils.listenerListToEndPoints``, ``KafkaConfig.validateValues``), so a Kafka
``server.properties`` reads the same here and its mistakes are reported in words Kafka users
can search for. Two deliberate differences, both noted where they apply: the inter-broker
listener defaults to the first listener, and a listener name given twice in the protocol map
is an error rather than the last one silently winning.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

LISTENERS = "listeners"
ADVERTISED_LISTENERS = "advertised.listeners"
LISTENER_SECURITY_PROTOCOL_MAP = "listener.security.protocol.map"
INTER_BROKER_LISTENER_NAME = "inter.broker.listener.name"

# Kafka's URI_PARSE_REGEXP: NAME://host:port, the host optionally in brackets (IPv6) or empty.
_ENDPOINT = re.compile(r"(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)")
# Kafka refuses only 0.0.0.0; "::" is the same non-routable wildcard in IPv6.
_WILDCARD_HOSTS = ("0.0.0.0", "::")


class ListenerConfigError(ValueError):
    """A listener setting Kafka would refuse; the message is Kafka's one line."""


class SecurityProtocol(Enum):
    """How a listener's connections are secured: TLS on the socket, SASL before requests."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @classmethod
    def parse(cls, name: str, setting: str) -> SecurityProtocol:
        """The protocol called ``name`` (any case, as Kafka's ``SecurityProtocol.forName``)."""
        try:
            return cls(name.upper())
        except ValueError:
            raise ListenerConfigError(
                f"Invalid security protocol `{name}` defined in {setting}") from None


# Kafka's default map: each protocol's name is a listener name standing for that protocol.
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)


@dataclass(frozen=True)
class Listener:
    """One endpoint: its name (upper case, as Kafka normalises it), protocol and address.

    ``host`` is empty for "every interface" (Kafka stores it as null); ``port`` 0 asks the
    operating system for a free port."""

    name: str
    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def bind_host(self) -> str | None:
        """What to hand ``asyncio.start_server``: None binds every interface."""
        return self.host or None

    @property
    def address(self) -> str:
        """host:port, an IPv6 host in brackets so the port stays unambiguous."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


@dataclass(frozen=True)
class ListenerConfig:
    """The listeners to bind, the endpoints to advertise, and the inter-broker listener."""

    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    inter_broker: Listener  # as advertised: the address other brokers connect to

    @classmethod
    def parse(cls, listeners: str, advertised_listeners: str | None = None,
              listener_security_protocol_map: str | None = None,
              inter_broker_listener_name: str | None = None) -> ListenerConfig:
        """The four Kafka settings, as their strings (None = not set), validated together.

        ``advertised.listeners`` unset advertises ``listeners``; the protocol map unset is
        Kafka's default (PLAINTEXT:PLAINTEXT, SSL:SSL, ...). ``inter.broker.listener.name``
        unset is the first listener: Kafka would pick the listener named after
        ``security.inter.broker.protocol`` (PLAINTEXT), which a broker listening only on
        ``SSL://`` does not have."""
        protocols = _parse_protocol_map(listener_security_protocol_map
                                        if listener_security_protocol_map is not None
                                        else DEFAULT_SECURITY_PROTOCOL_MAP)
        bound = _parse_endpoints(listeners, protocols, LISTENERS)
        _check_distinct_ports(bound, listeners)
        if advertised_listeners is None:
            advertised = bound
        else:
            advertised = _parse_endpoints(advertised_listeners, protocols, ADVERTISED_LISTENERS)
        advertised_names = [listener.name for listener in advertised]
        bound_names = [listener.name for listener in bound]
        if not advertised:
            raise ListenerConfigError("There must be at least one broker advertised listener.")
        if not set(advertised_names) <= set(bound_names):
            raise ListenerConfigError(
                f"{ADVERTISED_LISTENERS} listener names must be equal to or a subset of the ones "
                f"defined in {LISTENERS}. Found {','.join(advertised_names)}. The valid options "
                f"based on the current configuration are {','.join(bound_names)}")
        for listener in advertised:
            if listener.host in _WILDCARD_HOSTS:
                raise ListenerConfigError(
                    f"{ADVERTISED_LISTENERS} cannot use the nonroutable meta-address "
                    f"{listener.host}. Use a routable IP address.")
        inter_broker_name = (_normalised(inter_broker_listener_name)
                             if inter_broker_listener_name is not None else bound[0].name)
        if inter_broker_name not in protocols:
            raise ListenerConfigError(
                f"Listener with name {inter_broker_name} defined in {INTER_BROKER_LISTENER_NAME} "
                f"not found in {LISTENER_SECURITY_PROTOCOL_MAP}.")
        if inter_broker_name not in advertised_names:
            raise ListenerConfigError(
                f"{INTER_BROKER_LISTENER_NAME} must be a listener name defined in "
                f"{ADVERTISED_LISTENERS}. The valid options based on currently configured "
                f"listeners are {','.join(advertised_names)}")
        inter_broker = next(listener for listener in advertised
                            if listener.name == inter_broker_name)
        return cls(bound, advertised, inter_broker)

    def listener(self, name: str) -> Listener:
        """The bound listener called ``name`` (any case)."""
        wanted = _normalised(name)
        for listener in self.listeners:
            if listener.name == wanted:
                return listener
        raise KeyError(name)

    def advertised_for(self, listener_name: str) -> Listener | None:
        """The endpoint to give a client connected on ``listener_name``: Metadata answers with
        the brokers' endpoints of the listener the request came in on. None when this broker
        does not advertise that listener (Kafka then leaves the broker out of the answer)."""
        wanted = _normalised(listener_name)
        return next((listener for listener in self.advertised if listener.name == wanted),
                    None)

    def with_bound_ports(self, ports: Mapping[str, int]) -> ListenerConfig:
        """This configuration once bound: a port 0 replaced by the port the named listener got,
        and an empty advertised host by this machine's name (Kafka advertises the canonical
        host name), so that what is advertised is an address a client can connect to."""
        def bound(listener: Listener) -> Listener:
            port = ports[listener.name] if listener.port == 0 else listener.port
            return replace(listener, port=port)

        def advertisable(listener: Listener) -> Listener:
            return replace(bound(listener), host=listener.host or socket.getfqdn())

        advertised = tuple(advertisable(listener) for listener in self.advertised)
        return ListenerConfig(
            tuple(bound(listener) for listener in self.listeners), advertised,
            next(listener for listener in advertised
                 if listener.name == self.inter_broker.name))


def _normalised(name: str) -> str:
    """Kafka's ``ListenerName.normalised``: names are compared in upper case."""
    if not name.strip():
        raise ListenerConfigError("The provided listener name is null or empty string")
    return name.upper()


def _csv(value: str) -> list[str]:
    """Kafka's ``Csv.parseCsvList``: comma-separated, blanks around commas and empty items
    dropped."""
    return [item for item in re.split(r"\s*,\s*", value.strip()) if item]


def _parse_protocol_map(value: str) -> dict[str, SecurityProtocol]:
    protocols: dict[str, SecurityProtocol] = {}
    for entry in _csv(value):
        name, colon, protocol = entry.rpartition(":")
        if not colon:
            raise ListenerConfigError(
                f"Error parsing configuration property '{LISTENER_SECURITY_PROTOCOL_MAP}': "
                f"`{entry}` is not NAME:PROTOCOL")
        listener_name = _normalised(name.strip())
        if listener_name in protocols:  # Kafka keeps the last one without a word
            raise ListenerConfigError(
                f"Listener name {listener_name} appears more than once in "
                f"{LISTENER_SECURITY_PROTOCOL_MAP}")
        protocols[listener_name] = SecurityProtocol.parse(protocol.strip(),
                                                          LISTENER_SECURITY_PROTOCOL_MAP)
    return protocols


def _parse_endpoints(value: str, protocols: Mapping[str, SecurityProtocol],
                     setting: str) -> tuple[Listener, ...]:
    endpoints = []
    for entry in _csv(value):
        match = _ENDPOINT.fullmatch(entry)
        if match is None:
            raise ListenerConfigError(f"Error creating broker listeners from '{value}': "
                                      f"Unable to parse {entry} to a broker endpoint")
        name = _normalised(match[1])
        port = int(match[3])
        if not 0 <= port <= 65535:
            raise ListenerConfigError(f"Error creating broker listeners from '{value}': "
                                      f"port {port} of {entry} is not in 0..65535")
        if name not in protocols:
            raise ListenerConfigError(f"Error creating broker listeners from '{value}': "
                                      f"No security protocol defined for listener {name}")
        endpoints.append(Listener(name, protocols[name], match[2], port))
    names = [endpoint.name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ListenerConfigError(f"Each listener must have a different name, {setting}: {value}")
    return tuple(endpoints)


def _check_distinct_ports(listeners: tuple[Listener, ...], value: str) -> None:
    """Kafka's rule: one port per listener (port 0 aside), except that exactly two listeners may
    share one if one binds an IPv4 address and the other an IPv6 address."""
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, sharing in by_port.items():
        named = [listener for listener in sharing if _ip_version(listener.host) is None]
        literal = [listener for listener in sharing if _ip_version(listener.host) is not None]
        if len(named) > 1:
            raise ListenerConfigError(
                f"Each listener must have a different port, listeners: {value}")
        if len(literal) == 2:
            if named or {_ip_version(listener.host) for listener in literal} != {4, 6}:
                raise ListenerConfigError(
                    "If you have two listeners on the same port then one needs to be IPv4 and "
                    f"the other IPv6, listeners: {value}, port: {port}")
        elif len(sharing) > 1:
            raise ListenerConfigError(
                "Each listener must have a different port unless exactly one listener has an "
                f"IPv4 address and the other IPv6 address, listeners: {value}, port: {port}")


def _ip_version(host: str) -> int | None:
    """4 or 6 for an IP address literal, None for a host name or the empty host."""
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None
