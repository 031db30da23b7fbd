"""The active-tiered engine is told its leadership by the replica layer (ReplicatedPartition,
ReplicaManager) and never infers it from appends; without a cluster: one engine over an
in-memory store, one partition on broker 1."""

from __future__ import annotations

import asyncio

import pytest

from protocol.records import build_batch, rebase, validate_produce_records
from replication.cluster_metadata import PartitionInfo
from replication.partition import ReplicatedPartition
from storage.active_tiered.metadata import WalRef, decode_pointers, encode_pointers
from storage.config import LogConfig
from storage.log import Leadership

NODE = 1
FOLLOWER = 2


class FakeLink:
    """The engine's ReplicaLink: broker 2 is in sync; the metadata topic is a queue of
    record batches, consumed by the topic scheme."""

    def __init__(self) -> None:
        self.uploads: list[tuple[str, int]] = []
        self.topic: asyncio.Queue[bytes] = asyncio.Queue()
        self._next_offset = 0

    def in_sync_followers(self, topic: str, partition: int) -> list[int]:
        return [FOLLOWER]

    def uploaded(self, topic: str, partition: int) -> None:
        self.uploads.append((topic, partition))

    async def ensure_topic(self) -> None:
        pass

    async def produce(self, values: list[bytes]) -> None:
        pass

    def announce(self, ref: WalRef) -> None:
        """Another leader's ref, as the metadata topic would bring it."""
        batch = build_batch([(None, ref.to_json())], 0)
        rebase(batch, 0, self._next_offset)
        self._next_offset += 1
        self.topic.put_nowait(bytes(batch))

    async def fetch(self, offset: int) -> tuple[bytes, int]:
        return await self.topic.get(), offset


@pytest.fixture
async def engine(tiered_engine):
    link = FakeLink()
    await tiered_engine.start(link)
    tiered_engine.link = link
    yield tiered_engine
    await tiered_engine.stop()


@pytest.fixture
def open_partition(engine, tmp_path):
    """open_partition(scheme, leader=NODE, epoch=0) -> ReplicatedPartition t-0 on broker 1,
    replicas 1 and 2, its log opened by the engine."""
    def open_(scheme: str = "memory", leader: int = NODE, epoch: int = 0) -> ReplicatedPartition:
        log = engine.open_log("t", 0, LogConfig(storage_mode="active-tiered",
                                                wal_metadata_scheme=scheme), tmp_path / "t-0")
        return ReplicatedPartition(NODE, log, info(leader, epoch))
    return open_


def info(leader: int, epoch: int) -> PartitionInfo:
    return PartitionInfo("t", 0, [NODE, FOLLOWER], [NODE, FOLLOWER], leader, epoch)


async def append(partition: ReplicatedPartition, count: int = 3) -> None:
    records = build_batch([(None, b"v%d" % i) for i in range(count)], 0)
    await partition.append_as_leader(records, validate_produce_records(records), 1)


def ref(base: int, last: int) -> WalRef:
    return WalRef("kipper-fast-az2", "other-leader", "t", 0, base, last, 0, 100, 2**62)


async def test_became_leader_uploads_from_the_log_end(engine, open_partition):
    partition = open_partition()
    await append(partition)
    upload = partition.log.state.upload
    assert (upload.leader_epoch, upload.first_tiered_offset, upload.cursor) == (0, 0, 0)
    await engine.uploader.upload_once()
    assert len(engine.uploader.store.objects) == 1
    assert [(r.base_offset, r.last_offset) for r in partition.log.state.refs.refs()] == [(0, 2)]
    assert partition.log.state.upload.cursor == 3
    assert engine.link.uploads == [("t", 0)]
    # A follower fetching what is uploaded gets pointers, not records.
    answer = await partition.log.read_for_replica(FOLLOWER, 0, 1 << 20)
    assert decode_pointers(answer.records).refs == partition.log.state.refs.refs()

    # Leader again in a new epoch: uploads start at the log end offset of that moment.
    await append(partition)
    partition.update_info(info(NODE, 1))
    assert partition.log.state.upload.first_tiered_offset == 6


async def test_became_follower_stops_uploads(engine, open_partition):
    partition = open_partition()
    await append(partition)
    partition.update_info(info(FOLLOWER, 1))
    assert partition.log.state.upload is None
    assert not await engine.uploader.upload_once()
    assert engine.uploader.store.objects == {}
    assert not engine.uploader.will_upload(partition.log.state, 3)


async def test_appends_alone_do_not_make_a_leader(engine, tmp_path):
    log = engine.open_log("t", 0, LogConfig(storage_mode="active-tiered"), tmp_path / "t-0")
    records = build_batch([(None, b"v")], 0)
    await log.append(records, validate_produce_records(records), 0)
    assert log.state.upload is None
    assert not await engine.uploader.upload_once()


@pytest.mark.parametrize("how", ["told", "closed"])
async def test_stopped_stops_uploads_and_the_schemes_forget_it(engine, open_partition, how):
    partition = open_partition("topic")
    await append(partition)
    if how == "told":
        partition.log.on_leadership_change(Leadership.STOPPED, 0)
    else:
        await partition.log.close()
    assert partition.log.state.upload is None
    assert not await engine.uploader.upload_once()
    # The topic scheme no longer hands the partition what the metadata topic brings.
    engine.link.announce(ref(3, 5))
    await asyncio.sleep(0.05)
    assert partition.log.state.announced.refs() == []


async def test_topic_scheme_state_follows_the_role(engine, open_partition):
    partition = open_partition("topic", leader=FOLLOWER)
    state = partition.log.state
    engine.link.announce(ref(0, 5))
    await asyncio.sleep(0.05)
    assert state.announced.refs() == [ref(0, 5)]
    # A leader downloads nothing: what was announced to the follower is dropped.
    partition.update_info(info(NODE, 1))
    assert state.announced.refs() == []


async def test_follower_positions_are_per_leadership(engine, open_partition):
    partition = open_partition()
    await append(partition)
    await engine.uploader.upload_once()
    state = partition.log.state
    assert state.followers.point(FOLLOWER, 0)
    assert not state.followers.point(FOLLOWER, 0)  # asked again: it gets records
    partition.update_info(info(FOLLOWER, 1))
    partition.update_info(info(NODE, 2))
    assert state.followers.point(FOLLOWER, 0)


async def test_truncation_drops_refs_above_it(engine, open_partition):
    partition = open_partition()
    await append(partition)
    await engine.uploader.upload_once()
    partition.update_info(info(FOLLOWER, 1))
    await partition.log.truncate_to(2)
    assert partition.log.state.refs.refs() == []


async def test_a_missing_object_is_reported_once_and_the_follower_falls_back(
        engine, open_partition, caplog):
    partition = open_partition(leader=FOLLOWER)
    pointers = encode_pointers(partition.log.scheme.pointers([ref(0, 2)]))
    for _ in range(2):  # the fetcher retries the same offset
        await partition.log.append_as_follower(pointers)
    # Nothing appended: the next fetch asks the leader for records (the fallback).
    assert partition.log.log_end_offset == 0
    assert engine.metrics.snapshot()["failed_downloads"] == 2
    assert engine.downloader.store.missing.snapshot() == {"reads": {"kipper-fast-az2": 2},
                                                          "objects": 1}
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "kipper-fast-az2/other-leader" in errors[0] and "t-0" in errors[0]
