"""Request handlers run in-process against BrokerServices built from their parts: no socket,
no process. The node here leads one classic partition, so no replica fetcher is started."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.config import BrokerConfig
from broker.handlers import HANDLERS, RequestContext
from broker.producer_ids import ProducerIdAllocator
from broker.services import BrokerServices, ControllerChannel
from broker.static_configs import dynamic_configs
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import RequestHeader
from protocol.internal import ClusterCredentials
from protocol.records import build_batch, iter_batches
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ReplicaManager
from storage.manager import LogManager

NODE = 1
TOPIC = "in-process"


class NoTraffic:
    def opened_connection(self, host: str, port: int):
        raise AssertionError("an in-process handler test opens no connection")


@pytest.fixture
async def services(tmp_path: Path):
    image = MetadataImage()
    logs = LogManager(tmp_path / "data")
    nodes = NodeClient("test", ClusterCredentials(NODE, "unused"), NoTraffic())
    config = BrokerConfig(node_id=NODE, data_dir=tmp_path / "data")
    configs = dynamic_configs(config, image)
    replicas = ReplicaManager(NODE, image, logs, configs, nodes, None)
    records = [
        {"type": "broker", "node_id": NODE, "host": "127.0.0.1", "port": 9092, "rack": "az1",
         "epoch": 0},
        {"type": "topic", "name": TOPIC, "id": str(uuid.uuid4()), "configs": {}},
        {"type": "partition", "topic": TOPIC, "partition": 0, "replicas": [NODE], "isr": [NODE],
         "leader": NODE, "leader_epoch": 0, "partition_epoch": 0},
    ]
    for offset, record in enumerate(records):
        image.apply(offset, record)
        replicas.on_metadata_record(record)
    yield BrokerServices(
        config=config, image=image, replicas=replicas, dynamic_configs=configs,
        controller=None,
        controller_channel=ControllerChannel(None, None, replicas.nodes, None),
        group_coordinator=None, transaction_coordinator=None, batch_coordinator=None,
        producer_ids=ProducerIdAllocator(tmp_path / "producer_ids", NODE), capture=None,
        storage_modes=logs.engines.keys())
    await replicas.close()


async def call(services: BrokerServices, api_key: ApiKey, version: int, request):
    context = RequestContext(RequestHeader(api_key, version, 1, "in-process"), services, "test")
    return await HANDLERS[api_key](context, request)


async def test_metadata_lists_the_partition_this_node_leads(services):
    response = await call(services, ApiKey.METADATA, 12, make(
        MetadataRequest, topics=(make(MetadataRequestTopic, topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none
    assert [(p.partition_index, p.leader_id) for p in topic.partitions] == [(0, NODE)]
    assert response.controller_id == NODE


async def test_produce_then_fetch(services):
    batch = bytes(build_batch([(b"k", b"v1"), (None, b"v2")], 1_700_000_000_000))
    produced = await call(services, ApiKey.PRODUCE, 9, make(
        ProduceRequest, transactional_id=None, acks=-1, timeout=5000, topic_data=(make(
            TopicProduceData, name=TOPIC, partition_data=(make(
                PartitionProduceData, index=0, records=batch),)),)))
    result = produced.responses[0].partition_responses[0]
    assert (result.error_code, result.base_offset) == (ErrorCode.none, 0)

    fetched = await call(services, ApiKey.FETCH, 12, make(
        FetchRequest, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
        rack_id="", topics=(make(FetchTopic, topic=TOPIC, partitions=(make(
            FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=0,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),)))
    data = fetched.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark) == (ErrorCode.none, 2)
    assert [b.last_offset_delta for b in iter_batches(data.records)] == [1]


async def test_a_partition_this_node_does_not_host(services):
    response = await call(services, ApiKey.PRODUCE, 9, make(
        ProduceRequest, transactional_id=None, acks=1, timeout=5000, topic_data=(make(
            TopicProduceData, name="elsewhere", partition_data=(make(
                PartitionProduceData, index=0, records=b""),)),)))
    assert (response.responses[0].partition_responses[0].error_code
            == ErrorCode.unknown_topic_or_partition)
