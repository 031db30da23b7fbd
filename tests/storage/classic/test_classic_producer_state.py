"""Idempotent-producer state inside the classic log: checked on append, kept across a
clean restart and rebuilt after a crash. Batches are built by kafka-python's codec."""

from __future__ import annotations

import pytest

from protocol.records import validate_produce_records
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.producer_state import InvalidProducerEpoch, OutOfOrderSequence
from support.batches import T0, build_batch

PID = 4242


def idempotent_batch(seq: int, count: int = 2, *, epoch: int = 0) -> bytearray:
    return build_batch([b"x" * 100 + str(seq + i).encode() for i in range(count)],
                       producer_id=PID, producer_epoch=epoch, base_sequence=seq)


async def append(log: ClassicLog, seq: int, count: int = 2, *, epoch: int = 0) -> tuple[int, int]:
    records = idempotent_batch(seq, count, epoch=epoch)
    result = await log.append(records, validate_produce_records(records), 0)
    return result.base_offset, result.last_offset


@pytest.fixture
def open_log(tmp_path):
    def open_(**config) -> ClassicLog:
        return ClassicLog("t", 0, LogConfig(**config), tmp_path / "t-0")
    return open_


async def test_retry_returns_original_offsets_without_writing(open_log):
    log = open_log()
    assert await append(log, 0) == (0, 1)
    assert await append(log, 2) == (2, 3)
    assert await append(log, 0) == (0, 1)
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequence):
        await append(log, 7)
    assert log.log_end_offset == 4


async def test_bumped_epoch_fences_the_old_one(open_log):
    log = open_log()
    await append(log, 0, epoch=0)
    assert await append(log, 0, epoch=1) == (2, 3)
    with pytest.raises(InvalidProducerEpoch):
        await append(log, 2, epoch=0)
    assert log.log_end_offset == 4


async def test_state_survives_a_clean_restart(open_log):
    log = open_log()
    for seq in range(0, 10, 2):
        await append(log, seq)
    await log.close()
    reopened = open_log()
    assert await append(reopened, 6) == (6, 7)
    assert await append(reopened, 10) == (10, 11)


async def test_state_is_rebuilt_from_the_log_after_a_crash(open_log):
    log = open_log()
    for seq in range(0, 10, 2):
        await append(log, seq)
    crashed = open_log()  # never closed, never flushed: no snapshot at all
    assert await append(crashed, 8) == (8, 9)
    with pytest.raises(OutOfOrderSequence):
        await append(crashed, 12)


async def test_roll_snapshot_plus_replayed_tail_after_a_crash(open_log, tmp_path):
    log = open_log(segment_bytes=600)
    for seq in range(0, 40, 2):
        await append(log, seq)
    snapshot_offset = int((tmp_path / "t-0" / "producer-state").read_text().split()[0])
    assert 0 < snapshot_offset < log.log_end_offset
    crashed = open_log(segment_bytes=600)
    assert await append(crashed, 36) == (36, 37)
    assert await append(crashed, 40) == (40, 41)


async def test_damaged_snapshot_falls_back_to_the_log(open_log, tmp_path):
    log = open_log()
    for seq in range(0, 6, 2):
        await append(log, seq)
    await log.close()
    (tmp_path / "t-0" / "producer-state").write_text("3 not-base64!\n")
    reopened = open_log()
    assert await append(reopened, 4) == (4, 5)


@pytest.mark.parametrize("lost", ["older", "torn"])
async def test_a_crash_that_lost_flushs_checkpoint_writes_recovers_every_flushed_batch(
        open_log, tmp_path, read_all, lost):
    """``flush`` writes the recovery point and the producer snapshot after the batches are
    durable, without fsyncing them: a crash may leave the ones of an earlier flush, or torn
    files. Every flushed batch, and the producers' state, is recovered all the same."""
    directory = tmp_path / "t-0"
    log = open_log(segment_bytes=600)
    for seq in range(0, 10, 2):
        await append(log, seq)
    await log.flush()
    checkpoints = ("recovery-point", "producer-state")
    earlier = {name: (directory / name).read_bytes() for name in checkpoints}
    for seq in range(10, 40, 2):
        await append(log, seq)
    await log.flush()
    end = log.log_end_offset
    assert int(earlier["recovery-point"]) < end and len(list(directory.glob("*.log"))) > 2
    expected = await read_all(log)
    for name in checkpoints:  # what the crash left of the last flush's writes
        (directory / name).write_bytes(earlier[name] if lost == "older" else b"")

    crashed = open_log(segment_bytes=600)  # never closed
    assert crashed.log_end_offset == end
    assert await read_all(crashed) == expected
    assert await append(crashed, 38) == (end - 2, end - 1)  # a retry: its original offsets
    assert await append(crashed, 40) == (end, end + 1)
    with pytest.raises(OutOfOrderSequence):
        await append(crashed, 50)


async def test_follower_learns_producer_state_from_replicated_batches(open_log, tmp_path):
    leader = open_log()
    for seq in range(0, 6, 2):
        await append(leader, seq)
    follower = ClassicLog("t", 0, LogConfig(), tmp_path / "follower")
    await follower.append_as_follower((await leader.read(0, 1 << 20)).records)
    # Promoted, the follower recognises a retry of a batch the old leader stored.
    assert await append(follower, 4) == (4, 5)
    assert follower.log_end_offset == 6


async def test_truncated_batches_are_forgotten_also_after_a_crash(open_log):
    log = open_log()
    for seq in range(0, 6, 2):
        await append(log, seq)
    await log.flush()  # a snapshot that still includes the batch about to be cut
    await log.truncate_to(4)
    assert await append(log, 4) == (4, 5)  # stored again, not taken for a retry
    assert log.log_end_offset == 6
    crashed = open_log()
    assert await append(crashed, 6) == (6, 7)


async def test_an_idle_producer_expires_and_may_start_anew(open_log):
    log = open_log()
    await append(log, 0)
    # Its last write is stamped T0 + 1 (the batch's max timestamp, as Kafka).
    assert log.expire_producers(now_ms=T0 + 1000, expiration_ms=1000) == 0
    assert log.expire_producers(now_ms=T0 + 1001, expiration_ms=1000) == 1
    assert log.active_producers() == []
    # Forgotten, its next batch starts a new entry whatever its sequence (as Kafka since
    # KIP-360), and the next snapshot leaves the old one out.
    assert await append(log, 40) == (2, 3)
    await log.close()
    assert [p.last_sequence for p in open_log().active_producers()] == [41]
