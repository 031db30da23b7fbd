"""Request handler registry and the context every handler receives."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from kio.index import load_payload_module
from kio.static.constants import EntityType

from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import RequestHeader
from protocol.internal import InternalApiKey

if TYPE_CHECKING:
    from broker.services import BrokerServices

Handler = Callable[["RequestContext", Any], Awaitable[Any]]
HANDLERS: dict[int, Handler] = {}


def handles(api_key: ApiKey | InternalApiKey) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        HANDLERS[api_key] = handler
        return handler
    return register


@lru_cache(maxsize=None)
def response_module(api_key: int, api_version: int) -> ModuleType:
    return load_payload_module(api_key, api_version, EntityType.response)


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    services: "BrokerServices"
    peer: str
    # The node this connection proved to be (broker.inter_broker); None for a client.
    broker_node: int | None = None
    # Who sent the request (Kafka's KafkaPrincipal, "User:<name>"), as its connection
    # authenticated; ACLs are checked against it and the client's host (an address, no port).
    principal: str = "User:ANONYMOUS"
    client_host: str = ""
    # The listener the request came in on: Metadata, FindCoordinator and DescribeCluster
    # answer with the brokers' endpoints of that listener. None: every broker's registered
    # address (requests made in-process).
    listener_name: str | None = None
    # Set by a handler whose response holds thousands of entries (Metadata of every topic):
    # the connection encodes it on a thread, and the event loop gets its turns meanwhile.
    encode_off_loop: bool = False

    @property
    def version(self) -> int:
        return self.header.api_version

    def response(self, entity_name: str, **fields: Any) -> Any:
        """An entity of this request's response schema, at the request's version."""
        return make(self.response_class(entity_name), **fields)

    def response_class(self, entity_name: str) -> type:
        """The class of an entity of this request's response schema, at its version."""
        return getattr(response_module(self.header.api_key, self.header.api_version), entity_name)
