"""Rack-aware, balanced replica placement (one replica per AZ where possible).

Brokers are ordered so that racks alternate (Kafka's rack-aware assignment does the
same); partition p is led by the p-th broker of that order, so leaders spread evenly,
and its followers are the next brokers in the order whose racks are not used yet.
"""

from __future__ import annotations

from itertools import zip_longest


def rack_alternating_order(brokers: dict[int, str | None]) -> list[int]:
    by_rack: dict[str | None, list[int]] = {}
    for node_id in sorted(brokers):
        by_rack.setdefault(brokers[node_id], []).append(node_id)
    racks = [by_rack[rack] for rack in sorted(by_rack, key=lambda r: (r is None, r or ""))]
    return [node for group in zip_longest(*racks) for node in group if node is not None]


def assign_replicas(brokers: dict[int, str | None], partitions: range,
                    replication_factor: int) -> dict[int, list[int]]:
    order = rack_alternating_order(brokers)
    assignment = {}
    for p in partitions:
        start = p % len(order)
        candidates = order[start:] + order[:start]
        replicas = [candidates[0]]
        used_racks = {brokers[candidates[0]]}
        # First pass: distinct racks; second pass: fill up when there are fewer racks.
        for prefer_new_rack in (True, False):
            for node in candidates[1:]:
                if len(replicas) == replication_factor:
                    break
                if node in replicas or (prefer_new_rack and brokers[node] in used_racks):
                    continue
                replicas.append(node)
                used_racks.add(brokers[node])
        assignment[p] = replicas
    return assignment
