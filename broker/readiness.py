"""When a cluster is usable: every partition has a leader, and that leader answers ListOffsets.

A broker that listens may still be catching up with the metadata, and a partition may be
waiting for its leader to be unfenced, so `kipper cluster up` asks the brokers what a client
would ask (Metadata, then ListOffsets LATEST of every partition from its leader) before it
prints its bootstrap line.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest

from protocol.apis import ApiKey
from protocol.build import make
from protocol.internal import ClusterCredentials
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient, NodeSecurity

from .traffic import NetworkTraffic

# Partitions of one leader: topic -> partition indexes.
Partitions = dict[str, list[int]]
# Partitions one ListOffsets request asks about.
LIST_OFFSETS_CHUNK = 1000
# The longest pause between two rounds.
MAX_PAUSE_S = 1.0


def cluster_client(secret: str, security: NodeSecurity | None) -> NodeClient:
    """A client of the nodes as the cluster's own (its secret; ``security``: the brokers'
    TLS and SASL, None for plaintext), such as `kipper cluster up` asks them with."""
    return NodeClient("kipper-cluster-up", ClusterCredentials(-1, secret),
                      NetworkTraffic(None, MetadataImage()), security or NodeSecurity())


async def unusable_partitions(nodes: NodeClient, bootstrap: tuple[str, int],
                              timeout_s: float,
                              answered: set[tuple[str, int]] | None = None) -> list[str]:
    """What keeps the cluster from being usable, one entry per topic or partition ("t-3: no
    leader", "t-4: NOT_LEADER_OR_FOLLOWER"); empty once every partition answers.
    ``answered``: the partitions whose leader answered an earlier call (not asked again),
    to which those answering now are added."""
    answered = set() if answered is None else answered
    metadata = await nodes.connection(*bootstrap).call(ApiKey.METADATA, make(
        MetadataRequest, topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), timeout_s)
    brokers = {broker.node_id: (broker.host, broker.port) for broker in metadata.brokers}
    problems: list[str] = []
    by_leader: dict[int, Partitions] = defaultdict(lambda: defaultdict(list))
    for topic in metadata.topics:
        if topic.error_code != ErrorCode.none:
            problems.append(f"{topic.name}: {topic.error_code.name}")
        for partition in topic.partitions:
            if (topic.name, partition.partition_index) in answered:
                continue
            if partition.leader_id in brokers:
                by_leader[partition.leader_id][topic.name].append(partition.partition_index)
            else:
                problems.append(f"{topic.name}-{partition.partition_index}: no leader")
    leaders = list(by_leader)
    answers = await asyncio.gather(*(
        _ask_leader(nodes, brokers[leader], by_leader[leader], timeout_s, answered)
        for leader in leaders), return_exceptions=True)
    for leader, answer in zip(leaders, answers):
        if isinstance(answer, (ConnectionError, OSError, asyncio.TimeoutError)):
            problems.append(f"broker {leader}: {answer or type(answer).__name__}")
        elif isinstance(answer, BaseException):
            raise answer
        else:
            problems += answer
    return problems


async def _ask_leader(nodes: NodeClient, address: tuple[str, int], partitions: Partitions,
                      timeout_s: float, answered: set[tuple[str, int]]) -> list[str]:
    """ListOffsets of ``partitions`` from their leader, LIST_OFFSETS_CHUNK at a time, one
    request after another; each partition that answers is added to ``answered`` as its
    request returns. A restarting leader opens the log of each partition it is asked about
    first: one request for all of them (6,000 at once) outlasted its timeout, and the next
    round asked them all again."""
    problems = []
    pairs = [(topic, index) for topic, indexes in partitions.items() for index in indexes]
    for start in range(0, len(pairs), LIST_OFFSETS_CHUNK):
        chunk: Partitions = defaultdict(list)
        for topic, index in pairs[start:start + LIST_OFFSETS_CHUNK]:
            chunk[topic].append(index)
        errors = await _list_offsets_errors(nodes, address, chunk, timeout_s)
        failed = {(topic, index) for topic, index, _ in errors}
        answered.update(pair for pair in pairs[start:start + LIST_OFFSETS_CHUNK]
                        if pair not in failed)
        problems += [f"{topic}-{index}: {error}" for topic, index, error in errors]
    return problems


async def _list_offsets_errors(nodes: NodeClient, address: tuple[str, int],
                               partitions: Partitions, timeout_s: float,
                               ) -> list[tuple[str, int, str]]:
    """(topic, partition, error name) of each partition that did not answer."""
    request = make(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=tuple(
        make(ListOffsetsTopic, name=topic, partitions=tuple(
            make(ListOffsetsPartition, partition_index=index, current_leader_epoch=-1,
                 timestamp=-1) for index in indexes))
        for topic, indexes in partitions.items()))
    response = await nodes.connection(*address).call(ApiKey.LIST_OFFSETS, request, timeout_s)
    return [(topic.name, partition.partition_index, partition.error_code.name)
            for topic in response.topics for partition in topic.partitions
            if partition.error_code != ErrorCode.none]


async def wait_until_usable(nodes: NodeClient, bootstrap: tuple[str, int], timeout_s: float,
                            interval_s: float = 0.2) -> None:
    """Return once every partition has answered; raise TimeoutError naming what still does
    not. A partition that answered is not asked again: with thousands of partitions, asking
    every one of them every round took the restarting brokers' CPU from the work awaited.
    For the same reason the pause after a round is as long as the round took (up to
    MAX_PAUSE_S): the Metadata of 10,000 partitions alone takes a loaded broker half a
    second to answer, and asked every 0.2 s it kept that broker busy with little else."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    answered: set[tuple[str, int]] = set()
    while True:
        started = loop.time()
        try:
            problems = await unusable_partitions(nodes, bootstrap, interval_s + 10, answered)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            problems = [f"{bootstrap[0]}:{bootstrap[1]}: {e or type(e).__name__}"]
        if not problems:
            return
        if loop.time() >= deadline:
            raise TimeoutError(f"not usable after {timeout_s:.0f} s: {len(problems)} "
                               f"problems, e.g. {', '.join(problems[:5])}")
        await asyncio.sleep(max(interval_s, min(loop.time() - started, MAX_PAUSE_S)))


async def live_brokers(nodes: NodeClient, address: tuple[str, int], timeout_s: float) -> set[int]:
    """The brokers the node at ``address`` reports (Metadata of no topic): the live ones, as
    in KRaft, where a fenced broker is left out."""
    metadata = await nodes.connection(*address).call(ApiKey.METADATA, make(
        MetadataRequest, topics=(), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False), timeout_s)
    return {broker.node_id for broker in metadata.brokers}
