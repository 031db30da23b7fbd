"""The relay between AZ namespaces (broker/az_network.py): it runs in the cluster's fabric
namespace and carries every Ethernet frame arriving on one end of an AZ link out of the
other end, after the inter-AZ delay, unless a partition rule drops it.

The kernel has no delay of its own here (no ``netem`` qdisc), hence user space. Frames are
read and written with their virtio-net header (``PACKET_VNET_HDR``), so segmentation-offloaded
TCP frames of up to 64 KiB and their pending checksums pass unchanged: one read and one write
per 64 KiB, not per 1,500 bytes. A frame the kernel cannot take at once (socket buffer full)
is dropped, as a congested link would: TCP sends it again.

    python -m broker.az_relay --one-way-delay-ms 0.5 --rules FILE z1-z2:z2-z1:1 ...

Each ``A:B:D`` forwards frames received on interface A out of B, delayed if D is 1. The rules
file (JSON, `broker/az_partition.py` writes it) is read at start and on SIGHUP: IPv4 frames
arriving on a rule's interface whose source and destination fall in its ``src`` / ``dst``
networks (null: any) are dropped; ARP is not.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("kipper.az_relay")

ETH_P_ALL = 3
SOL_PACKET = 263
PACKET_VNET_HDR = 15
VNET_HEADER = 10
ETHERTYPE = slice(VNET_HEADER + 12, VNET_HEADER + 14)
IPV4 = b"\x08\x00"
IP_SOURCE = slice(VNET_HEADER + 14 + 12, VNET_HEADER + 14 + 16)
IP_DESTINATION = slice(VNET_HEADER + 14 + 16, VNET_HEADER + 14 + 20)
MAX_FRAME = VNET_HEADER + 65_550
SOCKET_BUFFER = 4 << 20
# Printed once every socket is bound (the launcher waits for it).
READY_LINE = "kipper az relay: "
CLOCK_MONOTONIC = 1  # time.monotonic()'s clock
TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC


@dataclass(frozen=True)
class FrameFilter:
    interface: str
    source: ipaddress.IPv4Network | None
    destination: ipaddress.IPv4Network | None

    def drops(self, frame: bytes) -> bool:
        # ARP always passes: neighbours stay resolved, so a one-way cut stays one way (the
        # other direction's replies would otherwise fail to resolve their next hop).
        if frame[ETHERTYPE] != IPV4:
            return False
        return ((self.source is None
                 or ipaddress.IPv4Address(frame[IP_SOURCE]) in self.source)
                and (self.destination is None
                     or ipaddress.IPv4Address(frame[IP_DESTINATION]) in self.destination))


def load_rules(path: Path) -> dict[str, list[FrameFilter]]:
    """Rules by the interface they watch; none if the file does not exist."""
    rules: dict[str, list[FrameFilter]] = collections.defaultdict(list)
    if path.exists():
        for cut in json.loads(path.read_text()):
            for rule in cut["rules"]:
                rules[rule["interface"]].append(FrameFilter(
                    rule["interface"],
                    ipaddress.IPv4Network(rule["src"]) if rule["src"] else None,
                    ipaddress.IPv4Network(rule["dst"]) if rule["dst"] else None))
    return rules


def packet_socket(interface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
    sock.bind((interface, 0))
    sock.setblocking(False)
    return sock


class Timer:
    """A timerfd: readable at an instant of CLOCK_MONOTONIC (``loop.time()``) to the
    nanosecond, where the event loop's own timers wait in whole milliseconds (epoll's
    timeout), which made a 0.5 ms hold 1-1.5 ms."""

    class _Itimerspec(ctypes.Structure):
        _fields_ = [("it_interval", ctypes.c_long * 2), ("it_value", ctypes.c_long * 2)]

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")

    def arm(self, at: float) -> None:
        seconds = int(at)
        spec = self._Itimerspec((0, 0), (seconds, int((at - seconds) * 1e9)))
        if self._libc.timerfd_settime(self.fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None):
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.fd, 8)


@dataclass
class Direction:
    """Frames received on one interface, on their way out of its peer."""

    inbound: str
    outbound: str
    delay_s: float
    queue: collections.deque = field(default_factory=collections.deque)
    timer: Timer | None = None


class Relay:
    def __init__(self, directions: list[Direction], rules_path: Path) -> None:
        self.directions = directions
        self.rules_path = rules_path
        self.rules: dict[str, list[FrameFilter]] = {}
        self.sockets = {d.inbound: packet_socket(d.inbound) for d in directions}
        self.loop = asyncio.get_running_loop()
        self.dropped = collections.Counter()

    def start(self) -> None:
        self.reload()
        for direction in self.directions:
            self.loop.add_reader(self.sockets[direction.inbound].fileno(), self._receive,
                                 direction)
            if direction.delay_s:
                direction.timer = Timer()
                self.loop.add_reader(direction.timer.fd, self._release, direction)
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)

    def reload(self) -> None:
        self.rules = load_rules(self.rules_path)
        log.info("partition rules: %s", {i: len(r) for i, r in self.rules.items()} or "none")

    def _receive(self, direction: Direction) -> None:
        sock = self.sockets[direction.inbound]
        rules = self.rules.get(direction.inbound, ())
        while True:
            try:
                frame, address = sock.recvfrom(MAX_FRAME)
            except BlockingIOError:
                return
            # A packet socket also sees the frames we send out of its interface.
            if address[2] == socket.PACKET_OUTGOING:
                continue
            if any(rule.drops(frame) for rule in rules):
                self.dropped[direction.inbound] += 1
                continue
            if not direction.delay_s:
                self._send(direction, frame)
                continue
            direction.queue.append((time.monotonic() + direction.delay_s, frame))
            if len(direction.queue) == 1:
                direction.timer.arm(direction.queue[0][0])

    def _release(self, direction: Direction) -> None:
        direction.timer.clear()
        now = time.monotonic()
        while direction.queue and direction.queue[0][0] <= now:
            self._send(direction, direction.queue.popleft()[1])
        if direction.queue:
            direction.timer.arm(direction.queue[0][0])

    def _send(self, direction: Direction, frame: bytes) -> None:
        try:
            self.sockets[direction.outbound].send(frame)
        except (BlockingIOError, OSError):
            self.dropped[direction.outbound] += 1


def relaying(line: str) -> str | None:
    """What the relay's ready line says, None if ``line`` is not that line."""
    return line[len(READY_LINE):].strip() if line.startswith(READY_LINE) else None


def parse_link(text: str) -> tuple[str, str, bool]:
    inbound, outbound, delayed = text.split(":")
    return inbound, outbound, delayed == "1"


async def run(args: argparse.Namespace) -> None:
    directions = [Direction(inbound, outbound, args.one_way_delay_ms / 1000 if delayed else 0.0)
                  for inbound, outbound, delayed in args.links]
    relay = Relay(directions, Path(args.rules))
    relay.start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        relay.loop.add_signal_handler(signum, stop.set)
    print(f"{READY_LINE}{len(directions)} directions, one-way delay "
          f"{args.one_way_delay_ms} ms", flush=True)
    await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.az_relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one-way-delay-ms", type=float, default=0.0)
    parser.add_argument("--rules", required=True)
    parser.add_argument("links", nargs="+", type=parse_link)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
