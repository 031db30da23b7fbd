"""Request handlers run in-process against BrokerServices built from their parts: no socket,
no process. The node here leads one classic partition, so no replica fetcher is started."""

from __future__ import annotations

import asyncio
import importlib
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.config import BrokerConfig
from broker.handlers import HANDLERS, RequestContext
from broker.producer_ids import ProducerIdAllocator
from broker.services import BrokerServices, ControllerChannel
from broker.share_groups import group_configs
from broker.static_configs import dynamic_configs
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import RequestHeader, decode_response, encode_response
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


async def one_block() -> range:
    """The controller's answer to AllocateProducerIds (no controller runs here)."""
    return range(0, 1000)


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
        group_configs=group_configs(config, image), controller=None,
        controller_channel=ControllerChannel(None, None, None),
        group_coordinator=None, transaction_coordinator=None, batch_coordinator=None,
        producer_ids=ProducerIdAllocator(one_block), capture=None,
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


@pytest.mark.parametrize("version", range(13))
async def test_metadata_partitions_at_every_version(services, version):
    """Each version's answer (its partitions built without ``make``) has the fields that
    version has, and survives encoding and decoding."""
    schema = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    request = make(schema.MetadataRequest, topics=(make(
        schema.MetadataRequestTopic, topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False)
    response = await call(services, ApiKey.METADATA, version, request)
    frame = encode_response(RequestHeader(ApiKey.METADATA, version, 7, "in-process"), response)
    _, decoded = decode_response(frame[4:], ApiKey.METADATA, version)
    assert decoded == response
    (partition,) = decoded.topics[0].partitions
    assert (partition.partition_index, partition.leader_id, partition.replica_nodes,
            partition.isr_nodes) == (0, NODE, (NODE,), (NODE,))
    assert hasattr(partition, "leader_epoch") == (version >= 7)


async def test_metadata_of_a_topic_deleted_between_turns(services, monkeypatch):
    """Entries are built between turns of the event loop; a topic deleted meanwhile is
    answered as it was (it raised KeyError, and the client's connection was closed)."""
    from broker.handlers import metadata
    monkeypatch.setattr(metadata, "ENTRY_SLICE_S", 0.0)  # a turn before every partition
    image = services.image
    image.apply(image.next_offset, {"type": "partition", "topic": TOPIC, "partition": 1,
                                    "replicas": [NODE], "isr": [NODE], "leader": NODE,
                                    "leader_epoch": 0, "partition_epoch": 0})

    async def delete_at_first_turn() -> None:
        record = {"type": "remove_topic", "name": TOPIC}
        image.apply(image.next_offset, record)
        services.replicas.on_metadata_record(record)
        services.dynamic_configs.on_metadata_record(record)

    deletion = asyncio.get_running_loop().call_soon(
        lambda: asyncio.ensure_future(delete_at_first_turn()))
    response = await call(services, ApiKey.METADATA, 12, make(
        MetadataRequest, topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    deletion.cancel()
    assert TOPIC not in image.topics  # deleted while the answer was built
    (topic,) = response.topics
    assert [p.partition_index for p in topic.partitions] == [0, 1]


async def test_metadata_entries_are_kept_until_their_topic_changes(services):
    """An answer reuses the entries of the last one for the same version while the topic is
    unchanged; a partition change (a new leader epoch here) is answered at once."""
    def ask(version: int = 12):
        schema = importlib.import_module(f"kio.schema.metadata.v{version}.request")
        return call(services, ApiKey.METADATA, version, make(
            schema.MetadataRequest, topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False))

    first, again, older = await ask(), await ask(), await ask(9)
    assert again.topics[0].partitions is first.topics[0].partitions
    assert older.topics[0].partitions is not first.topics[0].partitions  # another version
    services.image.apply(services.image.next_offset, {
        "type": "partition", "topic": TOPIC, "partition": 0, "replicas": [NODE],
        "isr": [NODE], "leader": NODE, "leader_epoch": 1, "partition_epoch": 1})
    changed = await ask()
    assert [p.leader_epoch for p in changed.topics[0].partitions] == [1]


@pytest.mark.parametrize("partitions", [1, 2])
async def test_a_metadata_answer_of_many_partitions_is_encoded_off_the_event_loop(
        services, monkeypatch, partitions):
    from broker.handlers import metadata
    monkeypatch.setattr(metadata, "ENCODE_OFF_LOOP_PARTITIONS", 2)
    image = services.image
    for index in range(1, partitions):
        image.apply(image.next_offset, {"type": "partition", "topic": TOPIC, "partition": index,
                                        "replicas": [NODE], "isr": [NODE], "leader": NODE,
                                        "leader_epoch": 0, "partition_epoch": 0})
    context = RequestContext(RequestHeader(ApiKey.METADATA, 12, 1, "in-process"), services,
                             "test")
    await HANDLERS[ApiKey.METADATA](context, make(
        MetadataRequest, topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert context.encode_off_loop == (partitions == 2)


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


@pytest.mark.parametrize("version", [1, 4])
async def test_describe_log_dirs_filters_by_topic(services, version):
    from kio.index import load_payload_module
    from kio.static.constants import EntityType
    schema = load_payload_module(ApiKey.DESCRIBE_LOG_DIRS, version, EntityType.request)

    async def describe(topics):
        response = await call(services, ApiKey.DESCRIBE_LOG_DIRS, version,
                              make(schema.DescribeLogDirsRequest, topics=topics))
        [log_dir] = response.results
        assert log_dir.log_dir == str(services.config.data_dir.resolve())
        return {(t.name, p.partition_index): (p.partition_size, p.offset_lag)
                for t in log_dir.topics for p in t.partitions}

    assert await describe(None) == {(TOPIC, 0): (0, 0)}
    assert await describe((make(schema.DescribableLogDirTopic, topic="other",
                                partitions=(0,)),)) == {}
    assert await describe((make(schema.DescribableLogDirTopic, topic=TOPIC,
                                partitions=(0, 7)),)) == {(TOPIC, 0): (0, 0)}


@pytest.mark.parametrize("asked", [False, True])
async def test_metadata_v10_answers_the_clusters_operations_when_asked(services, asked):
    from kio.schema.metadata.v10.request import MetadataRequest as MetadataV10
    response = await call(services, ApiKey.METADATA, 10, make(
        MetadataV10, topics=None, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=asked,
        include_topic_authorized_operations=asked))
    [topic] = response.topics
    # Kafka's bits: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
    # IDEMPOTENT_WRITE (5, 7-12); a topic's READ-ALTER_CONFIGS less CLUSTER_ACTION (3-8, 10-11).
    assert response.cluster_authorized_operations == (0x1FA0 if asked else -(2**31))
    assert topic.topic_authorized_operations == (0xDF8 if asked else -(2**31))


async def test_a_leader_holds_back_throttled_followers_over_the_quota(services):
    """leader.replication.throttled.rate (replication.throttle): a follower out of the ISR
    whose replica is throttled gets no records while the leader's measured rate is over it."""
    for offset, record in enumerate([
            {"type": "broker", "node_id": 2, "host": "127.0.0.1", "port": 9093, "rack": "az2",
             "epoch": 0},
            {"type": "config", "topic": TOPIC,
             "configs": {"leader.replication.throttled.replicas": "*"}},
            {"type": "broker_config", "resource": "",
             "configs": {"leader.replication.throttled.rate": "1000"}},
            {"type": "partition", "topic": TOPIC, "partition": 0, "replicas": [NODE, 2],
             "isr": [NODE], "leader": NODE, "leader_epoch": 0, "partition_epoch": 1}], 3):
        services.image.apply(offset, record)
        services.replicas.on_metadata_record(record)
    batch = bytes(build_batch([(None, b"x" * 30_000)], 1_700_000_000_000))
    await call(services, ApiKey.PRODUCE, 9, make(
        ProduceRequest, transactional_id=None, acks=1, timeout=5000, topic_data=(make(
            TopicProduceData, name=TOPIC, partition_data=(make(
                PartitionProduceData, index=0, records=batch),)),)))

    async def follower_fetch() -> bytes:
        fetched = await call(services, ApiKey.FETCH, 12, make(
            FetchRequest, replica_id=2, max_wait=0, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
            rack_id="", topics=(make(FetchTopic, topic=TOPIC, partitions=(make(
                FetchPartition, partition=0, current_leader_epoch=0, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),)))
        data = fetched.responses[0].partitions[0]
        assert data.error_code == ErrorCode.none
        return data.records or b""

    assert len(await follower_fetch()) > 30_000  # nothing measured yet: under the quota
    assert await follower_fetch() == b""


def offset_questions(api_key: ApiKey, partitions: range):
    """ListOffsets (latest) or OffsetForLeaderEpoch (epoch 0) of ``partitions`` of TOPIC."""
    if api_key == ApiKey.LIST_OFFSETS:
        return make(ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(make(
            ListOffsetsTopic, name=TOPIC, partitions=tuple(make(
                ListOffsetsPartition, partition_index=index, current_leader_epoch=-1,
                timestamp=-1) for index in partitions)),))
    return make(OffsetForLeaderEpochRequest, replica_id=-1, topics=(make(
        OffsetForLeaderTopic, topic=TOPIC, partitions=tuple(make(
            OffsetForLeaderPartition, partition=index, current_leader_epoch=-1,
            leader_epoch=0) for index in partitions)),))


@pytest.mark.parametrize("api_key", [ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH])
async def test_offset_questions_about_many_partitions_are_answered_in_turns(
        services, monkeypatch, api_key):
    """An answer may open the partition's log, and after a restart every partition is asked
    at once (by each follower, OffsetForLeaderEpoch): the event loop turns between them. A
    leader that opened 10,000 logs in one turn held its loop for seconds; being the active
    controller, its voters elected another."""
    from broker.handlers import offsets
    monkeypatch.setattr(offsets, "ANSWER_SLICE_S", 0.0)  # a turn before every partition
    image = services.image
    for index in range(1, 4):
        record = {"type": "partition", "topic": TOPIC, "partition": index, "replicas": [NODE],
                  "isr": [NODE], "leader": NODE, "leader_epoch": 0, "partition_epoch": 0}
        image.apply(image.next_offset, record)
        services.replicas.on_metadata_record(record)
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counting = asyncio.ensure_future(count_turns())
    await asyncio.sleep(0)
    before = turns
    response = await call(services, api_key, 4, offset_questions(api_key, range(4)))
    counting.cancel()
    assert turns - before >= 4
    (topic,) = response.topics
    assert [p.error_code for p in topic.partitions] == [ErrorCode.none] * 4
