"""ClassicLog through the PartitionLog interface: appends, reads, rolls, lookups, deletion."""

from __future__ import annotations

import dataclasses
import errno
import time

import pytest
from kafka.record.default_records import DefaultRecordBatch

from protocol.records import validate_produce_records
from storage.classic import UnexpectedAppendOffset
from storage.classic import log as classic_log
from storage.disk_space import DiskFull
from storage.log import EpochEndOffset, OffsetOutOfRange, RecordTooLarge, TimestampOffset

T = 1_800_000_000_000


def vals(n: int, prefix: str = "v", size: int = 0) -> list[bytes]:
    return [f"{prefix}{i}".encode().ljust(size, b".") for i in range(n)]


def segment_files(log) -> list[str]:
    return sorted(p.name for p in log.directory.glob("*.log"))


async def test_append_read_round_trip(make_log, produce, decode):
    log = make_log()
    results = [await produce(log, vals(5, f"b{i}-")) for i in range(3)]
    assert [(r.base_offset, r.last_offset) for r in results] == [(0, 4), (5, 9), (10, 14)]
    assert all(r.log_append_time_ms == -1 and r.log_start_offset == 0 for r in results)
    assert (log.log_start_offset, log.log_end_offset) == (0, 15)

    result = await log.read(0, 1 << 20)
    records = decode(result.records)
    assert [r[0] for r in records] == list(range(15))
    assert [r[2] for r in records] == vals(5, "b0-") + vals(5, "b1-") + vals(5, "b2-")
    assert (result.log_start_offset, result.log_end_offset) == (0, 15)
    # Offsets and the leader epoch were stamped into the stored batches.
    first = validate_produce_records(result.records)
    assert [b.base_offset for b in first] == [0, 5, 10]
    assert {b.partition_leader_epoch for b in first} == {0}

    assert (await log.read(15, 1 << 20)).records == b""
    with pytest.raises(OffsetOutOfRange):
        await log.read(16, 1 << 20)
    with pytest.raises(OffsetOutOfRange):
        await log.read(-1, 1 << 20)
    await log.close()


async def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(make_log, produce, decode):
    log = make_log()
    for i in range(3):
        await produce(log, vals(5, f"b{i}-"))
    records = decode((await log.read(7, 1 << 20)).records)
    assert records[0][0] == 5 and records[-1][0] == 14


async def test_max_bytes_returns_whole_batches_and_min_one_batch(make_log, produce, decode):
    log = make_log()
    for i in range(4):
        await produce(log, vals(10, f"b{i}-", size=100))
    batch_size = len((await log.read(0, 1 << 20)).records) // 4

    two = await log.read(0, 2 * batch_size + batch_size // 2)
    assert len(two.records) == 2 * batch_size
    assert [r[0] for r in decode(two.records)] == list(range(20))

    big_first = await log.read(10, 10)
    assert len(big_first.records) == batch_size
    assert decode(big_first.records)[0][0] == 10
    assert (await log.read(10, 10, min_one_batch=False)).records == b""


async def test_max_bytes_fills_with_as_many_whole_batches_as_fit(make_log, produce):
    log = make_log(index_interval_bytes=300)
    for i in range(60):
        await produce(log, vals(1 + i % 4, f"b{i}-", size=20))
    everything = (await log.read(0, 1 << 20)).records
    batches = validate_produce_records(everything)
    ends = [b.position + b.size for b in batches]
    for start in range(0, 60, 7):
        first = batches[start]
        for max_bytes in range(first.size, 3000, 97):
            records = (await log.read(first.base_offset, max_bytes)).records
            expected_end = max(e for e in ends if e - first.position <= max_bytes)
            assert records == everything[first.position:expected_end]


async def test_max_offset_excludes_batches_at_or_above_it(make_log, produce, decode):
    log = make_log()
    for i in range(3):
        await produce(log, vals(5, f"b{i}-"))
    assert decode((await log.read(0, 1 << 20, max_offset=10)).records)[-1][0] == 9
    # A batch straddling the limit is left out entirely.
    assert decode((await log.read(0, 1 << 20, max_offset=7)).records)[-1][0] == 4
    assert (await log.read(10, 1 << 20, max_offset=10)).records == b""
    assert (await log.read(5, 1 << 20, max_offset=7)).records == b""
    assert (await log.read(12, 1 << 20, max_offset=10)).records == b""


async def test_record_too_large(make_log, produce):
    log = make_log(max_message_bytes=500)
    await produce(log, vals(2))
    with pytest.raises(RecordTooLarge):
        await produce(log, vals(10, size=100))
    log = make_log("small-segments", segment_bytes=500)
    with pytest.raises(RecordTooLarge):
        await produce(log, vals(10, size=100))
    assert log.log_end_offset == 0


async def test_log_append_time_stamps_the_broker_clock(make_log, produce, decode):
    log = make_log(log_append_time=True)
    before = time.time_ns() // 1_000_000
    result = await produce(log, vals(3), timestamps=[1, 2, 3])
    assert before <= result.log_append_time_ms <= time.time_ns() // 1_000_000
    records = decode((await log.read(0, 1 << 20)).records)
    assert {r[1] for r in records} == {result.log_append_time_ms}
    found = await log.offset_for_timestamp(result.log_append_time_ms)
    assert found == TimestampOffset(result.log_append_time_ms, 0, 0)


async def test_roll_by_size(make_log, produce, read_all):
    log = make_log(segment_bytes=1000)
    for i in range(20):
        await produce(log, vals(3, f"b{i}-", size=50))
    files = segment_files(log)
    assert len(files) > 3
    assert files[0] == f"{0:020d}.log"
    bases = [int(name[:-4]) for name in files]
    assert bases == sorted(bases) and all(b % 3 == 0 for b in bases)
    assert all((log.directory / f).stat().st_size <= 1000 for f in files)
    assert [r[0] for r in await read_all(log)] == list(range(60))
    await log.close()


async def test_roll_by_time_uses_record_timestamps(make_log, produce):
    log = make_log(segment_ms=1000)
    await produce(log, vals(2), timestamps=[T, T + 100])
    await produce(log, vals(2), timestamps=[T + 500, T + 900])
    assert len(segment_files(log)) == 1
    await produce(log, vals(2), timestamps=[T + 1200, T + 1300])
    assert segment_files(log) == [f"{0:020d}.log", f"{4:020d}.log"]


async def test_lookups_across_many_segments(make_log, produce, decode):
    log = make_log(segment_bytes=2000, index_interval_bytes=200)
    sizes = [1 + i % 3 for i in range(150)]
    for i, n in enumerate(sizes):
        await produce(log, vals(n, f"b{i}-", size=30))
    assert len(segment_files(log)) > 10
    assert any(p.stat().st_size > 0 for p in log.directory.glob("*.index"))

    async def check(log):
        end = log.log_end_offset
        for offset in range(0, end, 7):
            records = decode((await log.read(offset, 1)).records)
            assert records[0][0] <= offset <= records[-1][0]

    await check(log)
    await log.close()
    reopened = make_log(segment_bytes=2000, index_interval_bytes=200)
    assert reopened.log_end_offset == sum(sizes)
    await check(reopened)


async def test_offset_for_timestamp(make_log, produce):
    log = make_log(segment_bytes=600)
    for i in range(10):
        # Timestamps rise by 10 per record; within a batch they are not sorted.
        start = T + 30 * i
        await produce(log, vals(3, size=40), timestamps=[start + 20, start, start + 10])
    assert len(segment_files(log)) > 2
    assert await log.offset_for_timestamp(T - 5) == TimestampOffset(T + 20, 0, 0)
    # The first record, in offset order, whose timestamp is >= the target.
    assert await log.offset_for_timestamp(T + 95) == TimestampOffset(T + 110, 9, 0)
    assert await log.offset_for_timestamp(T + 100) == TimestampOffset(T + 110, 9, 0)
    assert await log.offset_for_timestamp(T + 111) == TimestampOffset(T + 140, 12, 0)
    assert await log.offset_for_timestamp(T + 290) == TimestampOffset(T + 290, 27, 0)
    assert await log.offset_for_timestamp(T + 291) is None
    assert await log.max_timestamp() == TimestampOffset(T + 290, 27, 0)

    # Records below the log start are not found, even inside a batch that holds it.
    await log.delete_records_before(10)
    assert await log.offset_for_timestamp(T) == TimestampOffset(T + 90, 10, 0)


async def test_offset_for_timestamp_with_large_records_and_deltas(make_log, produce):
    log = make_log()
    # Multi-byte varints: record lengths above 63 bytes, timestamp deltas of hours.
    hour = 3_600_000
    await produce(log, vals(200, size=300), timestamps=[T + hour * (i % 50) for i in range(200)])
    assert await log.offset_for_timestamp(T + 49 * hour) == TimestampOffset(T + 49 * hour, 49, 0)
    assert await log.offset_for_timestamp(T + 10 * hour + 1) == \
        TimestampOffset(T + 11 * hour, 11, 0)
    assert await log.max_timestamp() == TimestampOffset(T + 49 * hour, 49, 0)


async def test_offset_for_timestamp_in_compressed_batches_finds_the_record(make_log, produce):
    log = make_log()
    gzip = DefaultRecordBatch.CODEC_GZIP
    for start in (T, T + 100):
        await produce(log, vals(50, size=50), timestamps=[start + i for i in range(50)],
                      compression=gzip)
    assert len((await log.read(0, 1 << 20)).records) < 2000
    found = await log.offset_for_timestamp(T + 120)
    assert (found.offset, found.timestamp) == (70, T + 120)
    latest = await log.max_timestamp()
    assert (latest.offset, latest.timestamp) == (99, T + 149)


async def test_leader_epochs(make_log, produce):
    log = make_log()
    assert log.latest_epoch() == -1
    assert log.end_offset_for_epoch(0) == EpochEndOffset(-1, -1)
    await produce(log, vals(3), epoch=1)
    await produce(log, vals(3), epoch=1)
    await produce(log, vals(3), epoch=3)
    assert log.latest_epoch() == 3
    assert log.end_offset_for_epoch(3) == EpochEndOffset(3, 9)
    assert log.end_offset_for_epoch(2) == EpochEndOffset(1, 6)
    assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 6)
    assert log.end_offset_for_epoch(0) == EpochEndOffset(0, 0)
    assert log.end_offset_for_epoch(4) == EpochEndOffset(-1, -1)
    await log.close()
    reopened = make_log()
    assert reopened.end_offset_for_epoch(2) == EpochEndOffset(1, 6)


async def test_truncate_to(make_log, produce, read_all):
    log = make_log(segment_bytes=600)
    for i in range(10):  # epoch 0 from offset 0, 1 from 12, 2 from 24
        await produce(log, vals(3, f"b{i}-", size=40), epoch=i // 4)
    await log.truncate_to(27)
    assert log.log_end_offset == 27
    assert log.end_offset_for_epoch(2) == EpochEndOffset(2, 27)
    await log.truncate_to(100)  # above the end: nothing to do
    assert log.log_end_offset == 27

    before = len(segment_files(log))
    await log.truncate_to(13)  # inside the batch 12..14: the whole batch goes
    assert log.log_end_offset == 12
    assert len(segment_files(log)) < before
    assert [r[0] for r in await read_all(log)] == list(range(12))
    assert log.latest_epoch() == 0
    assert log.end_offset_for_epoch(1) == EpochEndOffset(-1, -1)

    result = await produce(log, vals(2, "new"), epoch=5)
    assert result.base_offset == 12
    assert [r[2] for r in await read_all(log, 12)] == [b"new0", b"new1"]
    assert log.end_offset_for_epoch(1) == EpochEndOffset(0, 12)
    await log.close()
    log = make_log(segment_bytes=600)
    assert [r[0] for r in await read_all(log)] == list(range(14))
    await log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.latest_epoch()) == (0, 0, -1)
    await log.close()


async def test_truncate_around_the_log_start(make_log, produce, read_all):
    log = make_log()
    for i in range(4):
        await produce(log, vals(5, f"b{i}-"))
    await log.delete_records_before(12)
    # Cutting the batch that holds the log start leaves an empty log starting there.
    await log.truncate_to(13)
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    await produce(log, vals(2))
    assert [r[0] for r in await read_all(log)] == [10, 11]
    # Below the log start, the log restarts at the truncation offset.
    await log.delete_records_before(12)
    await log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    assert (await produce(log, vals(1))).base_offset == 3


async def test_append_as_follower(make_log, produce, build_batch):
    leader = make_log("leader")
    await produce(leader, vals(3), epoch=2)
    await produce(leader, vals(4), epoch=4)
    fetched = (await leader.read(0, 1 << 20)).records

    follower = make_log("follower")
    # A fetch response may end in a partial batch, which is dropped.
    await follower.append_as_follower(fetched + fetched[:30])
    assert follower.log_end_offset == 7
    assert (await follower.read(0, 1 << 20)).records == fetched
    assert follower.end_offset_for_epoch(2) == EpochEndOffset(2, 3)
    assert follower.latest_epoch() == 4

    with pytest.raises(UnexpectedAppendOffset):
        await follower.append_as_follower(fetched)  # offsets 0.. again
    unassigned = build_batch(vals(2))  # base offset 0, not 7
    with pytest.raises(UnexpectedAppendOffset):
        await follower.append_as_follower(bytes(unassigned))
    assert follower.log_end_offset == 7


async def test_delete_records(make_log, produce, decode, read_all):
    log = make_log(segment_bytes=600)
    for i in range(10):
        await produce(log, vals(3, f"b{i}-", size=40))
    files = segment_files(log)
    assert await log.delete_records_before(16) == 16
    assert log.log_start_offset == 16
    # Segments wholly below the new log start are gone.
    remaining = segment_files(log)
    assert len(remaining) < len(files)
    assert int(remaining[0][:-4]) <= 16
    with pytest.raises(OffsetOutOfRange):
        await log.read(15, 1 << 20)
    # The log start lies inside the batch 15..17, which a read returns whole.
    assert decode((await log.read(16, 1 << 20)).records)[0][0] == 15
    assert (await log.read(16, 1 << 20)).log_start_offset == 16
    assert await log.delete_records_before(5) == 16  # never moves back
    await log.close()

    reopened = make_log(segment_bytes=600)
    assert reopened.log_start_offset == 16
    assert [r[0] for r in await read_all(reopened)] == list(range(16, 30))
    # Deleting everything keeps the log end; beyond it, the log restarts there (how a
    # follower catches up with a leader whose log starts above its end).
    assert await reopened.delete_records_before(30) == 30
    assert (reopened.log_start_offset, reopened.log_end_offset) == (30, 30)
    assert await reopened.delete_records_before(50) == 50
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 50)
    assert (await produce(reopened, vals(1))).base_offset == 50


async def test_retention_by_time(make_log, produce, read_all):
    log = make_log(segment_ms=1000, retention_ms=10_000)
    for i in range(6):  # one segment per batch: timestamps 2 s apart
        await produce(log, vals(2, f"b{i}-"), timestamps=[T + 2000 * i, T + 2000 * i + 1])
    assert len(segment_files(log)) == 6
    # Segments whose newest record is more than 10 s older than now are deleted.
    freed = await log.enforce_retention(T + 15_000)
    assert freed > 0
    assert log.log_start_offset == 6
    assert len(segment_files(log)) == 3
    assert [r[0] for r in await read_all(log)] == list(range(6, 12))
    # When everything expired, the active segment goes too but the log end stays.
    await log.enforce_retention(T + 100_000)
    assert (log.log_start_offset, log.log_end_offset) == (12, 12)
    assert (await log.read(12, 1 << 20)).records == b""
    assert (await produce(log, vals(1), timestamps=[T + 100_000])).base_offset == 12
    assert await log.enforce_retention(T + 100_000) == 0


async def test_retention_by_size(make_log, produce):
    log = make_log(segment_bytes=600)
    for i in range(10):
        await produce(log, vals(3, f"b{i}-", size=40), timestamps=[T, T, T])
    segments = segment_files(log)
    sizes = [(log.directory / name).stat().st_size for name in segments]
    total = sum(sizes)
    # Whole segments go only while the rest still holds retention.bytes.
    log.reconfigure(dataclasses.replace(log.config, retention_bytes=total - sizes[0] - 1))
    assert await log.enforce_retention(T) == sizes[0]
    assert segment_files(log) == segments[1:]
    assert log.log_start_offset == int(segments[1][:-4])
    assert await log.enforce_retention(T) == 0
    log.reconfigure(dataclasses.replace(log.config, retention_bytes=0))
    assert await log.enforce_retention(T) == total - sizes[0]
    assert (log.log_start_offset, log.log_end_offset) == (30, 30)


async def test_flush_messages_advances_the_recovery_point(make_log, produce):
    log = make_log(flush_messages=3)
    await produce(log, vals(2))
    assert not (log.directory / "recovery-point").exists()
    await produce(log, vals(2))
    assert (log.directory / "recovery-point").read_text().strip() == "4"


async def test_delete_removes_the_directory(make_log, produce):
    log = make_log()
    await produce(log, vals(2))
    await log.delete()
    assert not log.directory.exists()
    closed = make_log("closed")
    await produce(closed, vals(2))
    await closed.close()
    await closed.close()
    await closed.delete()
    assert not closed.directory.exists()


async def test_delete_records_up_to_the_log_end_deletes_the_active_segment(make_log, produce):
    # Kafka keeps the active segment; kipper deletes it too, so that DeleteRecords frees a
    # full disk whatever segment.bytes is.
    log = make_log()
    for i in range(5):
        await produce(log, vals(3, f"b{i}-", size=1000))
    assert await log.delete_records_before(15) == 15
    assert log.size_bytes == 0
    assert segment_files(log) == [f"{15:020d}.log"]
    assert (await produce(log, vals(1))).base_offset == 15


def _no_space(*args) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_delete_records_deletes_segments_before_its_checkpoint(make_log, produce,
                                                                      monkeypatch):
    # On a full disk the log-start checkpoint can only be written once segments are gone.
    log = make_log(segment_bytes=600)
    for i in range(10):
        await produce(log, vals(3, f"b{i}-", size=40))
    full = len(segment_files(log))
    write_offset = classic_log.write_offset
    monkeypatch.setattr(classic_log, "write_offset", lambda path, offset: (
        _no_space() if len(segment_files(log)) == full else write_offset(path, offset)))
    assert await log.delete_records_before(16) == 16
    await log.close()
    assert make_log(segment_bytes=600).log_start_offset == 16


async def test_delete_records_that_cannot_be_made_durable_is_refused(make_log, produce,
                                                                     monkeypatch):
    log = make_log(segment_bytes=600)
    for i in range(10):
        await produce(log, vals(3, f"b{i}-", size=40))
    monkeypatch.setattr(classic_log, "write_offset", _no_space)
    with pytest.raises(DiskFull):
        await log.delete_records_before(16)
    # What was deleted stays deleted; the rest is still readable and a retry writes it.
    first_segment = int(segment_files(log)[0][:-4])
    assert log.log_start_offset == first_segment < 16
    assert (await log.read(first_segment, 1 << 20)).records
    monkeypatch.undo()
    assert await log.delete_records_before(16) == 16
    await log.close()
    assert make_log(segment_bytes=600).log_start_offset == 16
