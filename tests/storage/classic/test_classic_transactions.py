"""Transactions inside the classic log (and so the active-tiered one): markers appended as
control batches close transactions; the last stable offset and the aborted-transaction index
are the same on a follower, after a crash and after a truncation, and the index is trimmed
with the log. Data batches are built by kafka-python's codec, markers by kipper's (the broker
writes them)."""

from __future__ import annotations

import pytest

from protocol.records import TxnMarker, build_marker_batch, iter_batches, validate_produce_records
from storage.append_rules import AppendOrigin
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.producer_state import AbortedTransaction
from support.batches import build_batch

PID = 77


@pytest.fixture
def open_log(tmp_path):
    def open_(name: str = "t-0", **config) -> ClassicLog:
        return ClassicLog("t", 0, LogConfig(**config), tmp_path / name)
    return open_


async def produce(log: ClassicLog, seq: int, count: int = 2) -> int:
    records = build_batch([b"v" * 50] * count, producer_id=PID, producer_epoch=0,
                          base_sequence=seq, transactional=True)
    return (await log.append(records, validate_produce_records(records), 0)).base_offset


async def end_transaction(log: ClassicLog, commit: bool) -> int:
    records = build_marker_batch(TxnMarker(PID, 0, commit, 0), 5)
    result = await log.append(records, list(iter_batches(records)), 0, AppendOrigin.COORDINATOR)
    return result.base_offset


async def committed_then_aborted_then_open(log: ClassicLog) -> tuple[int, int, int]:
    await produce(log, 0)
    await end_transaction(log, commit=True)
    aborted_first = await produce(log, 2)
    abort_marker = await end_transaction(log, commit=False)
    open_first = await produce(log, 4)
    return aborted_first, abort_marker, open_first


def transactions(log: ClassicLog) -> tuple[int, list[AbortedTransaction]]:
    return (log.last_stable_offset(log.log_end_offset),
            log.aborted_transactions(0, log.log_end_offset))


async def test_markers_close_transactions_and_index_aborts(open_log):
    log = open_log()
    aborted_first, abort_marker, open_first = await committed_then_aborted_then_open(log)
    assert transactions(log) == (open_first, [AbortedTransaction(PID, aborted_first, abort_marker)])
    assert log.aborted_transactions(0, aborted_first) == []


async def test_follower_and_crash_recovery_agree_with_the_leader(open_log):
    leader = open_log()
    await committed_then_aborted_then_open(leader)
    follower = open_log("follower")
    await follower.append_as_follower((await leader.read(0, 1 << 20)).records)
    assert transactions(follower) == transactions(leader)
    crashed = open_log()  # never closed nor flushed: rebuilt from the segments
    assert transactions(crashed) == transactions(leader)
    await leader.close()
    assert transactions(open_log()) == transactions(leader)


async def test_truncation_forgets_markers_above_the_cut(open_log):
    log = open_log()
    aborted_first, abort_marker, _ = await committed_then_aborted_then_open(log)
    await log.flush()
    await log.truncate_to(abort_marker)
    # The aborted transaction is open again: its marker was cut.
    assert transactions(log) == (aborted_first, [])


async def test_the_abort_index_is_trimmed_with_the_log(open_log):
    log = open_log(segment_bytes=300)
    _, abort_marker, _ = await committed_then_aborted_then_open(log)
    await log.delete_records_before(abort_marker + 1)
    assert log.aborted_transactions(0, log.log_end_offset) == []


async def test_decided_transactions_are_forgotten_as_the_high_watermark_passes(open_log):
    log = open_log()
    await committed_then_aborted_then_open(log)
    follower = open_log("follower")
    await follower.append_as_follower((await log.read(0, 1 << 20)).records)
    # Decided transactions bound the LSO until the high watermark passes their markers.
    assert follower.last_stable_offset(1) == 0
    follower.on_high_watermark_updated(follower.log_end_offset)
    # Forgotten: only the open transaction (from offset 6) is left to bound it.
    assert follower.last_stable_offset(1) == 1
