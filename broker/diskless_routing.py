"""KIP-1181: which broker Metadata names as a diskless partition's leader, per client.

Any broker can serve a diskless partition, so the answer is chosen for the client: a live
broker in the client's AZ (from the ``az=<zone>`` token in its client.id), else any live
broker. Rendezvous hashing over (topic, partition, broker) keeps the choice stable, so an
idempotent producer keeps sending a partition's batches through one broker (whose WAL
writer commits them in order), and only the partitions of a broker that leaves move.
"""

from __future__ import annotations

import zlib

from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, BrokerInfo, MetadataImage


def diskless_servers(image: MetadataImage) -> list[BrokerInfo]:
    """Live brokers that materialise the batch coordinator's state (replicas of its log),
    so they can answer reads; all live brokers before the log exists."""
    live = image.live_brokers()
    topic = image.topics.get(DISKLESS_METADATA_TOPIC)
    if topic is None or 0 not in topic.partitions:
        return live
    replicas = set(topic.partitions[0].replicas)
    return [b for b in live if b.node_id in replicas] or live


def diskless_leader(topic: str, partition: int, brokers: list[BrokerInfo],
                    client_az: str | None) -> int:
    """The node id to name as leader; -1 when no broker is live."""
    local = [b for b in brokers if client_az is not None and b.rack == client_az]
    candidates = local or brokers
    if not candidates:
        return -1
    return max(candidates, key=lambda b: zlib.crc32(f"{topic}\0{partition}\0{b.node_id}".encode())).node_id
