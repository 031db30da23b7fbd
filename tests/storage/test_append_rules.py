"""storage.append_rules hold for every engine: each one's append passes through them
(PartitionLog.append), and the produce handler answers a refusal with MESSAGE_TOO_LARGE."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers.produce import produce as produce_handler
from broker.handlers.registry import RequestContext
from protocol.apis import ApiKey
from protocol.build import make
from protocol.records import validate_produce_records
from replication.cluster_metadata import PartitionInfo
from replication.leaderless_partition import LeaderlessPartition
from replication.partition import ReplicatedPartition
from storage.append_rules import check_append
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.diskless import DisklessLog
from storage.log import PartitionLog, RecordTooLarge

MODES = ["classic", "active-tiered", "diskless"]
LIMIT = 500
# Ten records of 100 bytes: one batch larger than LIMIT.
LARGE = [b"v" * 100] * 10


class UnreachableWriter:
    """A diskless WAL writer that fails the test if a refused append gets to it."""

    async def append(self, *args, **kwargs):
        raise AssertionError("a refused append reached the diskless WAL writer")


@pytest.fixture
def open_log(tmp_path, tiered_engine):
    """open_log(mode, **LogConfig fields) -> that engine's log of partition t-0."""
    def open_(mode: str, **config) -> PartitionLog:
        log_config = LogConfig(storage_mode=mode, **config)
        if mode == "classic":
            return ClassicLog("t", 0, log_config, tmp_path / "t-0")
        if mode == "active-tiered":
            return tiered_engine.open_log("t", 0, log_config, tmp_path / "t-0")
        # Diskless keeps nothing locally: a refused append must not reach the writer.
        return DisklessLog("t", 0, log_config, "topic-id", control_plane=None,
                           writer=UnreachableWriter(), cache=None)
    return open_


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", ["max_message_bytes", "segment_bytes"])
async def test_a_batch_over_the_limit_is_refused(open_log, build_batch, mode, limit):
    log = open_log(mode, **{limit: LIMIT})
    records = build_batch(LARGE)
    with pytest.raises(RecordTooLarge, match=limit.replace("_", ".")):
        await log.append(records, validate_produce_records(records), 0)
    if mode != "diskless":
        assert log.log_end_offset == 0


@pytest.mark.parametrize("mode", MODES)
async def test_produce_answers_message_too_large(open_log, build_batch, mode):
    log = open_log(mode, max_message_bytes=LIMIT)
    info = PartitionInfo("t", 0, replicas=[1], isr=[1], leader=1)
    partition = (LeaderlessPartition(1, log, info) if mode == "diskless"
                 else ReplicatedPartition(1, log, info))
    services = SimpleNamespace(replicas=SimpleNamespace(get=lambda topic, index: partition),
                               capture=None)
    ctx = RequestContext(SimpleNamespace(api_key=ApiKey.PRODUCE, api_version=9, client_id="t"),
                         services, "test")
    request = make(ProduceRequest, transactional_id=None, acks=1, timeout=30_000, topic_data=(
        make(TopicProduceData, name="t", partition_data=(
            make(PartitionProduceData, index=0, records=bytes(build_batch(LARGE))),)),))
    response = await produce_handler(ctx, request)
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.message_too_large


def test_the_timestamp_type_is_the_topics(build_batch):
    records = build_batch([b"v"])
    batches = validate_produce_records(records)
    create_time = check_append(LogConfig(), records, batches)
    log_append_time = check_append(LogConfig(log_append_time=True), records, batches)
    assert (create_time.too_large, create_time.append_time_ms(1234)) == (None, None)
    assert (log_append_time.too_large, log_append_time.append_time_ms(1234)) == (None, 1234)
