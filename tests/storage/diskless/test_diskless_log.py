"""The diskless log against the in-memory control plane and the session S3 server:
append results, reads with the offsets the coordinator gave, LogAppendTime, offsets for
timestamps, DeleteRecords, transaction markers and fenced producers."""

from __future__ import annotations

import dataclasses
import time

import pytest
from kio.schema.errors import ErrorCode

from coordinator.diskless import BatchCoordinatorState
from protocol.records import (
    TxnMarker,
    build_marker_batch,
    iter_batches,
    read_marker,
    validate_produce_records,
)
from storage.append_rules import AppendOrigin
from storage.config import LogConfig
from storage.diskless.log import BatchRejected, DisklessLog
from storage.diskless.read_cache import ReadCache
from storage.diskless.wal_writer import WalWriter
from storage.log import OffsetOutOfRange
from storage.producer_state import AbortedTransaction

T0 = 1_700_000_000_000  # the storage conftest's default record timestamps start here


@pytest.fixture
async def make_log(store, control_plane, s3_prefix):
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    cache = ReadCache(store.store)

    def make(partition=0, **config):
        return DisklessLog("t", partition, LogConfig(storage_mode="diskless", **config),
                           "topic-id", control_plane, writer, cache)
    yield make
    await writer.close()


async def append(log, build_batch, values, **batch_kwargs):
    records = build_batch(values, **batch_kwargs)
    return await log.append(records, validate_produce_records(records), -1)


async def append_marker(log, marker: TxnMarker):
    """As the WriteTxnMarkers handler appends one."""
    records = build_marker_batch(marker, T0)
    return await log.append(records, list(iter_batches(records)), -1, AppendOrigin.COORDINATOR)


TXN = {"producer_id": 7, "producer_epoch": 0, "transactional": True}


async def test_appends_get_consecutive_offsets_per_partition(make_log, build_batch):
    log, other = make_log(), make_log(partition=1)
    first = await append(log, build_batch, [b"a", b"b", b"c"])
    assert (first.base_offset, first.last_offset, first.log_append_time_ms,
            first.log_start_offset) == (0, 2, -1, 0)
    second = await append(log, build_batch, [b"d"])
    assert (second.base_offset, second.last_offset) == (3, 3)
    assert (await append(other, build_batch, [b"x"])).base_offset == 0
    assert (log.log_start_offset, log.log_end_offset) == (0, 4)


async def test_reads_rebase_batches_to_their_committed_offsets(make_log, build_batch, decode,
                                                              read_all):
    log = make_log()
    for values in ([b"a", b"b"], [b"c"], [b"d", b"e", b"f"]):
        await append(log, build_batch, values)
    assert [(offset, value) for offset, _, value in await read_all(log)] == [
        (0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    # From inside a batch: the whole batch, as a classic log returns it.
    result = await log.read(4, 1 << 20)
    assert [offset for offset, _, _ in decode(result.records)] == [3, 4, 5]
    assert (result.log_start_offset, result.log_end_offset) == (0, 6)
    # max_offset leaves out batches starting at or after it; min_one_batch=False may return none.
    assert decode((await log.read(0, 1 << 20, max_offset=2)).records)[-1][0] == 1
    assert (await log.read(0, 1, min_one_batch=False)).records == b""
    assert (await log.read(6, 1 << 20)).records == b""  # at the log end: nothing yet
    with pytest.raises(OffsetOutOfRange):
        await log.read(7, 1 << 20)


async def test_log_append_time_is_stamped_by_the_coordinator(make_log, build_batch, decode,
                                                            read_all):
    log = make_log(log_append_time=True)
    before = time.time_ns() // 1_000_000
    result = await append(log, build_batch, [b"a", b"b"])
    assert result.log_append_time_ms >= before
    assert [ts for _, ts, _ in await read_all(log)] == [result.log_append_time_ms] * 2
    assert (await log.max_timestamp()).offset == 0  # LogAppendTime: the batch's first offset


async def test_offset_for_timestamp_and_max_timestamp(make_log, build_batch):
    log = make_log()
    await append(log, build_batch, [b"a", b"b"], timestamps=[T0, T0 + 10])
    await append(log, build_batch, [b"c", b"d"], timestamps=[T0 + 30, T0 + 20])
    found = await log.offset_for_timestamp(T0 + 5)
    assert (found.offset, found.timestamp) == (1, T0 + 10)
    assert (await log.offset_for_timestamp(T0 + 25)).offset == 2
    assert await log.offset_for_timestamp(T0 + 31) is None
    latest = await log.max_timestamp()
    assert (latest.offset, latest.timestamp) == (2, T0 + 30)


async def test_delete_records_moves_the_log_start(make_log, build_batch, read_all):
    log = make_log()
    await append(log, build_batch, [b"a", b"b"])
    await append(log, build_batch, [b"c", b"d"])
    assert await log.delete_records_before(3) == 3
    assert log.log_start_offset == 3
    assert [offset for offset, _, _ in await read_all(log)] == [3]
    with pytest.raises(OffsetOutOfRange):
        await log.read(1, 1 << 20)
    with pytest.raises(OffsetOutOfRange):
        await log.delete_records_before(5)
    # The offset lookup never answers below the log start.
    assert (await log.offset_for_timestamp(T0)).offset == 3


async def test_rejected_batch_fails_the_append_with_its_error(make_log, build_batch):
    log = make_log()
    records = build_batch([b"a"])
    [header] = validate_produce_records(records)
    idempotent = dataclasses.replace(header, producer_id=7, producer_epoch=0, base_sequence=0)
    assert (await log.append(records, [idempotent], -1)).base_offset == 0
    out_of_order = dataclasses.replace(idempotent, base_sequence=5)
    with pytest.raises(BatchRejected) as rejected:
        await log.append(records, [out_of_order], -1)
    assert rejected.value.error_code.name == "out_of_order_sequence_number"
    assert log.log_end_offset == 1


async def test_markers_are_batches_of_the_log_and_decide_what_read_committed_reads(
        make_log, build_batch):
    log = make_log()
    await append(log, build_batch, [b"a", b"b"], base_sequence=0, **TXN)
    await append(log, build_batch, [b"plain"])
    assert log.last_stable_offset(log.log_end_offset) == 0  # producer 7's transaction is open
    assert [(p.producer_id, p.txn_first_offset) for p in log.active_producers()] == [(7, 0)]
    abort = await append_marker(log, TxnMarker(7, 0, False, 0))
    assert (abort.base_offset, abort.last_offset) == (3, 3)
    assert (log.last_stable_offset(4), log.last_stable_offset(2)) == (4, 2)
    assert log.aborted_transactions(0, 4) == [AbortedTransaction(7, 0, 3)]
    await append(log, build_batch, [b"c"], base_sequence=2, **TXN)
    assert log.last_stable_offset(log.log_end_offset) == 4
    assert (await append_marker(log, TxnMarker(7, 0, True, 0))).base_offset == 5
    assert log.last_stable_offset(log.log_end_offset) == 6
    assert log.aborted_transactions(4, 6) == []
    # Reads return the markers' control batches at their offsets, as from a classic log.
    records = (await log.read(0, 1 << 20)).records
    headers = list(iter_batches(records))
    assert [(h.base_offset, h.is_control) for h in headers] == [
        (0, False), (2, False), (3, True), (4, False), (5, True)]
    assert read_marker(records, headers[2]) == TxnMarker(7, 0, False, 0)
    # Aborted transactions go once the log start passes their markers.
    await log.delete_records_before(3)
    assert log.aborted_transactions(3, 6) == [AbortedTransaction(7, 0, 3)]
    await log.delete_records_before(4)
    assert log.aborted_transactions(0, 6) == []


async def test_a_fenced_producer_s_batches_are_rejected_and_their_bytes_dead(
        make_log, build_batch, control_plane, store):
    log = make_log()
    await append(log, build_batch, [b"a"], base_sequence=0, **TXN)
    # The transaction coordinator aborts with a bumped epoch: epoch 0 is fenced.
    await append_marker(log, TxnMarker(7, 1, False, 3))
    dead_bytes = control_plane.stats().dead_bytes
    zombie = build_batch([b"zombie"], base_sequence=1, **TXN)
    with pytest.raises(BatchRejected) as rejected:
        await log.append(zombie, validate_produce_records(zombie), -1)
    assert rejected.value.error_code == ErrorCode.invalid_producer_epoch
    assert control_plane.stats().dead_bytes == dead_bytes + len(zombie)
    zombie_object = store.puts[-1]
    assert zombie_object in control_plane.files_to_delete(time.time_ns() // 1_000_000, 0)
    with pytest.raises(BatchRejected) as rejected:  # an older coordinator's marker
        await append_marker(log, TxnMarker(7, 1, True, 2))
    assert rejected.value.error_code == ErrorCode.transaction_coordinator_fenced
    assert [h.base_offset for h in iter_batches((await log.read(0, 1 << 20)).records)] == [0, 1]
    assert log.last_stable_offset(log.log_end_offset) == 2


async def test_prefetch_brings_what_a_read_needs_into_the_cache(make_log, build_batch):
    log = make_log()
    await append(log, build_batch, [b"a", b"b"])
    await append(log, build_batch, [b"c"])
    started = log.prefetch(0, 1 << 20, max_offset=log.log_end_offset)
    assert started is not None and started.size > 0
    await started.done
    assert log.prefetch(0, 1 << 20, max_offset=log.log_end_offset) is None  # cached now
    misses = log.cache.misses
    assert len((await log.read(0, 1 << 20)).records) == started.size
    assert log.cache.misses == misses
    # Nothing to read: nothing to bring in.
    assert log.prefetch(log.log_end_offset, 1 << 20, max_offset=log.log_end_offset) is None


async def test_a_read_reuses_the_lookup_of_its_prefetch_while_no_batch_changes(
        store, s3_prefix, tmp_path, build_batch, decode, monkeypatch):
    """One batch-coordinator query per partition of a consumer's Fetch, not one for the
    prefetch and one for the read; a commit in between makes the read look again."""
    plane = BatchCoordinatorState(tmp_path / "coordinator.db")
    writer = WalWriter(store, plane, s3_prefix, node_id=1, commit_interval_ms=10)
    log = DisklessLog("t", 0, LogConfig(storage_mode="diskless"), "topic-id", plane, writer,
                      ReadCache(store.store))
    lookups = []
    find_batches = plane.find_batches
    monkeypatch.setattr(plane, "find_batches", lambda *args: lookups.append(args) or
                        find_batches(*args))
    try:
        await append(log, build_batch, [b"a", b"b"])
        end = log.log_end_offset
        await log.prefetch(0, 1 << 20, max_offset=end).done
        assert [value for _, _, value in decode((await log.read(0, 1 << 20, max_offset=end))
                                                .records)] == [b"a", b"b"]
        assert len(lookups) == 1

        log.prefetch(0, 1 << 20, max_offset=None)
        await append(log, build_batch, [b"c"])
        assert [value for _, _, value in decode((await log.read(0, 1 << 20)).records)] == [
            b"a", b"b", b"c"]
        assert len(lookups) == 3
    finally:
        await writer.close()
        plane.close()
