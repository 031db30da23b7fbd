"""Kafka's size-prefixed frames cut out of a connection's bytes, each byte copied once.

asyncio's StreamReader appends every chunk received to one bytearray (a copy, and a new
allocation whenever it grows) and copies a frame out of it twice (a slice, then ``bytes``).
On a broker taking 1 GB of produce requests over 10 partitions that was 47 % of its py-spy
samples (bench/README.md, session 24). ``FrameReader`` keeps the chunks as received and cuts
each frame out with one copy, or none when a chunk is exactly one frame.

It stands in for the StreamReader that ``asyncio.StreamReaderProtocol`` feeds, so the
writing side (``asyncio.StreamWriter`` and its flow control) stays asyncio's. Like
StreamReader, it stops reading the socket while more than twice ``limit`` bytes wait, and
reads on while a frame larger than that is awaited.
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections import deque
from collections.abc import Awaitable, Callable

_SIZE = struct.Struct(">i")
# Chunks smaller than this are merged as they arrive: a peer trickling bytes must not cost
# an object per byte.
_SMALL_CHUNK = 4096


class FrameSizeError(ValueError):
    """A frame's size prefix is outside 1..max_size."""

    def __init__(self, size: int) -> None:
        super().__init__(f"frame size {size}")
        self.size = size


class FrameReader:
    """The frames of one connection, fed by asyncio.StreamReaderProtocol."""

    _source_traceback = None  # read by asyncio.StreamReaderProtocol

    def __init__(self, limit: int = 1 << 20) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._offset = 0  # into the first chunk
        self._buffered = 0
        self._eof = False
        self._exception: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._transport: asyncio.Transport | None = None
        self._paused = False

    # -- what asyncio.StreamReaderProtocol calls, and the connection's error -------------

    def set_transport(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def feed_data(self, data: bytes) -> None:
        if not data:
            return
        if self._chunks and len(data) < _SMALL_CHUNK and len(self._chunks[-1]) < _SMALL_CHUNK:
            self._chunks[-1] += data
        else:
            self._chunks.append(bytes(data))  # (a no-op for bytes, what transports give)
        self._buffered += len(data)
        self._wake()
        if self._transport is not None and not self._paused \
                and self._buffered > 2 * self._limit:
            try:
                self._transport.pause_reading()
            except NotImplementedError:
                self._transport = None  # it cannot pause: everything is buffered
            else:
                self._paused = True

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def set_exception(self, exception: BaseException) -> None:
        self._exception = exception
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exception)

    def exception(self) -> BaseException | None:
        return self._exception

    # -- reading frames ------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether any byte of the next frame has arrived."""
        return self._buffered > 0

    def next_frame(self, max_size: int | None = None) -> bytes | None:
        """The next frame's body (without its size) if it has arrived whole, else None.
        Raises the connection's error, or FrameSizeError."""
        if self._exception is not None:
            raise self._exception
        if self._buffered < _SIZE.size:
            return None
        size = self._next_size()
        if size <= 0 or (max_size is not None and size > max_size):
            raise FrameSizeError(size)
        if self._buffered < _SIZE.size + size:
            return None
        self._consume(_SIZE.size)
        frame = self._take(size)
        if self._paused and self._buffered <= self._limit:
            self._resume()
        return frame

    async def read_frame(self, max_size: int | None = None) -> bytes:
        """The next frame's body, once it has arrived whole. Raises the connection's error,
        FrameSizeError, or asyncio.IncompleteReadError if the connection ends first."""
        while (frame := self.next_frame(max_size)) is None:
            if self._eof:
                partial = self._take(self._buffered)
                expected = (_SIZE.size + _SIZE.unpack_from(partial)[0]
                            if len(partial) >= _SIZE.size else _SIZE.size)
                raise asyncio.IncompleteReadError(partial, expected)
            await self._wait()
        return frame

    async def wait_for_data(self) -> None:
        """Until a byte has arrived, or the connection ended."""
        while not self._buffered and not self._eof:
            if self._exception is not None:
                raise self._exception
            await self._wait()

    # -- internals -----------------------------------------------------------------------

    def _next_size(self) -> int:
        first = self._chunks[0]
        if len(first) - self._offset >= _SIZE.size:
            return _SIZE.unpack_from(first, self._offset)[0]
        return _SIZE.unpack(self._peek(_SIZE.size))[0]

    def _peek(self, n: int) -> bytes:
        parts, needed = [], n + self._offset
        for chunk in self._chunks:
            parts.append(chunk)
            needed -= len(chunk)
            if needed <= 0:
                break
        return b"".join(parts)[self._offset:self._offset + n]

    def _take(self, n: int) -> bytes:
        first, offset = self._chunks[0] if self._chunks else b"", self._offset
        if len(first) - offset >= n:
            data = first if offset == 0 and n == len(first) else first[offset:offset + n]
            self._consume(n)
            return data
        parts, needed = [], n
        for chunk in self._chunks:
            piece = memoryview(chunk)[offset:offset + needed]
            parts.append(piece)
            needed -= len(piece)
            offset = 0
            if not needed:
                break
        data = b"".join(parts)
        for piece in parts:
            piece.release()
        self._consume(n)
        return data

    def _consume(self, n: int) -> None:
        self._buffered -= n
        self._offset += n
        while self._chunks and self._offset >= len(self._chunks[0]):
            self._offset -= len(self._chunks.popleft())

    async def _wait(self) -> None:
        if self._paused:
            self._resume()  # a frame larger than the limit: read on until it is whole
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _resume(self) -> None:
        self._paused = False
        if self._transport is not None:
            self._transport.resume_reading()


class FrameProtocol(asyncio.StreamReaderProtocol):
    """asyncio.StreamReaderProtocol feeding a FrameReader. A server's ``on_connected`` is
    run as a task with the reader and an asyncio.StreamWriter, as start_server's callback."""

    def __init__(self, on_connected: Callable[[FrameReader, asyncio.StreamWriter],
                                              Awaitable[None]] | None = None,
                 limit: int = 1 << 20) -> None:
        reader = FrameReader(limit)
        super().__init__(reader)
        # Strong until the connection is lost: StreamReaderProtocol's own is weak.
        self.reader: FrameReader | None = reader
        self._on_connected = on_connected

    def writer(self, transport: asyncio.BaseTransport) -> asyncio.StreamWriter:
        # No reader for it: StreamWriter takes only a StreamReader, to raise its error on
        # drain(), and a lost connection already fails drain().
        return asyncio.StreamWriter(transport, self, None, self._loop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._on_connected is not None and self.reader is not None:
            task = self._loop.create_task(self._on_connected(self.reader, self.writer(transport)))
            task.add_done_callback(functools.partial(_close_on_error, transport))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.reader = None


def _close_on_error(transport: asyncio.BaseTransport, task: asyncio.Task) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        asyncio.get_running_loop().call_exception_handler({
            "message": "Unhandled exception in a connection's callback",
            "exception": error, "transport": transport})
        transport.close()


async def start_frame_server(on_connected: Callable[[FrameReader, asyncio.StreamWriter],
                                                    Awaitable[None]],
                             host: str | None, port: int, *, limit: int = 1 << 20,
                             **kwargs) -> asyncio.Server:
    """``asyncio.start_server`` whose callback gets a FrameReader."""
    return await asyncio.get_running_loop().create_server(
        lambda: FrameProtocol(on_connected, limit), host, port, **kwargs)


async def open_frame_connection(host: str, port: int, *, limit: int = 1 << 20,
                                **kwargs) -> tuple[FrameReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` reading frames."""
    protocol = FrameProtocol(limit=limit)
    reader = protocol.reader
    transport, _ = await asyncio.get_running_loop().create_connection(
        lambda: protocol, host, port, **kwargs)
    return reader, protocol.writer(transport)
