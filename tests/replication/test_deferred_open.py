"""A broker hosts partitions before it opens their logs: a restarted broker (or one that is
told of thousands of new partitions) catches up with the metadata without opening a log, and
opens each on first use or in the background, a few at a time."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import storage.manager

from broker.config import BrokerConfig
from broker.static_configs import dynamic_configs
from protocol.internal import ClusterCredentials
from protocol.records import validate_produce_records
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ReplicaManager
from storage.manager import LogManager
from support.batches import build_batch

NODE = 1
TOPIC = "deferred-open"
PARTITIONS = 40


def hosting(data_dir: Path, topic_id: str, leader_of=lambda index: NODE, *,
            started: bool = False) -> tuple[ReplicaManager, LogManager]:
    """A broker's replica manager told of TOPIC (replicas: this broker and broker 2; each
    partition led by ``leader_of(index)``, here by default), as a restart replays it, or
    (``started``) as a running broker learns of a new topic."""
    image = MetadataImage()
    logs = LogManager(data_dir)
    replicas = ReplicaManager(NODE, image, logs,
                              dynamic_configs(BrokerConfig(node_id=NODE, data_dir=data_dir), image),
                              NodeClient("test", ClusterCredentials(NODE, "unused"), traffic=None),
                              None)
    if started:
        replicas.start()
    records = [{"type": "topic", "name": TOPIC, "id": topic_id, "configs": {}}] + [
        {"type": "partition", "topic": TOPIC, "partition": index, "replicas": [NODE, 2],
         "isr": [NODE, 2], "leader": leader_of(index), "leader_epoch": 0, "partition_epoch": 0}
        for index in range(PARTITIONS)]
    for offset, record in enumerate(records):
        image.apply(offset, record)
        replicas.on_metadata_record(record)
    return replicas, logs


async def test_a_restarted_broker_serves_a_partition_it_has_not_opened_yet(tmp_path: Path):
    topic_id = str(uuid.uuid4())
    replicas, _ = hosting(tmp_path, topic_id)
    records = build_batch([b"a", b"b", b"c"])
    await replicas.get(TOPIC, 7).append_as_leader(records, validate_produce_records(records), 1)
    await replicas.close()

    replicas, logs = hosting(tmp_path, topic_id)
    try:
        assert logs.logs() == []  # caught up with the metadata, nothing opened
        assert replicas.get(TOPIC, 7).log.log_end_offset == 3  # opened on first use
        await asyncio.sleep(0.1)
        assert len(logs.logs()) == 1  # nothing else until the broker has started
        replicas.start()
        async with asyncio.timeout(10):  # then the others, in the background
            while len(logs.logs()) < PARTITIONS:
                await asyncio.sleep(0.01)
        assert replicas.get(TOPIC, 7).log.log_end_offset == 3
    finally:
        await replicas.close()


async def test_a_topic_deleted_before_its_partitions_were_opened_leaves_no_directory(
        tmp_path: Path):
    replicas, logs = hosting(tmp_path, str(uuid.uuid4()))
    replicas.get(TOPIC, 0)
    replicas.on_metadata_record({"type": "remove_topic", "name": TOPIC})
    try:
        async with asyncio.timeout(10):
            while any(path.name.startswith(TOPIC) for path in tmp_path.iterdir()):
                await asyncio.sleep(0.01)
        assert logs.logs() == []
    finally:
        await replicas.close()


async def test_the_partitions_a_broker_follows_are_opened_first(tmp_path: Path):
    # Led here, then followed.
    replicas, logs = hosting(tmp_path, str(uuid.uuid4()),
                             lambda index: NODE if index < PARTITIONS // 2 else 2)
    opened = []
    open_log = logs.open
    logs.open = lambda topic, partition, config: opened.append(partition) or open_log(
        topic, partition, config)
    replicas.start()
    try:
        async with asyncio.timeout(10):
            while len(opened) < PARTITIONS:
                await asyncio.sleep(0.01)
        assert opened == list(range(PARTITIONS // 2, PARTITIONS)) + list(range(PARTITIONS // 2))
    finally:
        await replicas.close()



async def test_a_new_topics_directories_are_made_before_its_logs_are_opened(tmp_path: Path):
    existed = []
    open_log = LogManager.open

    def open_and_look(logs: LogManager, topic: str, partition: int, config):
        existed.append((logs.partition_dir(topic, partition) / f"{0:020d}.log").exists())
        return open_log(logs, topic, partition, config)

    LogManager.open = open_and_look
    try:
        replicas, logs = hosting(tmp_path, str(uuid.uuid4()), started=True)
        async with asyncio.timeout(10):
            while len(logs.logs()) < PARTITIONS:
                await asyncio.sleep(0.01)
        assert existed == [True] * PARTITIONS
        records = build_batch([b"a", b"b"])
        partition = replicas.get(TOPIC, 3)
        await partition.append_as_leader(records, validate_produce_records(records), 1)
        assert partition.log.log_end_offset == 2
    finally:
        LogManager.open = open_log
        await replicas.close()


async def test_a_topic_deleted_while_its_directories_are_made_leaves_none(
        tmp_path: Path, monkeypatch):
    making, release, made = threading.Event(), threading.Event(), threading.Event()
    make_all = storage.manager.make_log_dirs

    def held_back(paths: list[str]) -> None:
        making.set()
        release.wait(10)
        make_all(paths)
        made.set()

    monkeypatch.setattr(storage.manager, "make_log_dirs", held_back)
    replicas, logs = hosting(tmp_path, str(uuid.uuid4()), started=True)
    try:
        assert await asyncio.to_thread(making.wait, 10)
        replicas.on_metadata_record({"type": "remove_topic", "name": TOPIC})
        await asyncio.sleep(0.05)  # the deletions run, and wait for the directories
        release.set()
        assert await asyncio.to_thread(made.wait, 10)
    finally:
        release.set()
        await replicas.close()  # once the deletions are done
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(TOPIC)]
    assert logs.logs() == []


async def test_opened_and_dropped_partitions_are_told_to_listeners(tmp_path: Path):
    """What the broker's heap counts (broker.heap): each log opened, each hosted partition
    dropped."""
    replicas, _ = hosting(tmp_path, str(uuid.uuid4()), started=True)
    told = {"opened": 0}
    still_hosted: list[int] = []
    replicas.opened_listeners.append(lambda: told.__setitem__("opened", told["opened"] + 1))
    replicas.dropped_listeners.append(still_hosted.append)
    try:
        replicas.get(TOPIC, 0)  # on first use
        async with asyncio.timeout(10):  # the others in the background
            while told["opened"] < PARTITIONS:
                await asyncio.sleep(0.01)
        replicas.on_metadata_record({"type": "remove_topic", "name": TOPIC})
        assert told == {"opened": PARTITIONS}
        assert still_hosted == list(reversed(range(PARTITIONS)))  # one call per partition
    finally:
        await replicas.close()
