"""Read-your-writes across brokers for a diskless topic, and what it costs.

A `kipper cluster up` cluster (3 brokers in az1..az3, embedded S3). Each round produces 10
records with acks=all through broker A (a confluent-kafka producer whose ``client.id``
names A's AZ, so Metadata names A as the leader) and, as soon as they are acknowledged,
asks broker B: ListOffsets(LATEST), then Fetch (max_wait 0) from the acknowledged end,
so that the fetch reads nothing from object storage and its latency is what answering
costs (before read-your-writes, a stale broker skipped the read of the 10 records anyway).
A and B are the two brokers that are not the batch coordinator (the leader of
``__diskless-metadata-0``), so B answers from its replica of the coordinator's log.

It prints how many answers were stale (LATEST, or the fetch's high watermark, below what
was acknowledged) and the p50/p99 latency of ListOffsets and Fetch at B, as B's client
sees them (one request at a time on one connection):

    python -m bench.read_your_writes [--rounds 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from bench.local_cluster import LocalCluster
from protocol.apis import ApiKey
from protocol.build import make
from protocol.internal import ClusterCredentials
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC
from replication.node_client import NodeConnection

RECORDS_PER_ROUND = 10
SECRET_VARIABLE = "KIPPER_CLUSTER_SECRET"
BENCH_NODE_ID = 900  # the raw Fetch's connection, which is no broker


@dataclass
class Result:
    rounds: int
    stale_list_offsets: int
    stale_fetch_high_watermark: int
    list_offsets_p50_ms: float
    list_offsets_p99_ms: float
    fetch_p50_ms: float
    fetch_p99_ms: float


class Uncounted:
    """The traffic accounting a NodeConnection wants; the bench counts nothing."""

    def request(self, api_key: int, body: object, nbytes: int) -> str:
        return ""

    def response(self, traffic_class: str, nbytes: int) -> None:
        pass


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _leader(admin: AdminClient, topic: str) -> int:
    return admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader


async def fetch_high_watermark(connection: NodeConnection, topic: str, offset: int) -> int:
    """The high watermark of a consumer's Fetch of partition 0 from ``offset`` (max_wait 0:
    answered at once, with what the broker holds then)."""
    request = make(FetchRequest, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
                   isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
                   rack_id="", topics=(make(FetchTopic, topic=topic, partitions=(make(
                       FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
                       last_fetched_epoch=-1, log_start_offset=-1,
                       partition_max_bytes=1 << 20),)),))
    return (await connection.call(ApiKey.FETCH, request, 30)).responses[0].partitions[0].high_watermark


async def _probe(connection: NodeConnection, topic: str,
                 fetch_offset: int) -> tuple[int, float, int, float]:
    """(LATEST, its latency in ms, the fetch's high watermark, its latency in ms) at B."""
    started = time.perf_counter()
    latest = await connection.latest_offset(topic, 0, 30)
    list_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    high_watermark = await fetch_high_watermark(connection, topic, fetch_offset)
    fetch_ms = (time.perf_counter() - started) * 1000
    return latest, list_ms, high_watermark, fetch_ms


def run(cluster: LocalCluster, rounds: int) -> Result:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"ryw-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"kipper.storage.mode": "diskless"})])[
        topic].result(30)
    brokers = {int(name.split()[1]): node for name, node in cluster.nodes.items()
               if name.startswith("broker ")}
    warmup = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    warmup.produce(topic, b"warm-up")  # the first diskless commit creates the coordinator's log
    warmup.flush(30)
    coordinator = _leader(admin, DISKLESS_METADATA_TOPIC)
    writer, reader = [node for node in sorted(brokers) if node != coordinator][:2]
    print(f"coordinator: broker {coordinator}; produce through broker {writer}, "
          f"read through broker {reader}", file=sys.stderr)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                         "client.id": f"ryw-bench az={brokers[writer]['rack']}"})
    host, port = brokers[reader]["address"].rsplit(":", 1)
    # NodeConnection proves cluster membership first, though a consumer Fetch needs none.
    connection = NodeConnection(host, int(port), "ryw-bench",
                                ClusterCredentials(BENCH_NODE_ID, os.environ[SECRET_VARIABLE]),
                                Uncounted())
    acknowledged = 1
    stale_list = stale_hw = 0
    list_ms: list[float] = []
    fetch_ms: list[float] = []
    loop = asyncio.new_event_loop()
    try:
        for _ in range(rounds):
            for i in range(RECORDS_PER_ROUND):
                producer.produce(topic, f"record-{i}".encode())
            if producer.flush(30) != 0:
                raise RuntimeError("the producer did not get its acknowledgements")
            acknowledged += RECORDS_PER_ROUND
            latest, list_latency, high_watermark, fetch_latency = loop.run_until_complete(
                _probe(connection, topic, acknowledged))
            stale_list += latest < acknowledged
            stale_hw += high_watermark < acknowledged
            list_ms.append(list_latency)
            fetch_ms.append(fetch_latency)
    finally:
        loop.run_until_complete(connection.close())
        loop.close()
    return Result(rounds, stale_list, stale_hw, _percentile(list_ms, 0.5),
                  _percentile(list_ms, 0.99), _percentile(fetch_ms, 0.5),
                  _percentile(fetch_ms, 0.99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kipper-ryw-") as root:
        # cluster up uses (and its brokers share) the secret in its environment.
        os.environ.setdefault(SECRET_VARIABLE, secrets.token_hex(16))
        cluster = LocalCluster(Path(root)).start()
        try:
            result = run(cluster, args.rounds)
        finally:
            cluster.stop()
    print(f"rounds: {result.rounds} (10 records each, acks=all)")
    print(f"stale ListOffsets(LATEST): {result.stale_list_offsets}; "
          f"stale fetch high watermark: {result.stale_fetch_high_watermark}")
    print(f"ListOffsets at the reading broker: p50 {result.list_offsets_p50_ms:.2f} ms, "
          f"p99 {result.list_offsets_p99_ms:.2f} ms")
    print(f"Fetch at the reading broker:       p50 {result.fetch_p50_ms:.2f} ms, "
          f"p99 {result.fetch_p99_ms:.2f} ms")
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
