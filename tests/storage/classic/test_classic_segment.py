"""LogSegment on its own: index layout and density, lookups, truncation, load checks, and
the budget of open segment files (storage/classic/open_files.py)."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from protocol.records import assign_offsets, validate_produce_records
from storage.classic import segment as segment_module
from storage.classic.open_files import CAPACITY_MIN, OpenFiles, capacity_for_limit
from storage.classic.segment import LogSegment

T = 1_800_000_000_000


def batches_at(build_batch, first_offset: int, timestamps: list[int]):
    records = build_batch([b"x" * 30] * len(timestamps), timestamps=timestamps)
    headers = validate_produce_records(records)
    assign_offsets(records, headers, first_offset, 7)
    return records, headers


def segment(tmp_path, base: int = 100, interval: int = 0) -> LogSegment:
    return LogSegment(tmp_path, base, index_interval_bytes=interval, index_max_bytes=1 << 20)


def fill(seg: LogSegment, build_batch, timestamps_per_batch: list[list[int]]) -> list[int]:
    """Append one batch per timestamp list; return each batch's file position."""
    positions = []
    for timestamps in timestamps_per_batch:
        positions.append(seg.size)
        seg.append(*batches_at(build_batch, seg.next_offset, timestamps))
    return positions


def test_index_files_use_kafka_layouts(tmp_path, build_batch):
    seg = segment(tmp_path)
    # Max timestamp grows, stalls, grows: time-index entries only when it grows.
    positions = fill(seg, build_batch, [[T], [T + 5, T + 9], [T + 1], [T + 20, T + 3]])
    seg.seal()
    index = (tmp_path / f"{100:020d}.index").read_bytes()
    time_index = (tmp_path / f"{100:020d}.timeindex").read_bytes()
    # index.interval.bytes=0: an entry for every batch after the first, keyed by its base
    # offset relative to the segment.
    assert list(struct.iter_unpack(">ii", index)) == [(1, positions[1]), (3, positions[2]),
                                                      (4, positions[3])]
    assert list(struct.iter_unpack(">qi", time_index)) == [(T + 9, 1), (T + 20, 4)]
    assert (seg.next_offset, seg.max_timestamp) == (106, T + 20)
    seg.close()


def test_sparse_index_and_lookups(tmp_path, build_batch):
    seg = segment(tmp_path, interval=1000)
    positions = fill(seg, build_batch, [[T + i, T + i] for i in range(100)])
    seg.seal()
    batch_size = positions[1] - positions[0]
    entries = (tmp_path / f"{100:020d}.index").stat().st_size // 8
    # An entry for the first batch more than index.interval.bytes after the previous one.
    every = 1000 // batch_size + 1
    assert entries == len(range(every, 100, every))
    for offset in range(100, 300):
        found = seg.find(offset)
        assert found.base_offset <= offset <= found.last_offset
        assert found.position == positions[(offset - 100) // 2]
    assert seg.find(300) is None
    assert seg.find_by_timestamp(T + 50, 0).offset == 200
    assert seg.find_by_timestamp(T + 50, 230).offset == 230
    assert seg.find_by_timestamp(T + 100, 0) is None
    seg.close()


def test_load_trusts_only_consistent_indexes(tmp_path, build_batch):
    seg = segment(tmp_path, interval=100)
    fill(seg, build_batch, [[T + i] for i in range(20)])
    seg.close()

    reloaded = segment(tmp_path, interval=100)
    assert reloaded.load()
    assert (reloaded.next_offset, reloaded.max_timestamp) == (120, T + 19)
    reloaded.close()

    index = tmp_path / f"{100:020d}.index"
    good = index.read_bytes()
    index.write_bytes(good[:-8] + struct.pack(">ii", 14, 3))  # a position inside a batch
    assert not segment(tmp_path, interval=100).load()
    index.write_bytes(good[:-3])
    assert not segment(tmp_path, interval=100).load()
    index.unlink()
    assert not segment(tmp_path, interval=100).load()

    recovered = segment(tmp_path, interval=100)
    assert recovered.recover() == 0
    assert (recovered.next_offset, recovered.max_timestamp) == (120, T + 19)
    recovered.close()
    assert index.read_bytes() == good


def test_truncate_to_restores_offsets_and_timestamps(tmp_path, build_batch):
    seg = segment(tmp_path, interval=0)
    positions = fill(seg, build_batch, [[T + 10 * i] for i in range(11)])
    fill(seg, build_batch, [[T + 500]])
    assert seg.find(112) is None and seg.truncate_to(112) == 0
    size = seg.size
    assert seg.truncate_to(110) == size - positions[10]
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (positions[10], 110, T + 90)
    assert seg.truncate_to(105) == positions[10] - positions[5]
    assert (seg.next_offset, seg.max_timestamp) == (105, T + 40)
    assert seg.max_timestamp_record().offset == 104
    assert seg.truncate_to(100) > 0
    assert (seg.size, seg.next_offset, seg.max_timestamp_record()) == (0, 100, None)
    seg.close()
    assert (tmp_path / f"{100:020d}.index").read_bytes() == b""


# -- the budget of open segment files ---------------------------------------------------


@pytest.fixture
def budget(monkeypatch) -> OpenFiles:
    files = OpenFiles(capacity=2)
    monkeypatch.setattr(segment_module, "SEGMENT_FILES", files)
    return files


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_capacity_leaves_a_quarter_of_the_limit_to_sockets():
    assert capacity_for_limit(20_000) == 15_000
    assert capacity_for_limit(1_280) == 256
    assert capacity_for_limit(1_024) == CAPACITY_MIN


def test_segments_past_the_budget_reopen_their_files_on_use(tmp_path, budget, build_batch):
    before = open_descriptors()
    segments = [segment(tmp_path, base) for base in range(100, 600, 100)]
    assert len(budget) == 2 and budget.closed_idle == 3
    for round_ in range(3):
        for seg in segments:
            seg.append(*batches_at(build_batch, seg.next_offset, [T + round_]))
            assert len(budget) <= 2 and open_descriptors() <= before + 2
    for seg in segments:
        offsets = [seg.base_offset + i for i in range(3)]
        assert [seg.find(offset).base_offset for offset in offsets] == offsets
        first = seg.find(seg.base_offset)
        assert seg.read(first.position, first.size)[:8] == seg.base_offset.to_bytes(8, "big")
        # An fsync through a reopened descriptor still writes back what an earlier one wrote.
        seg.flush()
    assert budget.closed_idle > 3
    for seg in segments:
        seg.close()
    assert len(budget) == 0 and open_descriptors() == before


def test_a_closed_segment_is_not_reopened(tmp_path, budget, build_batch):
    first, second, third = (segment(tmp_path, base) for base in (0, 100, 200))
    first.append(*batches_at(build_batch, 0, [T]))  # reopened: second is now idle
    second.close()  # closed while its file was closed for the budget
    with pytest.raises(OSError) as raised:
        second.read(0, 10)
    assert raised.value.errno == errno.EBADF
    third.release()
    assert len(budget) == 1
    first.close()


def test_a_lazy_segment_opens_its_file_when_first_read(tmp_path, budget, build_batch):
    seg = segment(tmp_path)
    seg.append(*batches_at(build_batch, 100, [T, T + 1]))
    seg.close()
    lazy = LogSegment(tmp_path, 100, index_interval_bytes=0, index_max_bytes=1 << 20, lazy=True)
    assert len(budget) == 0 and lazy.size > 0
    assert lazy.find(101).base_offset == 100
    assert len(budget) == 1
    lazy.close()


def test_a_segment_the_cleaner_writes_joins_the_budget_when_swapped_in(tmp_path, budget):
    # Written on the cleaner's thread: the event loop must not close its file meanwhile.
    cleaned = LogSegment(tmp_path, 0, index_interval_bytes=0, index_max_bytes=1 << 20,
                         suffix=".cleaned")
    others = [segment(tmp_path, base) for base in (100, 200, 300)]
    assert len(budget) == 2 and cleaned._fd >= 0
    cleaned.rename(".swap")
    assert len(budget) == 2
    cleaned.rename("")
    assert len(budget) == 2 and budget.closed_idle == 2
    for seg in (cleaned, *others):
        seg.close()


def test_a_flush_fsyncs_the_index_files_only_when_they_changed(tmp_path, build_batch,
                                                               monkeypatch):
    synced = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or fsync(fd))
    seg = segment(tmp_path, interval=1 << 20)  # no index entry for small batches

    def flushes_after(timestamps_per_batch: list[list[int]]) -> int:
        fill(seg, build_batch, timestamps_per_batch)
        synced.clear()
        seg.flush()
        return len(synced)

    assert flushes_after([[T]]) == 3  # log, index, time index: written for the first time
    assert flushes_after([[T + 1]]) == 1  # the log alone: neither index changed
    seg.truncate_to(seg.base_offset + 1)  # the index files lose an entry's worth
    assert flushes_after([[T + 2]]) == 3
    seg.seal()  # writes the time index's last entry, not fsynced
    synced.clear()
    seg.flush()
    assert len(synced) == 0  # nothing appended: nothing to flush
    seg.append(*batches_at(build_batch, seg.next_offset, [T + 3]))
    synced.clear()
    seg.flush()
    assert len(synced) == 3  # the sealed index files were written but not yet fsynced
    seg.close()
