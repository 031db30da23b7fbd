"""The broker's HTTP metrics endpoint.

    GET /metrics        Prometheus text format
    GET /metrics.json   every counter as JSON: {"node_id", "rack", <source name>: snapshot}

Sources are pluggable: anything with ``register(CollectorRegistry)`` and ``snapshot()``
(the network traffic counters, the object store's accounting, broker.broker_metrics); what
must be fetched before it can be read (consumer lag) is refreshed before every scrape. The
process's CPU, memory and file descriptors come from prometheus-client's process collector
(docs/metrics.md lists every family). A broker with an object store also serves the
fault-admin routes of ``storage.objectstore.admin`` here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)

from storage.objectstore.admin import fault_admin_routes

from .config import split_host_port

if TYPE_CHECKING:
    from storage.objectstore.client import ObjectStore

class MetricsSource(Protocol):
    def register(self, registry: CollectorRegistry) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


class MetricsServer:
    def __init__(self, listener: str, identity: dict[str, Any]) -> None:
        self._host, self._port = split_host_port(listener)
        # Printed at the top of /metrics.json so a harness knows whose counters it reads.
        self._identity = identity
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._sources: dict[str, MetricsSource] = {}
        self._refreshes: list[Callable[[], Awaitable[None]]] = []
        self._app = web.Application()
        self._app.add_routes([web.get("/metrics", self._prometheus),
                              web.get("/metrics.json", self._json)])
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    def add_source(self, name: str, source: MetricsSource) -> None:
        source.register(self.registry)
        self._sources[name] = source

    def refresh_before_scrape(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refreshes.append(refresh)

    def add_object_store(self, store: "ObjectStore") -> None:
        """Its request accounting, the objects reads found missing and the fault-admin
        routes (call before start)."""
        self.add_source("objectstore", store.accounting)
        self.add_source("objectstore_missing", store.missing)
        self._app.add_routes(fault_admin_routes(store.faults))

    async def start(self) -> str:
        self._runner = web.AppRunner(self._app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self.url = None

    async def _refresh(self) -> None:
        for refresh in self._refreshes:
            await refresh()

    async def _prometheus(self, request: web.Request) -> web.Response:
        await self._refresh()
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _json(self, request: web.Request) -> web.Response:
        await self._refresh()
        return web.json_response({**self._identity, **{
            name: source.snapshot() for name, source in self._sources.items()}})
