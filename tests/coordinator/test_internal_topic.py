"""``InternalTopicLog`` over a real classic log: transactional appends carry the producer's
id and epoch and are checked as a coordinator's batches, and replay hands the group
coordinator both the records (with their producer) and the transaction markers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from coordinator.coordinator_log import (
    CoordinatorLogError,
    LoggedMarker,
    LoggedRecord,
    LogRecord,
    TxnProducer,
)
from coordinator.internal_topic import OFFSETS_TOPIC, InternalTopic, InternalTopicLog
from protocol.records import (
    NO_PRODUCER_ID,
    BatchHeader,
    TxnMarker,
    build_marker_batch,
    iter_batches,
)
from replication.cluster_metadata import MetadataImage
from storage.append_rules import AppendOrigin
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.log import AppendResult

NOW_MS = 1_700_000_000_000


@dataclass
class LeaderReplica:
    """The one replica of the partition, leading it: appends go straight to its log."""

    log: ClassicLog
    is_leader: bool = True

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, *, origin: AppendOrigin) -> AppendResult:
        return await self.log.append(records, batches, 0, origin)


@dataclass
class Replicas:
    partitions: dict = field(default_factory=dict)


async def _refuse_creation(*_args) -> ErrorCode:
    raise AssertionError("the topic is not created here")


@pytest.fixture
async def topic_log(tmp_path):
    replica = LeaderReplica(ClassicLog(OFFSETS_TOPIC, 0, LogConfig(), tmp_path / "offsets-0"))
    yield InternalTopicLog(MetadataImage(), _refuse_creation,
                           Replicas({(OFFSETS_TOPIC, 0): replica}),
                           InternalTopic(OFFSETS_TOPIC, 1, 1, 1 << 20))
    await replica.log.close()


async def write_marker(topic_log: InternalTopicLog, producer: TxnProducer, commit: bool) -> None:
    """What WriteTxnMarkers writes to the partition."""
    batch = build_marker_batch(TxnMarker(producer.producer_id, producer.producer_epoch, commit,
                                         coordinator_epoch=0), NOW_MS)
    await topic_log.replicas.partitions[(OFFSETS_TOPIC, 0)].append_as_leader(
        batch, list(iter_batches(batch)), -1, origin=AppendOrigin.COORDINATOR)


async def test_replay_returns_transactional_records_and_markers(topic_log):
    producer = TxnProducer(producer_id=11, producer_epoch=2)
    assert await topic_log.append(0, [LogRecord(b"plain", b"1")], NOW_MS) == 0
    assert await topic_log.append(0, [LogRecord(b"a", b"2"), LogRecord(b"b", None)], NOW_MS,
                                  producer) == 2
    await write_marker(topic_log, producer, commit=False)
    assert [entry async for entry in topic_log.replay(0)] == [
        LoggedRecord(0, b"plain", b"1", NO_PRODUCER_ID),
        LoggedRecord(1, b"a", b"2", 11),
        LoggedRecord(2, b"b", None, 11),
        LoggedMarker(3, 11, commit=False),
    ]


async def test_a_fenced_producer_epoch_cannot_append(topic_log):
    await topic_log.append(0, [LogRecord(b"a", b"1")], NOW_MS, TxnProducer(11, 3))
    with pytest.raises(CoordinatorLogError) as refused:
        await topic_log.append(0, [LogRecord(b"a", b"2")], NOW_MS, TxnProducer(11, 2))
    assert refused.value.error_code == ErrorCode.invalid_producer_epoch
