"""KIP-1181: which broker Metadata names as a diskless partition's leader, per client; and
the stable choice of a broker that KIP-392's preferred read replica uses too.

Any broker can serve a diskless partition, so the answer is chosen for the client: a live
broker in the client's AZ (broker.client_az: Metadata requests carry no rack, so this is the
``az=<zone>`` token of its client.id; a consumer that sets client.rack is then sent to its
AZ by its Fetch requests, see broker.handlers.fetch), else any live broker. Rendezvous
hashing over (topic, partition, broker) keeps the choice stable, so an idempotent producer
keeps sending a partition's batches through one broker (whose WAL writer commits them in
order), and only the partitions of a broker that leaves move.
"""

from __future__ import annotations

import zlib

from replication.cluster_metadata import BrokerInfo


def stable_choice(topic: str, partition: int, brokers: list[BrokerInfo]) -> BrokerInfo | None:
    """One of ``brokers`` for the partition, the same one as long as it is among them."""
    if not brokers:
        return None
    return max(brokers, key=lambda b: zlib.crc32(f"{topic}\0{partition}\0{b.node_id}".encode()))


def diskless_leader(topic: str, partition: int, brokers: list[BrokerInfo],
                    client_az: str | None) -> int:
    """The node id to name as leader; -1 when no broker is live."""
    local = [b for b in brokers if client_az is not None and b.rack == client_az]
    chosen = stable_choice(topic, partition, local or brokers)
    return chosen.node_id if chosen is not None else -1
