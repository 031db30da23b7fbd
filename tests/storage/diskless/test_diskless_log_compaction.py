"""Compaction of a diskless log (coordinator/diskless/compaction.py) against the in-memory
control plane and the session S3 server: the latest value per key survives with its
offset, tombstones go after delete.retention.ms (also when the coordinator failed over
meanwhile: the SQLite state reopened, a new cleaner), the key map's bound makes several
passes, a produce during a pass is kept, a cleaner that dies between upload and swap
leaves the log as it was, and a pass rewriting thousands of batches swaps them in records
that fit the coordinator's log."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.diskless.batch_state import BatchCoordinatorState
from coordinator.diskless.compaction import LogCleaner
from protocol.records import iter_batches, stored_records, validate_produce_records
from storage.config import LogConfig
from storage.diskless.control_plane import MAX_REQUEST_BYTES, Compact, wire_size
from storage.diskless.log import DisklessLog
from storage.diskless.read_cache import ReadCache
from storage.diskless.wal_writer import WalWriter
from storage.objectstore import WAL_BUCKET

T0 = 1_700_000_000_000
KEYS, VERSIONS, PER_BATCH = 2_000, 5, 250
DELETED = range(0, KEYS, 10)  # every tenth key ends with a tombstone
DELETE_RETENTION_MS = 60_000
CONFIG = LogConfig(storage_mode="diskless", compact=True, delete_policy=False,
                   delete_retention_ms=DELETE_RETENTION_MS)


def open_log(control_plane, store, s3_prefix) -> DisklessLog:
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    return DisklessLog("t", 0, CONFIG, "topic-id", control_plane, writer, ReadCache(store.store))


@pytest.fixture
async def log(store, control_plane, s3_prefix):
    log = open_log(control_plane, store, s3_prefix)
    yield log
    await log.writer.close()


@pytest.fixture
def cleaner(control_plane, store, s3_prefix):
    def make(max_keys=1_000_000, on=control_plane):
        return LogCleaner(on, store, f"{s3_prefix}wal/compacted-", max_keys,
                          read_bytes=64 * 1024)
    return make


async def append(log, build_batch, items):
    """``items``: (key, value or None) pairs, one batch."""
    records = build_batch([v for _, v in items], keys=[k for k, _ in items],
                          first_timestamp=T0)
    return await log.append(records, validate_produce_records(records), -1)


async def read_log(log, decode) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the log start, as a consumer reads it:
    after each fetch it goes on from the last batch's next offset."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        records = (await log.read(offset, 64 * 1024)).records
        values = {offset: value for offset, _, value in decode(records)}
        for header in iter_batches(records):
            out += [(r.offset, r.key, values[r.offset])
                    for r in stored_records(records, header) if r.offset >= offset]
            offset = header.next_offset
    return out


async def fill(log, build_batch) -> dict[bytes, tuple[int, bool]]:
    """KEYS keys × VERSIONS versions, then a tombstone for the DELETED keys, then one last
    batch (never cleaned: the log's head); the offset of each key's last record and
    whether it is a tombstone."""
    items = [(f"k{k}".encode(), f"v{v}-{k}".encode()) for v in range(VERSIONS)
             for k in range(KEYS)] + [(f"k{k}".encode(), None) for k in DELETED]
    for i in range(0, len(items), PER_BATCH):
        await append(log, build_batch, items[i:i + PER_BATCH])
    await append(log, build_batch, [(b"head", b"h")])
    latest = {key: (offset, value is None) for offset, (key, value) in enumerate(items)}
    return latest


def live(latest):
    return sorted((offset, key) for key, (offset, tombstone) in latest.items() if not tombstone)


async def test_compaction_keeps_the_latest_value_per_key_at_its_offset(
        log, build_batch, decode, cleaner, control_plane, store):
    latest = await fill(log, build_batch)
    size_before = control_plane.log_info("topic-id", 0).size_bytes
    end = log.log_end_offset
    # A key map of 700 keys: the dirty section takes several passes.
    job = cleaner(max_keys=700)
    results = await job.clean("topic-id", 0, CONFIG, T0 + 1_000)
    assert len(results) > 2 and all(r.refused is None for r in results)
    info = control_plane.log_info("topic-id", 0)
    assert (info.high_watermark, info.cleaned_offset) == (end, end - 1)
    assert info.size_bytes < size_before / 3
    records = await read_log(log, decode)
    # Tombstones stay for delete.retention.ms after the cleaning that reached them.
    assert [(o, k) for o, k, _ in records[:-1]] == sorted(
        (offset, key) for key, (offset, _) in latest.items())
    assert all(value == f"v{VERSIONS - 1}-{key.decode()[1:]}".encode()
               for _, key, value in records[:-1] if value is not None)
    assert sum(value is None for _, _, value in records) == len(DELETED)
    # Nothing dirty: no cleaning until the tombstones' horizon passes; then they go.
    await append(log, build_batch, [(b"k1", b"v5-1")])
    await append(log, build_batch, [(b"head", b"h2")])
    assert await job.clean("topic-id", 0, CONFIG, T0 + DELETE_RETENTION_MS) == []
    results = await job.clean("topic-id", 0, CONFIG, T0 + 1_000 + DELETE_RETENTION_MS)
    assert results and results[-1].refused is None
    records = await read_log(log, decode)
    del latest[b"k1"]
    # The old head stays: the new head, in the log's last batch, is not cleaned yet.
    assert [(o, k) for o, k, _ in records[:-2]] == live(latest) + [(end - 1, b"head")]
    assert records[-2:] == [(end, b"k1", b"v5-1"), (end + 1, b"head", b"h2")]
    assert all(value is not None for _, _, value in records)
    assert control_plane.log_info("topic-id", 0).size_bytes < info.size_bytes
    # The objects every batch left are garbage for the GC.
    assert control_plane.files_to_delete(T0 * 2, 0)


async def test_a_new_coordinator_removes_the_tombstones_on_time(
        build_batch, decode, cleaner, store, s3_prefix, tmp_path):
    """The delete horizon of the tombstones a cleaning kept is in the coordinator's state:
    after a failover (the state reopened, a cleaner without memory) they go when it passes,
    without new dirty data."""
    state = BatchCoordinatorState(tmp_path / "coordinator.db")
    log = open_log(state, store, s3_prefix)
    latest = await fill(log, build_batch)
    await log.writer.close()
    assert [r.refused for r in await cleaner(on=state).clean("topic-id", 0, CONFIG, T0 + 1_000)
            ] == [None]
    assert state.log_info("topic-id", 0).tombstone_horizon_ms == T0 + 1_000 + DELETE_RETENTION_MS
    state.close()
    state = BatchCoordinatorState(tmp_path / "coordinator.db")
    log = open_log(state, store, s3_prefix)
    try:
        new_cleaner = cleaner(on=state)
        assert await new_cleaner.clean("topic-id", 0, CONFIG, T0 + DELETE_RETENTION_MS) == []
        results = await new_cleaner.clean("topic-id", 0, CONFIG,
                                          T0 + 1_000 + DELETE_RETENTION_MS)
        assert [r.refused for r in results] == [None]
        records = await read_log(log, decode)
        assert [(o, k) for o, k, _ in records[:-1]] == live(latest)
        # No tombstone kept: nothing to wake the cleaner until new dirty data.
        assert state.log_info("topic-id", 0).tombstone_horizon_ms == -1
        assert await new_cleaner.clean("topic-id", 0, CONFIG, T0 * 2) == []
    finally:
        await log.writer.close()
        state.close()


async def test_a_produce_during_a_pass_is_kept(log, build_batch, decode, cleaner, control_plane, store):
    latest = await fill(log, build_batch)
    (gate,) = store.hold_puts(1)
    task = asyncio.create_task(cleaner().clean("topic-id", 0, CONFIG, T0 + 1_000))
    while store.held:  # the cleaner has reached its upload
        await asyncio.sleep(0.01)
    appended = await append(log, build_batch, [(b"k3", b"new"), (b"late", b"x")])
    gate.set()
    (result,) = await asyncio.wait_for(task, 30)
    assert result.refused is None
    records = await read_log(log, decode)
    assert records[-2:] == [(appended.base_offset, b"k3", b"new"),
                            (appended.last_offset, b"late", b"x")]
    assert len(records) == len(latest) + 1 + 2


async def test_a_cleaner_dying_before_its_swap_leaves_the_log_as_it_was(
        log, build_batch, decode, cleaner, control_plane, store, monkeypatch):
    await fill(log, build_batch)
    before = await read_log(log, decode)
    info = control_plane.log_info("topic-id", 0)

    async def killed(request):
        raise asyncio.CancelledError  # the broker died after uploading, before submitting
    monkeypatch.setattr(control_plane, "compact", killed)
    with pytest.raises(asyncio.CancelledError):
        await cleaner().clean("topic-id", 0, CONFIG, T0 + 1_000)
    orphan = store.puts[-1]
    assert "compacted-" in orphan and not control_plane.is_known_object(orphan)
    assert await read_log(log, decode) == before and control_plane.log_info("topic-id", 0) == info
    assert await store.store.get_ranges(WAL_BUCKET, orphan, [(0, 1)])  # for the orphan GC
    # A swap applied is whole: a new cleaner's pass is accepted and complete.
    monkeypatch.undo()
    assert [r.refused for r in await cleaner().clean("topic-id", 0, CONFIG, T0 + 1_000)] == [None]
    assert len(await read_log(log, decode)) == KEYS + 1


async def test_a_pass_rewriting_thousands_of_batches_swaps_them_in_records_that_fit(
        log, build_batch, decode, cleaner, control_plane):
    """One Compact naming the rewrites of 5,000 batches would be larger than a record of
    the coordinator's log: the pass writes several compacted objects, each swapped by a
    record that fits, and only the last swap moves the checkpoint."""
    batches = 5_000
    appends = []
    for i in range(batches):  # each loses its first record to a later batch
        records = build_batch([b"old", b"kept"], keys=[f"k{i}".encode(), f"u{i}".encode()],
                              first_timestamp=T0)
        appends.append(log.writer.append("topic-id", 0, records,
                                         validate_produce_records(records), False))
    await asyncio.gather(*appends)
    for first in range(0, batches, 1_000):
        await append(log, build_batch, [(f"k{i}".encode(), b"new")
                                        for i in range(first, first + 1_000)])
    await append(log, build_batch, [(b"head", b"h")])
    end = log.log_end_offset

    (result,) = await cleaner().clean("topic-id", 0, CONFIG, T0 + 1_000)

    assert (result.refused, result.rewritten, result.dropped) == (None, batches, 0)
    compacts = control_plane.submitted(Compact)
    assert sum(map(wire_size, (r for c in compacts for r in c.batches))) > MAX_REQUEST_BYTES
    assert len(compacts) >= 2 and all(wire_size(c) <= MAX_REQUEST_BYTES for c in compacts)
    assert [c.cleaned_offset for c in compacts] == [0] * (len(compacts) - 1) + [end - 1]
    assert control_plane.log_info("topic-id", 0).cleaned_offset == end - 1
    assert [(key, value) for _, key, value in await read_log(log, decode)] == (
        [(f"u{i}".encode(), b"kept") for i in range(batches)]
        + [(f"k{i}".encode(), b"new") for i in range(batches)] + [(b"head", b"h")])
