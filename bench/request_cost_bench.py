"""CPU per request on the broker's hot paths, in-process: no socket, no client.

What a Produce request and a Fetch request cost the broker, from the request frame to the
response buffers (protocol.framing.parse_request, the handler, encode_response_buffers),
against a node that leads ``--partitions`` classic partitions of one topic, with the
handlers given BrokerServices built from their parts. On a machine shared with other work,
wall-clock throughput swings by 2x from run to run; the smallest CPU time of many runs of
one request does not, so a change to these paths is measured here before and after.

- produce: a one-partition Produce v9 (what librdkafka sends: one request per partition
  batch) of ``--records`` 1 KiB records, acks=1, round robin over the partitions;
- fetch: a Fetch v12 without a session (librdkafka's) of every partition, each at its high
  watermark (nothing new: the cost per partition of a consumer's or follower's poll).

    python -m bench.request_cost_bench --partitions 1000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.config import BrokerConfig
from broker.connection import SUPPORTED
from broker.handlers import HANDLERS, RequestContext
from broker.producer_ids import ProducerIdAllocator
from broker.services import BrokerServices, ControllerChannel
from broker.share_groups import group_configs
from broker.static_configs import dynamic_configs
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import encode_request, encode_response_buffers, parse_request
from protocol.internal import ClusterCredentials
from protocol.records import build_batch
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ReplicaManager
from storage.manager import LogManager

NODE = 1
TOPIC = "cost"
# The Produce version librdkafka sends.
PRODUCE_VERSION = 9


async def _no_producer_ids() -> range:
    return range(0)


def _services(data_dir: Path, partitions: int) -> BrokerServices:
    image = MetadataImage()
    logs = LogManager(data_dir)
    config = BrokerConfig(node_id=NODE, data_dir=data_dir)
    configs = dynamic_configs(config, image)
    replicas = ReplicaManager(NODE, image, logs, configs,
                              NodeClient("bench", ClusterCredentials(NODE, "unused"), None), None)
    records = [{"type": "broker", "node_id": NODE, "host": "127.0.0.1", "port": 9092,
                "rack": "az1", "epoch": 0},
               {"type": "topic", "name": TOPIC, "id": str(uuid.uuid4()), "configs": {}}]
    records += [{"type": "partition", "topic": TOPIC, "partition": p, "replicas": [NODE],
                 "isr": [NODE], "leader": NODE, "leader_epoch": 0, "partition_epoch": 0}
                for p in range(partitions)]
    for offset, record in enumerate(records):
        image.apply(offset, record)
        replicas.on_metadata_record(record)
    return BrokerServices(
        config=config, image=image, replicas=replicas, dynamic_configs=configs,
        group_configs=group_configs(config, image), controller=None,
        controller_channel=ControllerChannel(None, None, None), group_coordinator=None,
        transaction_coordinator=None, batch_coordinator=None,
        producer_ids=ProducerIdAllocator(_no_producer_ids), capture=None,
        storage_modes=logs.engines.keys())


async def _serve(services: BrokerServices, frame: bytes) -> list:
    header, body = parse_request(frame[4:], SUPPORTED)
    response = await HANDLERS[header.api_key](RequestContext(header, services, "bench"), body)
    return encode_response_buffers(header, response)


async def _smallest_cpu(services: BrokerServices, frames: list[bytes], runs: int) -> float:
    best = float("inf")
    for i in range(runs):
        started = time.process_time()
        await _serve(services, frames[i % len(frames)])
        best = min(best, time.process_time() - started)
    return best


def produce_frame(topic: str, partition: int, batch: bytes, acks: int,
                  correlation_id: int) -> bytes:
    """A one-partition Produce v9 frame, as librdkafka sends them."""
    return encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id, "bench", make(
        ProduceRequest, transactional_id=None, acks=acks, timeout=30_000, topic_data=(make(
            TopicProduceData, name=topic, partition_data=(make(
                PartitionProduceData, index=partition, records=batch),)),)))


def _produce_frames(partitions: int, records: int) -> list[bytes]:
    batch = bytes(build_batch([(None, os.urandom(1024)) for _ in range(records)],
                              int(time.time() * 1000)))
    return [produce_frame(TOPIC, p, batch, 1, p) for p in range(partitions)]


def _fetch_frame(partitions: int, offset: int) -> bytes:
    return encode_request(ApiKey.FETCH, 12, 1, "bench", make(
        FetchRequest, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=50 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
        rack_id="", topics=(make(FetchTopic, topic=TOPIC, partitions=tuple(make(
            FetchPartition, partition=p, current_leader_epoch=0, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            for p in range(partitions))),)))


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kipper-request-cost-") as tmp:
        services = _services(Path(tmp) / "data", args.partitions)
        try:
            produce = _produce_frames(args.partitions, args.records)
            for frame in produce:  # opens every log, and puts the same records in each
                await _serve(services, frame)
            produce_cpu = await _smallest_cpu(services, produce, args.runs)
            # Every partition now ends at the same offset: fetch there (nothing new).
            end = services.replicas.get(TOPIC, 0).high_watermark
            fetch_cpu = await _smallest_cpu(services, [_fetch_frame(args.partitions, end)],
                                            max(3, args.runs // max(1, args.partitions // 10)))
        finally:
            await services.replicas.close()
    print(f"{args.partitions} partitions (smallest CPU time of the runs):")
    print(f"  produce, 1 partition x {args.records} records: {produce_cpu * 1e6:8.1f} us")
    print(f"  fetch of every partition, nothing new:      {fetch_cpu * 1e3:8.2f} ms "
          f"({fetch_cpu / args.partitions * 1e6:.2f} us per partition)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="request_cost_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, default=1000)
    p.add_argument("--records", type=int, default=2, help="records per produce request")
    p.add_argument("--runs", type=int, default=2000, help="produce requests timed")
    asyncio.run(run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
