"""A TLS listener's accept loop: kipper accepts the sockets itself and runs each handshake
with ``loop.connect_accepted_socket``, so a failed handshake (a plaintext client, an unknown
CA, a client that never finishes) reaches the broker, which logs and counts it. A server
made with ``asyncio.start_server(ssl=...)`` drops these silently, and upgrading an accepted
stream with ``start_tls`` loses the ClientHello bytes read before the upgrade (uvloop#707).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

log = logging.getLogger(__name__)


class SocketAcceptor:
    """A bound, listening socket whose connections go to ``on_accept`` as plain sockets."""

    def __init__(self, listening: socket.socket, on_accept: Callable[[socket.socket], None]
                 ) -> None:
        self._socket = listening
        self._on_accept = on_accept
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    @classmethod
    async def bind(cls, host: str | None, port: int,
                   on_accept: Callable[[socket.socket], None]) -> SocketAcceptor:
        """Bind as ``asyncio.start_server`` would (OSError EADDRINUSE when taken)."""
        listening = socket.create_server((host or "", port), reuse_port=False,
                                         family=socket.AF_INET6 if host and ":" in host
                                         else socket.AF_INET)
        listening.setblocking(False)
        return cls(listening, on_accept)

    @property
    def port(self) -> int:
        return self._socket.getsockname()[1]

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(self._socket)
            except OSError as error:  # e.g. out of file descriptors: try again shortly
                log.warning("accept on port %d failed: %s", self.port, error)
                await asyncio.sleep(0.1)
                continue
            self._on_accept(connection)

    def close(self) -> None:
        """Stop accepting (connections already accepted go on)."""
        self._task.cancel()
        self._socket.close()
