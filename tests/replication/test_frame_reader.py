"""FrameReader: size-prefixed frames cut out of the chunks a connection receives."""

from __future__ import annotations

import asyncio
import struct

import pytest

from replication.frame_reader import (
    FrameReader,
    FrameSizeError,
    open_frame_connection,
    start_frame_server,
)

BODIES = [b"a", b"\x00" * 5000, bytes(range(256)) * 40, b"xyz"]


def framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


class PausableTransport:
    """What FrameReader asks of a transport: pausing and resuming reads."""

    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.paused, self.pauses = True, self.pauses + 1

    def resume_reading(self) -> None:
        self.paused = False


def taken(reader: FrameReader) -> list[bytes]:
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 4095, 4096, 10_000, 1 << 20])
def test_frames_come_out_whole_however_the_bytes_are_cut(chunk):
    reader, stream, frames = FrameReader(), framed(*BODIES), []
    for start in range(0, len(stream), chunk):
        reader.feed_data(stream[start:start + chunk])
        frames += taken(reader)
    assert frames == BODIES
    assert not reader.started


def test_an_incomplete_frame_waits_for_its_last_byte():
    reader, stream = FrameReader(), framed(b"hello")
    reader.feed_data(stream[:-1])
    assert reader.next_frame() is None and reader.started
    reader.feed_data(stream[-1:])
    assert reader.next_frame() == b"hello"


@pytest.mark.parametrize("size", [0, -1, 101])
def test_a_size_outside_one_to_the_maximum_is_refused(size):
    reader = FrameReader()
    reader.feed_data(struct.pack(">i", size) + b"x" * 10)
    with pytest.raises(FrameSizeError) as refused:
        reader.next_frame(max_size=100)
    assert refused.value.size == size


async def test_a_connection_ending_inside_a_frame_reports_what_arrived():
    reader = FrameReader()
    reader.feed_data(framed(b"whole") + struct.pack(">i", 10) + b"part")
    reader.feed_eof()
    assert await reader.read_frame() == b"whole"
    with pytest.raises(asyncio.IncompleteReadError) as ended:
        await reader.read_frame()
    assert ended.value.partial == struct.pack(">i", 10) + b"part"
    assert ended.value.expected == 14


async def test_a_connection_ending_between_frames_reports_nothing_partial():
    reader = FrameReader()
    reader.feed_eof()
    await reader.wait_for_data()  # returns: nothing more will come
    with pytest.raises(asyncio.IncompleteReadError) as ended:
        await reader.read_frame()
    assert ended.value.partial == b""


async def test_a_waiting_read_gets_the_connections_error():
    reader = FrameReader()
    waiting = asyncio.ensure_future(reader.read_frame())
    await asyncio.sleep(0)
    reader.set_exception(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionResetError):
        await waiting
    assert isinstance(reader.exception(), ConnectionResetError)


async def test_a_waiting_read_wakes_when_its_frame_is_whole():
    reader, stream = FrameReader(), framed(b"later")
    waiting = asyncio.ensure_future(reader.read_frame())
    for byte in range(len(stream)):
        await asyncio.sleep(0)
        assert not waiting.done()
        reader.feed_data(stream[byte:byte + 1])
    assert await waiting == b"later"


def test_reading_pauses_past_twice_the_limit_and_resumes_once_taken_down_to_it():
    reader, transport = FrameReader(limit=1000), PausableTransport()
    reader.set_transport(transport)
    for _ in range(5):
        reader.feed_data(framed(b"y" * 496))  # 500 bytes each
    assert transport.paused and transport.pauses == 1
    assert reader.next_frame() and reader.next_frame()
    assert transport.paused  # 1,500 bytes still wait
    assert reader.next_frame()
    assert not transport.paused


async def test_a_frame_larger_than_the_limit_is_read_on_until_whole():
    reader, transport = FrameReader(limit=100), PausableTransport()
    reader.set_transport(transport)
    stream = framed(b"z" * 1000)
    reader.feed_data(stream[:500])
    assert transport.paused
    waiting = asyncio.ensure_future(reader.read_frame())
    await asyncio.sleep(0)
    assert not transport.paused  # resumed: the frame cannot be whole otherwise
    reader.feed_data(stream[500:])
    assert await waiting == b"z" * 1000


async def test_frames_go_both_ways_over_a_socket():
    async def echo(reader, writer):
        while True:
            try:
                frame = await reader.read_frame()
            except asyncio.IncompleteReadError:
                break
            writer.write(framed(frame[::-1]))
        writer.close()

    server = await start_frame_server(echo, "127.0.0.1", 0, limit=4096)
    try:
        reader, writer = await open_frame_connection(*server.sockets[0].getsockname()[:2],
                                                     limit=4096)
        writer.write(framed(*BODIES))
        assert [await reader.read_frame() for _ in BODIES] == [body[::-1] for body in BODIES]
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
