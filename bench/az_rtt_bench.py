"""The round trip the AZ relay adds (`kipper cluster up --netns --az-rtt-ms`): the namespaces
of three AZs and the relay, no brokers; 1-byte TCP echoes between az1 and az2 for each
setting, median and P99 printed with the ratio to the setting. Root only.

    python -m bench.az_rtt_bench --rtt-ms 0 1 2 --count 500
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from broker.az_network import AzLayout, AzNetwork, call_in, enter
from broker.az_relay import relaying


@contextlib.contextmanager
def relayed_network(data_dir: Path, rtt_ms: float = 0.0) -> Iterator[AzLayout]:
    """The namespaces of three AZs with a broker address each, and the relay; no brokers.
    Its network.json is in ``data_dir`` (for `kipper cluster partition`)."""
    network = AzNetwork.create(["az1", "az2", "az3"], {0: "az1", 1: "az2", 2: "az3"}, rtt_ms,
                               data_dir)
    relay = None
    try:
        fabric = network.layout.fabric_netns
        relay = subprocess.Popen(network.relay_command(), stdout=subprocess.PIPE,
                                 preexec_fn=lambda: enter(fabric))
        if relaying(relay.stdout.readline().decode()) is None:
            raise RuntimeError("the relay did not start (its stderr says why)")
        layout = dataclasses.replace(network.layout, relay_pid=relay.pid)
        layout.save(data_dir / "network.json")
        yield layout
    finally:
        if relay is not None:
            relay.terminate()
            relay.wait(10)
        network.remove()


def round_trips(layout: AzLayout, count: int) -> list[float]:
    """Seconds of ``count`` 1-byte TCP round trips from az1 to a server in az2."""
    server = call_in(layout.netns("az2"), socket.create_server,
                     (layout.client_address("az2"), 0))
    port = server.getsockname()[1]
    client = call_in(layout.netns("az1"), socket.create_connection,
                     (layout.client_address("az2"), port), 5)
    peer, _ = server.accept()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            client.sendall(b"x")
            peer.recv(1)
            peer.sendall(b"y")
            client.recv(1)
            times.append(time.perf_counter() - started)
    finally:
        for sock in (client, peer, server):
            sock.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="az_rtt_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    parser.add_argument("--count", type=int, default=500)
    args = parser.parse_args(argv)
    for rtt_ms in args.rtt_ms:
        with tempfile.TemporaryDirectory(prefix="kipper-az-rtt-") as data_dir, \
                relayed_network(Path(data_dir), rtt_ms) as layout:
            times = sorted(round_trips(layout, args.count))
        median, p99 = times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000
        ratio = f", median / setting {median / rtt_ms:.2f}x" if rtt_ms else ""
        print(f"--az-rtt-ms {rtt_ms:g}: median {median:.2f} ms, P99 {p99:.2f} ms{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
