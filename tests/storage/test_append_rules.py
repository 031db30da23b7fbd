"""storage.append_rules hold for every engine: each one's append passes through them
(PartitionLog.append), and the produce handler answers a refusal with MESSAGE_TOO_LARGE
(INVALID_RECORD for records a topic's compression.type cannot recompress)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers.produce import produce as produce_handler
from broker.handlers.registry import RequestContext
from protocol.apis import ApiKey
from protocol.build import make
from protocol.compression import CODECS
from protocol.records import (
    CRC_COVERED_FROM,
    CRC_OFFSET,
    HEADER_SIZE,
    InvalidRecordBatch,
    iter_batches,
    validate_produce_records,
)
from replication.cluster_metadata import PartitionInfo
from replication.leaderless_partition import LeaderlessPartition
from replication.partition import ReplicatedPartition
from storage.append_rules import AppendOrigin, check_append
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


class RecordingWriter:
    """A diskless WAL writer that keeps what it is handed, as the WAL object would."""

    def __init__(self) -> None:
        self.records = bytearray()

    async def append(self, topic_id, partition, records, batches, log_append_time):
        base_offset = 0
        results = []
        for batch in batches:
            results.append(SimpleNamespace(error_code=ErrorCode.none, error_message=None,
                                           base_offset=base_offset, log_append_time_ms=-1,
                                           log_start_offset=0))
            base_offset += batch.last_offset_delta + 1
        self.records += records
        return results


@pytest.fixture
def open_log(tmp_path, tiered_engine):
    """open_log(mode, writer=UnreachableWriter(), **LogConfig fields) -> that engine's log
    of partition t-0 (diskless: over ``writer``)."""
    def open_(mode: str, writer=None, **config) -> PartitionLog:
        log_config = LogConfig(storage_mode=mode, **config)
        if mode == "classic":
            return ClassicLog("t", 0, log_config, tmp_path / "t-0")
        if mode == "active-tiered":
            return tiered_engine.open_log("t", 0, log_config, tmp_path / "t-0")
        # Diskless keeps nothing locally: a refused append must not reach the writer.
        return DisklessLog("t", 0, log_config, "topic-id", control_plane=None,
                           writer=writer or UnreachableWriter(), cache=None)
    return open_


async def _stored(log: PartitionLog, writer: RecordingWriter) -> bytes:
    """What the engine stored: the local log's batches, or what reached the WAL writer."""
    if isinstance(log, DisklessLog):
        return bytes(writer.records)
    return (await log.read(0, 1 << 20)).records


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit", ["max_message_bytes", "segment_bytes"])
async def test_a_batch_over_the_limit_is_refused(open_log, build_batch, mode, limit):
    log = open_log(mode, **{limit: LIMIT})
    records = build_batch(LARGE)
    with pytest.raises(RecordTooLarge, match=limit.replace("_", ".")):
        await log.append(records, validate_produce_records(records), 0)
    if mode != "diskless":
        assert log.log_end_offset == 0


async def _produce_answer(log: PartitionLog, mode: str, records: bytes) -> ErrorCode:
    """The error the produce handler answers for ``records`` appended to ``log``."""
    info = PartitionInfo("t", 0, replicas=[1], isr=[1], leader=1)
    partition = (LeaderlessPartition(1, log, info) if mode == "diskless"
                 else ReplicatedPartition(1, log, info))
    services = SimpleNamespace(replicas=SimpleNamespace(get=lambda topic, index: partition),
                               capture=None, config=SimpleNamespace(authorizer_enabled=False))
    ctx = RequestContext(SimpleNamespace(api_key=ApiKey.PRODUCE, api_version=9, client_id="t"),
                         services, "test")
    request = make(ProduceRequest, transactional_id=None, acks=1, timeout=30_000, topic_data=(
        make(TopicProduceData, name="t", partition_data=(
            make(PartitionProduceData, index=0, records=records),)),))
    response = await produce_handler(ctx, request)
    [answer] = response.responses[0].partition_responses
    return answer.error_code


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("limit, error", [
    ("max_message_bytes", ErrorCode.message_too_large),
    # Kafka's RecordBatchTooLargeException: the record set does not fit in a segment.
    ("segment_bytes", ErrorCode.record_list_too_large)])
async def test_produce_answers_kafkas_error_for_each_size_limit(open_log, build_batch, mode,
                                                                limit, error):
    log = open_log(mode, **{limit: LIMIT})
    assert await _produce_answer(log, mode, bytes(build_batch(LARGE))) == error


KEYS = [b"a", b"b", None]
VALUES = [b"one" * 50, b"two" * 50, b"three" * 50]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", sorted(CODECS))
@pytest.mark.parametrize("source", [CODECS["uncompressed"], CODECS["zstd"]])
async def test_batches_are_stored_with_the_topics_codec(open_log, build_batch, decode, mode,
                                                         target, source):
    writer = RecordingWriter()
    log = open_log(mode, writer, compression_type=target)
    records = build_batch(VALUES, keys=KEYS, compression=source, producer_id=7,
                          producer_epoch=2, base_sequence=40)
    [sent] = validate_produce_records(records)
    assert sent.compression == source
    result = await log.append(records, [sent], 0)
    assert (result.base_offset, result.last_offset) == (0, 2)

    stored = await _stored(log, writer)
    [batch] = iter_batches(stored, verify_crc=True)
    assert batch.compression == CODECS[target]
    for name in ("record_count", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence"):
        assert getattr(batch, name) == getattr(sent, name), name
    assert [value for _, _, value in decode(stored)] == VALUES


@pytest.mark.parametrize("mode", ["classic", "active-tiered"])
async def test_a_recompressed_retry_is_recognised_as_a_duplicate(open_log, build_batch, mode):
    log = open_log(mode, compression_type="gzip")

    def send():
        return build_batch([b"once"], producer_id=7, producer_epoch=0, base_sequence=0)

    first = send()
    retry = send()
    assert (await log.append(first, validate_produce_records(first), 0)).base_offset == 0
    assert (await log.append(retry, validate_produce_records(retry), 0)).base_offset == 0
    assert log.log_end_offset == 1


async def test_producer_and_coordinator_batches_keep_their_codec(open_log, build_batch):
    writer = RecordingWriter()
    log = open_log("diskless", writer, compression_type="gzip")
    zstd = build_batch(VALUES, compression=CODECS["zstd"])
    await log.append(bytearray(zstd), validate_produce_records(zstd), 0,
                     AppendOrigin.COORDINATOR)
    producer_log = open_log("classic", compression_type="producer")
    await producer_log.append(bytearray(zstd), validate_produce_records(zstd), 0)
    assert bytes(writer.records)[CRC_COVERED_FROM:] == bytes(zstd)[CRC_COVERED_FROM:]
    [stored] = iter_batches((await producer_log.read(0, 1 << 20)).records)
    assert stored.compression == CODECS["zstd"]


@pytest.mark.parametrize("mode", MODES)
async def test_records_that_do_not_decompress_are_an_invalid_record(open_log, build_batch,
                                                                     mode):
    log = open_log(mode, compression_type="lz4")
    records = build_batch(VALUES, compression=CODECS["gzip"])
    records[HEADER_SIZE + 12] ^= 0xFF  # inside the gzip stream, past its header
    records[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(records[CRC_COVERED_FROM:]).to_bytes(4, "big")
    with pytest.raises(InvalidRecordBatch):
        await log.append(bytearray(records), validate_produce_records(records), 0)
    assert await _produce_answer(log, mode, bytes(records)) == ErrorCode.invalid_record


def test_the_timestamp_type_is_the_topics(build_batch):
    records = build_batch([b"v"])
    batches = validate_produce_records(records)
    create_time = check_append(LogConfig(), records, batches)
    log_append_time = check_append(LogConfig(log_append_time=True), records, batches)
    assert (create_time.too_large, create_time.append_time_ms(1234)) == (None, None)
    assert (log_append_time.too_large, log_append_time.append_time_ms(1234)) == (None, 1234)
