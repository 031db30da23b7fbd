"""The AZ network's parts without a cluster: addresses, partition rules, the relay's frame
filter, stale namespaces and the relay's delay (broker/az_network.py, az_partition.py,
az_relay.py), the launcher without root and after kill -9. The namespace tests need root
(about 40 s, most of it a one-broker `cluster up --netns`)."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time

import pytest

from bench.az_rtt_bench import relayed_network, round_trips
from bench.local_cluster import LocalCluster, pid_alive
from broker import az_partition
from broker.az_network import (AzLayout, call_in, cluster_namespaces, ip,
                               remove_stale)
from broker.az_relay import FrameFilter
from support.wait import wait_until

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
    assert not everything.drops(frame("0.0.0.0", "0.0.0.0", ethertype=b"\x08\x06"))  # ARP
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


def partition(data_dir, *arguments: str) -> str:
    """`kipper cluster partition` on the cluster whose network.json is in ``data_dir``."""
    done = subprocess.run([sys.executable, "-m", "broker.cli", "cluster", "partition",
                           "--data-dir", str(data_dir), *arguments],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("rtt_ms", [0.0, 2.0])
def test_the_relay_adds_the_round_trip_and_cuts(root, tmp_path, rtt_ms):
    """50 round trips between az1 and az2, and a path cut by `kipper cluster partition` that
    lets nothing through until healed."""
    with relayed_network(tmp_path, rtt_ms) as layout:
        times = sorted(round_trips(layout, 50))
        median = times[len(times) // 2] * 1000
        print(f"\nrtt setting {rtt_ms} ms: median round trip {median:.2f} ms, "
              f"max {times[-1] * 1000:.2f} ms")
        # At least the setting; how close to it is bench/az_rtt_bench.py's figure.
        assert times[0] * 1000 >= rtt_ms
        assert partition(tmp_path, "path", "az1", "az2") == "cut: az1 <-> az2"
        time.sleep(0.2)
        with pytest.raises(OSError):
            round_trips(layout, 1)
        assert partition(tmp_path, "heal") == "cut: nothing"
        time.sleep(0.2)
        assert len(round_trips(layout, 1)) == 1
    assert os.getpid() not in cluster_namespaces()


def datagram_arrives(layout: AzLayout, source_az: str, destination_az: str,
                     destination: str) -> bool:
    """Whether a UDP datagram from ``source_az`` reaches ``destination``, an address in
    ``destination_az``, within half a second."""
    receiver = call_in(layout.netns(destination_az), socket.socket, socket.AF_INET,
                       socket.SOCK_DGRAM)
    sender = call_in(layout.netns(source_az), socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        receiver.bind((destination, 0))
        receiver.settimeout(0.5)
        sender.sendto(b"x", receiver.getsockname())
        receiver.recv(1)
        return True
    except TimeoutError:
        return False
    finally:
        receiver.close()
        sender.close()


def test_one_way_and_broker_cuts(root, tmp_path):
    with relayed_network(tmp_path) as layout:
        az1, az2 = layout.client_address("az1"), layout.client_address("az2")
        broker1 = layout.broker_address(1)
        assert datagram_arrives(layout, "az1", "az2", az2)
        assert datagram_arrives(layout, "az2", "az1", az1)
        az_partition.apply(layout, az_partition.cut_path(layout, "az1", "az2", one_way=True))
        time.sleep(0.2)
        assert not datagram_arrives(layout, "az1", "az2", az2)
        assert datagram_arrives(layout, "az2", "az1", az1)
        az_partition.heal(layout)
        az_partition.apply(layout, az_partition.cut_broker(layout, 1))
        time.sleep(0.2)
        assert not datagram_arrives(layout, "az1", "az2", broker1)
        assert datagram_arrives(layout, "az1", "az2", az2)  # the rest of az2
        az_partition.heal(layout)
        time.sleep(0.2)
        assert datagram_arrives(layout, "az1", "az2", broker1)


def test_without_root_one_line(root, tmp_path):
    """`cluster up --netns` as an ordinary user: one line saying why, status 2."""
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
         "broker.cli", "cluster", "up", "--netns", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--netns needs root" in lines[0], lines


def test_namespaces_of_a_killed_launcher_are_removed_by_the_next(root, tmp_path):
    """kill -9 of `cluster up --netns`: its nodes stop (PR_SET_PDEATHSIG), its namespaces
    stay until the next launcher (or the test support) starts and removes them."""
    cluster = LocalCluster(tmp_path, brokers=1, netns=True).start()
    try:
        owned = cluster_namespaces()[cluster.proc.pid]
        assert len(owned) == 3  # fabric, region, az1
        cluster.proc.kill()
        cluster.proc.wait()
        wait_until(lambda: not any(pid_alive(pid) for pid in cluster.pids()), timeout=30)
        assert cluster_namespaces()[cluster.proc.pid] == owned
        assert set(owned) <= set(remove_stale())
        assert cluster.proc.pid not in cluster_namespaces()
    finally:
        cluster.stop()
