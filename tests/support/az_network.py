"""Clusters whose AZs are network namespaces (broker/az_network.py), for tests: start one,
run clients inside an AZ, read the kernel's and kipper's cross-AZ bytes, cut and heal.

Needs root: without it the tests that use this skip with one line saying so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from bench.az_links import kipper_pair_bytes
from bench.local_cluster import LocalCluster
from broker import az_partition
from broker.az_network import AzLayout, LinkBytes, call_in, cluster_namespaces, inter_az_bytes

T = TypeVar("T")


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


@contextlib.contextmanager
def namespaced_cluster(root: Path, brokers: int = 3, az_rtt_ms: float = 0.0,
                       env: dict[str, str] | None = None) -> Iterator[LocalCluster]:
    """`kipper cluster up --netns`, metrics on; stopped, and every namespace it made removed
    (also when the launcher died), however the test ends."""
    require_root()
    cluster = LocalCluster(root, brokers=brokers, metrics=True, netns=True,
                           az_rtt_ms=az_rtt_ms, env=env or {})
    try:
        yield cluster.start()
    finally:
        cluster.stop()
        if cluster.proc is not None:
            assert cluster.proc.pid not in cluster_namespaces(), "namespaces left behind"


def in_az(layout: AzLayout, az: str, work: Callable[..., T], *args, **kwargs) -> T:
    """``work(*args, **kwargs)`` run inside ``az``'s namespace, by a thread of its own."""
    return call_in(layout.netns(az), work, *args, **kwargs)


def kipper_az_pair_bytes(cluster: LocalCluster) -> Counter:
    """Bytes kipper's brokers counted between each pair of AZs (bench/az_links.py)."""
    return kipper_pair_bytes(cluster.metrics_json(node) for node in range(cluster.brokers))


def kernel_az_pair_bytes(layout: AzLayout) -> dict[tuple[str, str], LinkBytes]:
    return {(link.a, link.b): link for link in inter_az_bytes(layout)}


def tcp_retransmitted_segments(layout: AzLayout) -> int:
    """TCP segments the AZs' namespaces have retransmitted so far (/proc/net/snmp): bytes the
    links carried twice, which kipper counts once."""
    total = 0
    for az in layout.azs:
        snmp = subprocess.run(["ip", "netns", "exec", layout.netns(az), "cat", "/proc/net/snmp"],
                              capture_output=True, text=True, check=True).stdout
        names, values = [line.split()[1:] for line in snmp.splitlines()
                         if line.startswith("Tcp:")]
        total += int(values[names.index("RetransSegs")])
    return total


def cut(cluster: LocalCluster, make_cut: Callable[..., az_partition.Cut], *args) -> None:
    layout = cluster.layout()
    az_partition.apply(layout, make_cut(layout, *args))


def heal(cluster: LocalCluster) -> None:
    az_partition.heal(cluster.layout())
