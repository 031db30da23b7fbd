"""The AZ network's parts without a cluster: addresses, partition rules, the relay's frame
filter, stale namespaces and the relay's delay (broker/az_network.py, az_partition.py,
az_relay.py). The namespace tests need root (a few seconds)."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import subprocess
import sys
import time

import pytest

from broker import az_partition
from broker.az_network import (AzLayout, AzNetwork, call_in, cluster_namespaces, enter, ip,
                               remove_stale)
from broker.az_relay import FrameFilter

LAYOUT = AzLayout(owner=4242, subnet=210, azs=["az1", "az2", "az3"],
                  brokers={0: "az1", 1: "az2", 2: "az3", 3: "az1"}, rules_path="/nonexistent")


def test_addresses_and_names():
    assert LAYOUT.netns("az2") == "kipper-4242-az2"
    assert LAYOUT.broker_address(3) == "10.210.1.13"
    assert LAYOUT.client_address("az3") == "10.210.3.1"
    assert LAYOUT.s3_address == "10.210.0.2"
    assert LAYOUT.az_pairs() == [("az1", "az2"), ("az1", "az3"), ("az2", "az3")]
    # Each direction of each link once: 3 AZ pairs and 3 region links, both ways.
    assert len({inbound for inbound, _, _ in LAYOUT.relay_links()}) == 12
    assert all(delayed == ("rg" not in inbound) for inbound, _, delayed in LAYOUT.relay_links())


def test_cuts_name_the_interfaces_frames_arrive_on():
    assert {r.interface for r in az_partition.cut_az(LAYOUT, "az2").rules} == {
        "z2-z1", "z2-z3", "z2-rg", "z1-z2", "z3-z2", "rg-z2"}
    one_way = az_partition.cut_path(LAYOUT, "az1", "az3", one_way=True)
    assert one_way.rules == [az_partition.DropRule("z1-z3")]
    broker = az_partition.cut_broker(LAYOUT, 3)
    assert {(r.interface, r.src, r.dst) for r in broker.rules} >= {
        ("z1-z2", "10.210.1.13/32", None), ("z2-z1", None, "10.210.1.13/32")}
    storage = az_partition.cut_object_storage(LAYOUT, "az1")
    assert storage.rules == [az_partition.DropRule("z1-rg", dst="10.210.0.2/32"),
                             az_partition.DropRule("rg-z1", src="10.210.0.2/32")]


def frame(source: str, destination: str, ethertype: bytes = b"\x08\x00") -> bytes:
    """A virtio-net header, an Ethernet header and the start of an IPv4 header."""
    ip_header = bytes(12) + socket.inet_aton(source) + socket.inet_aton(destination)
    return bytes(10) + bytes(12) + ethertype + ip_header


def test_frame_filter():
    net = ipaddress.IPv4Network
    everything = FrameFilter("z1-z2", None, None)
    to_s3 = FrameFilter("z1-rg", None, net("10.210.0.2/32"))
    assert everything.drops(frame("10.210.1.1", "10.210.2.1"))
    assert everything.drops(frame("0.0.0.0", "0.0.0.0", ethertype=b"\x08\x06"))  # ARP
    assert to_s3.drops(frame("10.210.1.10", "10.210.0.2"))
    assert not to_s3.drops(frame("10.210.1.10", "192.0.2.2"))
    assert not to_s3.drops(frame("0.0.0.0", "0.0.0.0", ethertype=b"\x08\x06"))


@pytest.fixture
def root():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


def test_stale_namespaces_of_a_dead_owner_are_removed(root):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    name = f"kipper-{dead.pid}-az1"
    ip("netns", "add", name)
    try:
        assert name in remove_stale()
        assert dead.pid not in cluster_namespaces()
    finally:
        ip("netns", "del", name, check=False)


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


@pytest.mark.parametrize("rtt_ms", [0.0, 2.0])
def test_the_relay_adds_the_round_trip_and_cuts(root, tmp_path, rtt_ms):
    """No brokers: the AZ namespaces, the relay, 50 round trips between az1 and az2, and a
    cut path that lets nothing through until healed."""
    network = AzNetwork.create(["az1", "az2", "az3"], {0: "az1", 1: "az2", 2: "az3"}, rtt_ms,
                               tmp_path)
    relay = None
    try:
        fabric = network.layout.fabric_netns
        relay = subprocess.Popen(network.relay_command(), stdout=subprocess.PIPE,
                                 preexec_fn=lambda: enter(fabric))
        relay.stdout.readline()
        layout = dataclasses.replace(network.layout, relay_pid=relay.pid)
        times = sorted(round_trips(layout, 50))
        median = times[len(times) // 2] * 1000
        print(f"\nrtt setting {rtt_ms} ms: median round trip {median:.2f} ms, "
              f"max {times[-1] * 1000:.2f} ms")
        assert rtt_ms <= median < rtt_ms + 3.0
        az_partition.apply(layout, az_partition.cut_path(layout, "az1", "az2"))
        time.sleep(0.2)
        with pytest.raises(OSError):
            round_trips(layout, 1)
        az_partition.heal(layout)
        time.sleep(0.2)
        assert len(round_trips(layout, 1)) == 1
    finally:
        if relay is not None:
            relay.terminate()
            relay.wait(10)
        network.remove()
    assert os.getpid() not in cluster_namespaces()

