"""The log cleaner on classic logs (active-tiered ones are classic logs underneath): dedupe,
tombstones and their delete horizon, compaction lags, transactions, the empty batch that
keeps a producer's sequence, segment merging, and crash safety of the segment swap (a
leftover .cleaned or .swap file; a kill -9 of a process in the middle of a cleaning)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.batches import build_batch

from protocol.records import (
    InvalidRecordBatch,
    TxnMarker,
    build_marker_batch,
    iter_batches,
    validate_produce_records,
)
from storage.append_rules import AppendOrigin
from storage.classic import ClassicLog
from storage.classic.local_log import LocalLog
from storage.config import LogConfig
from storage.log_cleaner import CHECKPOINT_FILE, CleanerSettings, LogCleaner
from storage.producer_state import OutOfOrderSequence

COMPACT = {"compact": True, "delete_policy": False, "segment_bytes": 400,
           "min_cleanable_dirty_ratio": 0.01}


def open_log(directory: Path, **config) -> ClassicLog:
    return ClassicLog("t", 0, LogConfig(**{**COMPACT, **config}), directory)


async def put(log: ClassicLog, key: bytes, value: bytes | None, **batch) -> int:
    records = build_batch([value], keys=[key], first_timestamp=time.time_ns() // 1_000_000,
                          **batch)
    result = await log.append(records, validate_produce_records(records), 0)
    log.on_high_watermark_updated(log.log_end_offset)
    return result.base_offset


async def marker(log: ClassicLog, producer_id: int, commit: bool) -> None:
    records = build_marker_batch(TxnMarker(producer_id, 0, commit, 0), 5)
    await log.append(records, list(iter_batches(records)), 0, AppendOrigin.COORDINATOR)
    log.on_high_watermark_updated(log.log_end_offset)


async def clean(log: ClassicLog, dedupe_buffer_size: int = 1 << 20) -> bool:
    """Roll, so that everything written is below the active segment, and clean once."""
    log._local.roll()
    cleaner = LogCleaner(log.directory.parent, lambda: {("t", 0): log},
                         CleanerSettings(dedupe_buffer_size=dedupe_buffer_size))
    return await cleaner.clean_filthiest()


async def contents(log: ClassicLog) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of every record a consumer reads from the log start."""
    from kafka.record.memory_records import MemoryRecords
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = await log.read(offset, 1 << 20)
        if not result.records:
            break
        last = offset
        for batch in MemoryRecords(bytes(result.records)):
            batch.validate_crc()
            for record in batch:
                if record.offset >= offset:
                    out[record.offset] = (record.key, record.value)
            last = max(last, batch.next_offset if hasattr(batch, "next_offset")
                       else batch.base_offset + batch.last_offset_delta + 1)
        offset = last
    return out


def latest_per_key(writes: list[tuple[int, bytes, bytes | None]]) -> dict[int, tuple]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in writes:
        latest[key] = (offset, value)
    return {offset: (key, value) for key, (offset, value) in latest.items()}


async def test_dedupe_keeps_the_latest_value_of_each_key_at_its_offset(tmp_path):
    log = open_log(tmp_path / "t-0")
    writes = []
    for version in range(5):
        for k in range(10):
            key, value = b"k%d" % k, b"v%d-%d" % (k, version)
            writes.append((await put(log, key, value), key, value))
    size_before = log.size_bytes
    assert await clean(log)
    assert await contents(log) == latest_per_key(writes)
    assert log.size_bytes < size_before / 2
    assert log.log_end_offset == 50
    assert "t 0 50" in (tmp_path / CHECKPOINT_FILE).read_text()
    assert not await clean(log)  # nothing dirty left


async def test_the_metrics_follow_the_cleanings(tmp_path):
    log = open_log(tmp_path / "t-0", min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=1)
    for version in range(5):
        for k in range(10):
            await put(log, b"k%d" % k, b"v%d-%d" % (k, version))
    log._local.roll()
    size_before = log.size_bytes
    cleaner = LogCleaner(tmp_path, lambda: {("t", 0): log}, CleanerSettings())
    metrics = cleaner.metrics
    assert (metrics.cleanings, metrics.time_since_last_run_s()) == (0, 0.0)
    await asyncio.sleep(0.01)
    assert await cleaner.clean_filthiest()
    assert metrics.cleanings == 1 and metrics.failures == 0
    assert metrics.max_dirty_ratio == 1.0  # nothing was clean at the selection
    assert metrics.max_compaction_delay_s > 0  # max.compaction.lag.ms is 1 ms
    assert metrics.totals.bytes_read >= size_before
    assert metrics.totals.records_removed == 40
    assert 0 < metrics.last_recopy_ratio < 0.5
    assert metrics.last_recopy_ratio == metrics.totals.bytes_written / metrics.totals.bytes_read
    assert 0 < metrics.last_buffer_utilization < 1
    assert metrics.last_clean_s > 0
    assert not await cleaner.clean_filthiest()
    assert (metrics.max_dirty_ratio, metrics.max_compaction_delay_s) == (0.0, 0.0)
    assert metrics.cleanings == 1 and metrics.time_since_last_run_s() > 0


async def test_small_offset_map_cleans_in_passes(tmp_path):
    log = open_log(tmp_path / "t-0")
    writes = []
    for version in range(3):
        for k in range(40):
            key, value = b"k%02d" % k, b"v%d" % version
            writes.append((await put(log, key, value), key, value))
    log._local.roll()
    cleaner = LogCleaner(tmp_path, lambda: {("t", 0): log},
                         CleanerSettings(dedupe_buffer_size=24 * 12))  # 10 keys a pass
    passes = 0
    while await cleaner.clean_filthiest():
        passes += 1
    assert passes > 1
    assert await contents(log) == latest_per_key(writes)


async def test_tombstones_stay_until_delete_retention_after_their_segment_was_cleaned(tmp_path):
    log = open_log(tmp_path / "t-0", delete_retention_ms=3_600_000)
    for k in range(4):
        await put(log, b"k%d" % k, b"v")
    for k in range(2):
        await put(log, b"k%d" % k, None)
    await clean(log)
    tombstones = {o: kv for o, kv in (await contents(log)).items() if kv[1] is None}
    assert sorted(kv[0] for kv in tombstones.values()) == [b"k0", b"k1"]
    await put(log, b"k3", b"newer")
    await clean(log)  # cleaned an hour ago? no: the tombstones stay
    assert len([kv for kv in (await contents(log)).values() if kv[1] is None]) == 2

    # The horizon passes: an hour after the cleaning (the segments' mtime) they go.
    for segment in log._local.segments[:-1]:
        segment.set_modified_ms(time.time_ns() // 1_000_000 - 3_600_001)
    await put(log, b"k3", b"newest")
    await clean(log)
    assert {kv for kv in (await contents(log)).values()} == {(b"k2", b"v"), (b"k3", b"newest")}


async def test_min_compaction_lag_spares_recent_records(tmp_path):
    log = open_log(tmp_path / "t-0", min_compaction_lag_ms=3_600_000)
    for version in range(3):
        await put(log, b"k", b"v%d" % version)
    assert not await clean(log)
    assert len(await contents(log)) == 3


async def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path):
    for max_lag, cleaned in ((2**63 - 1, False), (1, True)):
        log = open_log(tmp_path / f"lag{max_lag}", min_cleanable_dirty_ratio=0.99,
                       max_compaction_lag_ms=max_lag)
        for k in range(20):
            await put(log, b"k%d" % k, b"v" * 20)
        await clean(log)  # all dirty: ratio 1
        await put(log, b"k0", b"again")
        await asyncio.sleep(0.01)
        assert await clean(log) == cleaned


async def test_aborted_records_go_and_markers_once_their_data_is_gone(tmp_path):
    log = open_log(tmp_path / "t-0", delete_retention_ms=0)
    await put(log, b"k", b"committed-0", producer_id=7, producer_epoch=0, base_sequence=0,
              transactional=True)
    await marker(log, 7, commit=True)
    await put(log, b"k", b"aborted", producer_id=8, producer_epoch=0, base_sequence=0,
              transactional=True)
    await marker(log, 8, commit=False)
    # Producer 8's last batch is a later one: the aborted batch need not stay empty.
    await put(log, b"other", b"x", producer_id=8, producer_epoch=0, base_sequence=1)
    await clean(log)
    values = [kv[1] for kv in (await contents(log)).values()]
    # The aborted value neither survives nor hides the committed one.
    assert b"committed-0" in values and b"aborted" not in values
    assert log.aborted_transactions(0, log.log_end_offset)  # read_committed still told

    await put(log, b"other", b"y")
    await clean(log)  # second pass: past the (zero) delete horizon
    segments_batches = [b for s in log._local.segments for b in _batches(s)]
    assert not any(b.is_control and b.producer_id == 8 for b in segments_batches)
    # The committed transaction's marker stays while its record does.
    assert any(b.is_control and b.producer_id == 7 for b in segments_batches)


def _batches(segment):
    return list(iter_batches(segment.read(0, segment.size)))


async def test_nothing_at_or_above_an_open_transaction_is_cleaned(tmp_path):
    log = open_log(tmp_path / "t-0")
    await put(log, b"k", b"v0")
    first_open = await put(log, b"t", b"open", producer_id=9, producer_epoch=0, base_sequence=0,
                           transactional=True)
    for version in range(1, 4):
        await put(log, b"k", b"v%d" % version)
    await clean(log)
    assert [o for o, kv in (await contents(log)).items() if kv[0] == b"k"] == [0, 2, 3, 4]
    assert first_open == 1


async def test_a_producers_last_batch_survives_empty(tmp_path):
    directory = tmp_path / "t-0"
    log = open_log(directory)
    await put(log, b"k", b"idempotent", producer_id=5, producer_epoch=0, base_sequence=0)
    await put(log, b"k", b"plain")
    await clean(log)
    assert [kv[1] for kv in (await contents(log)).values()] == [b"plain"]
    empty = [b for b in _batches(log._local.segments[0]) if b.producer_id == 5]
    assert len(empty) == 1 and empty[0].record_count == 0
    await log.close()
    (directory / "producer-state").unlink()  # rebuilt from the log
    log = open_log(directory)
    assert log.producer(5).last_sequence == 0
    with pytest.raises(OutOfOrderSequence):
        await put(log, b"k", b"gap", producer_id=5, producer_epoch=0, base_sequence=2)
    await put(log, b"k", b"next", producer_id=5, producer_epoch=0, base_sequence=1)


async def test_small_segments_are_merged(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=2000)
    for version in range(6):
        for k in range(5):
            await put(log, b"k%d" % k, b"v%d" % version)
            log._local.roll()
    before = len(log._local.segments)
    await clean(log)
    assert len(log._local.segments) < before / 5
    assert len(await contents(log)) == 5


async def test_compacted_topics_refuse_keyless_records(tmp_path):
    log = open_log(tmp_path / "t-0")
    records = build_batch([b"no key"])
    with pytest.raises(InvalidRecordBatch, match="without a key"):
        await log.append(records, validate_produce_records(records), 0)


async def test_a_compact_only_topic_ignores_time_retention(tmp_path):
    log = open_log(tmp_path / "t-0", retention_ms=1)
    for k in range(20):
        await put(log, b"k%d" % k, b"v" * 30)
    assert await log.enforce_retention(time.time_ns() // 1_000_000 + 10_000) == 0


async def test_leftover_cleaned_and_swap_files_are_resolved_on_open(tmp_path, monkeypatch):
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=2000)
    writes = []
    for version in range(4):
        for k in range(6):
            writes.append((await put(log, b"k%d" % k, b"v%d" % version), b"k%d" % k,
                           b"v%d" % version))
            log._local.roll()
    expected = latest_per_key(writes)
    every = await contents(log)

    # A crash once the swap file is durable, before the old segments are gone.
    def crash_after_swap(self, old, cleaned):
        cleaned.rename(".swap")
        raise SystemExit("crash")
    monkeypatch.setattr(LocalLog, "replace_segments", crash_after_swap)
    with pytest.raises(SystemExit):
        await clean(log)
    assert list(directory.glob("*.log.swap"))
    monkeypatch.undo()
    log = open_log(directory, segment_bytes=2000)
    assert not list(directory.glob("*.swap"))
    assert await contents(log) == expected

    # A .cleaned file is an unfinished rewrite: deleted, the log as it was.
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    log = open_log(directory, segment_bytes=2000)
    assert not list(directory.glob("*.cleaned"))
    assert await contents(log) == expected
    assert set(expected) <= set(every)


_CLEAN_SLOWLY = """
import asyncio, sys
sys.path[:0] = {paths!r}
from pathlib import Path
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.log_cleaner import CleanerSettings, LogCleaner
config = LogConfig(**{config!r})
log = ClassicLog("t", 0, config, Path({directory!r}))
log.on_high_watermark_updated(log.log_end_offset)
cleaner = LogCleaner(Path({directory!r}).parent, lambda: {{("t", 0): log}},
                     CleanerSettings(io_max_bytes_per_second=lambda: 100_000))
asyncio.run(cleaner.clean_filthiest())
"""


def _log_bytes(directory: Path) -> int:
    total = 0
    for path in directory.glob("*.log"):
        with contextlib.suppress(FileNotFoundError):  # swapped away since the listing
            total += path.stat().st_size
    return total


def _writing(directory: Path, bytes_before: int) -> bool:
    return bool(list(directory.glob("*.cleaned")))


def _swapped_some(directory: Path, bytes_before: int) -> bool:
    return _log_bytes(directory) < bytes_before


def _kill_9_when(moment, directory: Path, script: str) -> None:
    """Run ``script`` in a process, SIGKILL it once ``moment`` is seen in ``directory``."""
    bytes_before = _log_bytes(directory)
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not moment(directory, bytes_before) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert moment(directory, bytes_before) and process.poll() is None
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()


async def test_a_swap_cut_between_its_files_leaves_no_swap_file(tmp_path):
    """A crash between renaming a cleaned segment's log file out of .swap and its index
    files: the stray index files go, and the segment's indexes are rebuilt."""
    directory = tmp_path / "t-0"
    log = ClassicLog("t", 0, LogConfig(**COMPACT), directory)
    writes = [(await put(log, b"k%d" % i, b"v%d" % i), b"k%d" % i, b"v%d" % i)
              for i in range(20)]
    await log.close()
    first = min(directory.glob("*.log"))
    for index in (first.with_suffix(".index"), first.with_suffix(".timeindex")):
        index.rename(index.with_name(index.name + ".swap"))
    log = ClassicLog("t", 0, LogConfig(**COMPACT), directory)
    assert not list(directory.glob("*.swap"))
    assert await contents(log) == latest_per_key(writes)


@pytest.mark.parametrize("moment", [_writing, _swapped_some])
async def test_kill_9_during_cleaning_leaves_a_correct_log(tmp_path, moment):
    directory = tmp_path / "t-0"
    config = {**COMPACT, "segment_bytes": 20_000}
    log = ClassicLog("t", 0, LogConfig(**config), directory)
    writes = []
    for version in range(10):
        for k in range(300):
            key, value = b"k%03d" % k, b"v%d-" % version + b"x" * 40
            writes.append((await put(log, key, value), key, value))
    log._local.roll()
    await log.close()
    _kill_9_when(moment, directory, _CLEAN_SLOWLY.format(
        paths=sys.path, config=config, directory=str(directory)))
    log = ClassicLog("t", 0, LogConfig(**config), directory)
    log.on_high_watermark_updated(log.log_end_offset)
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    got = await contents(log)
    latest = latest_per_key(writes)
    # Every latest value is there at its offset; anything else is an older version.
    assert {o: kv for o, kv in got.items() if o in latest} == latest
    assert log.log_end_offset == len(writes)
    await clean(log)
    assert await contents(log) == latest
