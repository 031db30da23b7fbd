"""Cross-AZ bytes per pair of AZs as kipper counted them and as the kernel did, on a cluster
whose AZs are network namespaces (`kipper cluster up --netns`, broker/az_network.py): the
figures `kipper bench compare --netns` reports next to each other, and the tests check.

kipper counts whole Kafka frames per connection (docs/cluster.md, "What is counted"); the
kernel counts Ethernet frames on the link, headers included. Less 66 bytes of headers per
frame (``LinkBytes.tcp_payload``) the two should agree closely: what is left is traffic
between the moments the two sets of counters are read, SYN options and ARP.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from bench.cost import server_rows
from broker.az_network import LinkBytes, link_bytes_delta


def kipper_pair_bytes(metrics: Iterable[Mapping[str, Any]]) -> Counter:
    """Bytes between each pair of different, known AZs (sorted), both directions, from the
    brokers' server rows (each connection once, clients' and other nodes')."""
    pairs: Counter = Counter()
    for row in server_rows(metrics):
        if "unknown" not in (row["local_az"], row["peer_az"]) and \
                row["local_az"] != row["peer_az"]:
            pairs[tuple(sorted((row["local_az"], row["peer_az"])))] += row["bytes"]
    return pairs


def link_figures(kipper_before: list[Mapping], kipper_after: list[Mapping],
                 kernel_before: list[LinkBytes], kernel_after: list[LinkBytes]) -> list[dict]:
    """One row per AZ pair: the kernel's bytes, frames and bytes less headers, kipper's
    bytes, and how far the kernel's payload is from kipper's (a fraction of kipper's)."""
    kipper = kipper_pair_bytes(kipper_after)
    kipper.subtract(kipper_pair_bytes(kipper_before))
    rows = []
    for link in link_bytes_delta(kernel_before, kernel_after):
        counted = kipper[link.a, link.b]
        rows.append({"azs": f"{link.a}-{link.b}", "kernel_bytes": link.total,
                     "kernel_frames": link.frames, "kernel_tcp_payload": link.tcp_payload,
                     "kipper_bytes": counted,
                     "difference": (link.tcp_payload - counted) / counted if counted else None})
    return rows
