"""Crash recovery of the classic log: a log that was not closed is reopened the way a
restarted broker would, after its files were damaged the way a crash damages them."""

from __future__ import annotations

import os

from storage.classic.leader_epoch import LEADER_EPOCH_FILE
from storage.classic.local_log import CLEAN_SHUTDOWN_FILE
from storage.log import EpochEndOffset

SEGMENT_BYTES = 700


def vals(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode().ljust(40, b".") for i in range(n)]


async def fill(make_log, produce, batches: int = 5, **config):
    log = make_log(**config)
    for i in range(batches):
        await produce(log, vals(3, f"b{i}-"), epoch=i // 2)
    return log


def active_file(log):
    return max(log.directory.glob("*.log"))


def batch_starts(path) -> list[int]:
    data = path.read_bytes()
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += int.from_bytes(data[position + 8:position + 12], "big") + 12
    return starts


async def test_torn_tail_is_cut_and_everything_before_kept(make_log, produce, read_all):
    log = await fill(make_log, produce)
    expected = await read_all(log)
    path = active_file(log)
    last_start = batch_starts(path)[-1]
    # The crash tore the last write: part of the last batch never reached the disk.
    os.truncate(path, path.stat().st_size - 7)
    assert not (log.directory / CLEAN_SHUTDOWN_FILE).exists()

    reopened = make_log()
    assert reopened.log_end_offset == 12
    assert path.stat().st_size == last_start
    assert await read_all(reopened) == expected[:12]
    assert (await produce(reopened, vals(1, "after"))).base_offset == 12
    assert (await read_all(reopened, 12))[0][2] == vals(1, "after")[0]


async def test_corrupt_batch_fails_its_crc_and_is_cut(make_log, produce, read_all):
    log = await fill(make_log, produce)
    expected = await read_all(log)
    path = active_file(log)
    starts = batch_starts(path)
    with open(path, "r+b") as f:  # one flipped byte in the records of the next-to-last batch
        f.seek(starts[-2] + 70)
        byte = f.read(1)
        f.seek(starts[-2] + 70)
        f.write(bytes([byte[0] ^ 0xFF]))

    reopened = make_log()
    assert reopened.log_end_offset == 9
    assert await read_all(reopened) == expected[:9]


async def test_garbage_after_the_last_batch_is_cut(make_log, produce, read_all):
    log = await fill(make_log, produce)
    expected = await read_all(log)
    path = active_file(log)
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\0" * 100)

    reopened = make_log()
    assert path.stat().st_size == size
    assert await read_all(reopened) == expected


async def test_clean_close_reopens_without_recovery(make_log, produce, read_all):
    log = await fill(make_log, produce, segment_bytes=SEGMENT_BYTES)
    expected = await read_all(log)
    await log.close()
    assert (log.directory / CLEAN_SHUTDOWN_FILE).exists()

    reopened = make_log(segment_bytes=SEGMENT_BYTES)
    assert not (log.directory / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 15)
    assert await read_all(reopened) == expected
    assert reopened.end_offset_for_epoch(1) == EpochEndOffset(1, 12)
    assert (await produce(reopened, vals(1))).base_offset == 15

    # The marker is trusted: a clean log is not CRC-checked on open.
    await reopened.close()
    path = active_file(reopened)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    assert make_log(segment_bytes=SEGMENT_BYTES).log_end_offset == 16


async def test_only_segments_past_the_recovery_point_are_recovered(make_log, produce, read_all):
    log = await fill(make_log, produce, batches=9, segment_bytes=SEGMENT_BYTES)
    await log.flush()
    assert (log.directory / "recovery-point").read_text().strip() == "27"
    for i in range(6):
        await produce(log, vals(3, f"c{i}-"), epoch=5)
    expected = await read_all(log)
    segments = sorted(log.directory.glob("*.log"))
    assert len(segments) >= 4
    # Damage the first segment after the recovery point: it is cut, and every later
    # segment is dropped since its offsets no longer follow on.
    unflushed = [p for p in segments if int(p.stem) >= 27]
    assert len(unflushed) >= 2
    os.truncate(unflushed[0], batch_starts(unflushed[0])[1] + 10)

    reopened = make_log(segment_bytes=SEGMENT_BYTES)
    first_unflushed_batch_end = int(unflushed[0].stem) + 3
    assert reopened.log_end_offset == first_unflushed_batch_end
    assert sorted(log.directory.glob("*.log")) == [p for p in segments if p <= unflushed[0]]
    assert await read_all(reopened) == expected[:first_unflushed_batch_end]
    assert reopened.latest_epoch() == 5


async def test_missing_or_inconsistent_indexes_are_rebuilt(make_log, produce, decode, read_all):
    log = await fill(make_log, produce, batches=40, segment_bytes=4000, index_interval_bytes=100)
    expected = await read_all(log)
    await log.close()
    indexes = sorted(log.directory.glob("*.index"))
    assert all(p.stat().st_size > 0 for p in indexes)
    indexes[0].unlink()
    orphan = log.directory / f"{999:020d}.index"
    orphan.write_bytes(b"\0" * 8)
    indexes[1].write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07")  # points into a batch
    with open(log.directory / f"{0:020d}.timeindex", "ab") as f:
        f.write(b"\x01\x02\x03")  # not a whole entry

    reopened = make_log(segment_bytes=4000, index_interval_bytes=100)
    assert not orphan.exists()  # an index without its log is dropped
    for offset in range(0, 120, 5):
        records = decode((await reopened.read(offset, 1)).records)
        assert records[0][0] <= offset <= records[-1][0]
    assert await read_all(reopened) == expected
    await reopened.close()
    assert indexes[0].stat().st_size > 0 and indexes[1].stat().st_size > 8


async def test_leader_epochs_are_rebuilt_from_recovered_batches(make_log, produce):
    log = await fill(make_log, produce, batches=6)
    (log.directory / LEADER_EPOCH_FILE).unlink(missing_ok=True)  # lost, or never written (appends leave it to flush)

    reopened = make_log()
    assert reopened.latest_epoch() == 2
    assert reopened.end_offset_for_epoch(0) == EpochEndOffset(0, 6)
    assert reopened.end_offset_for_epoch(1) == EpochEndOffset(1, 12)


async def test_log_start_offset_survives_a_crash(make_log, produce, read_all):
    log = await fill(make_log, produce, segment_bytes=SEGMENT_BYTES)
    await log.delete_records_before(7)

    reopened = make_log(segment_bytes=SEGMENT_BYTES)
    assert reopened.log_start_offset == 7
    assert [r[0] for r in await read_all(reopened)] == list(range(7, 15))
    # The epochs before the log start are forgotten; epoch 1 now starts at 7.
    assert reopened.end_offset_for_epoch(0) == EpochEndOffset(0, 7)
    assert reopened.end_offset_for_epoch(1) == EpochEndOffset(1, 12)


def loaded(log) -> list[bool]:
    return [segment.indexes_loaded for segment in log._local.segments]


async def test_a_clean_log_reads_the_indexes_of_a_sealed_segment_when_it_is_first_used(
        make_log, produce, read_all):
    log = await fill(make_log, produce, batches=12, segment_bytes=SEGMENT_BYTES)
    expected = await read_all(log)
    by_timestamp = await log.offset_for_timestamp(expected[20][1])
    newest = await log.max_timestamp()
    await log.close()
    sealed = sorted(log.directory.glob("*index"))[:-2]  # the active segment's two last
    sealed_files = {p: p.read_bytes() for p in sealed}

    # Reopened and closed without use: the sealed segments' files are as they were.
    await make_log(segment_bytes=SEGMENT_BYTES).close()
    assert {p: p.read_bytes() for p in sealed} == sealed_files

    reopened = make_log(segment_bytes=SEGMENT_BYTES)
    # Only the active segment is read on open (Kafka's LazyIndex): the others wait.
    assert len(loaded(reopened)) >= 4
    assert loaded(reopened) == [False] * (len(loaded(reopened)) - 1) + [True]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 36)
    assert await read_all(reopened, 4) == expected[4:]
    assert await reopened.offset_for_timestamp(expected[20][1]) == by_timestamp
    assert await reopened.max_timestamp() == newest
    assert all(loaded(reopened))


async def test_after_a_crash_the_segments_below_the_recovery_point_are_lazy_and_the_rest_recovered(
        make_log, produce, read_all):
    log = await fill(make_log, produce, batches=9, segment_bytes=SEGMENT_BYTES)
    await log.flush()  # recovery point 27
    for i in range(3):
        await produce(log, vals(3, f"c{i}-"), epoch=5)
    expected = await read_all(log)
    path = active_file(log)
    os.truncate(path, path.stat().st_size - 7)  # kill -9 tore the last write

    reopened = make_log(segment_bytes=SEGMENT_BYTES)
    bases = [segment.base_offset for segment in reopened._local.segments]
    holding_recovery_point = max(base for base in bases if base <= 27)
    assert bases[0] < holding_recovery_point
    assert loaded(reopened) == [base >= holding_recovery_point for base in bases]
    assert reopened.log_end_offset == 33
    assert await read_all(reopened) == expected[:33]
    assert reopened.latest_epoch() == 5
