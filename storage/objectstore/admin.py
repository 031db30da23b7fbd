"""HTTP admin endpoint for switching object-store faults at runtime.

    GET  /admin/s3-faults   the current faults, as JSON
    POST /admin/s3-faults   apply one fault spec (JSON body, see faults.py); answers the new state

A broker mounts ``fault_admin_routes`` on its metrics server; ``FaultAdminServer`` serves
them alone, for processes without one.
"""

from __future__ import annotations

from aiohttp import web

from .faults import ADMIN_PATH, FaultInjector


def fault_admin_routes(faults: FaultInjector) -> list[web.RouteDef]:
    async def show(request: web.Request) -> web.Response:
        return web.json_response(faults.show())

    async def apply(request: web.Request) -> web.Response:
        try:
            state = faults.apply_fault(await request.json())
        except ValueError as error:  # bad JSON included
            return web.json_response({"error": str(error)}, status=400)
        return web.json_response(state)

    return [web.get(ADMIN_PATH, show), web.post(ADMIN_PATH, apply)]


class FaultAdminServer:
    def __init__(self, faults: FaultInjector, host: str = "127.0.0.1", port: int = 0) -> None:
        app = web.Application()
        app.add_routes(fault_admin_routes(faults))
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.url: str | None = None

    async def start(self) -> str:
        """Serve; return the base URL the CLI's --admin option takes."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        await self._runner.cleanup()
        self.url = None
