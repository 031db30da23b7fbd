"""A TCP proxy between Kafka clients and a broker that loses Produce responses.

It forwards every request, but after every ``drop_every``-th Produce request it closes
the client's connection instead of relaying that request's response: the broker has
stored the batch, and the client does not know it. A correct idempotent producer retries
the same batch; a correct broker answers the retry with the original offsets.
"""

from __future__ import annotations

import socket
import struct
import threading

PRODUCE = 0
_SIZE = struct.Struct(">i")
_REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id


def _read_frame(sock: socket.socket) -> bytes | None:
    prefix = _read_exactly(sock, 4)
    if prefix is None:
        return None
    body = _read_exactly(sock, _SIZE.unpack(prefix)[0])
    return None if body is None else prefix + body


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        try:
            chunk = sock.recv(size)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class ProduceDroppingProxy:
    def __init__(self, drop_every: int) -> None:
        self.drop_every = drop_every
        self.produce_requests = 0
        self.dropped = 0
        self.target_port = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []

    def start(self, target_port: int) -> None:
        self.target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in list(self._sockets):
            self._shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:  # the broker stopped first (teardown): the client sees a close
                client.close()
                continue
            self._sockets += [client, broker]
            doomed: set[int] = set()
            threading.Thread(target=self._requests, args=(client, broker, doomed),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client, doomed),
                             daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket, doomed: set[int]) -> None:
        while (frame := _read_frame(client)) is not None:
            api_key, _, correlation_id = _REQUEST_PREFIX.unpack_from(frame, 4)
            if api_key == PRODUCE:
                with self._lock:
                    self.produce_requests += 1
                    if self.produce_requests % self.drop_every == 0:
                        doomed.add(correlation_id)
            try:
                broker.sendall(frame)
            except OSError:
                break
        self._shut(broker)

    def _responses(self, broker: socket.socket, client: socket.socket, doomed: set[int]) -> None:
        while (frame := _read_frame(broker)) is not None:
            (correlation_id,) = _SIZE.unpack_from(frame, 4)
            if correlation_id in doomed:
                with self._lock:
                    self.dropped += 1
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        self._shut(client)
        self._shut(broker)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
