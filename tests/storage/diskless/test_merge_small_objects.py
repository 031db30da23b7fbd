"""Merging of small WAL objects (KIP-1165, coordinator/diskless/housekeeping.py) against the
in-memory control plane and the session S3 server: it goes on however many merged objects
are already there, objects younger than the minimum age wait, a run merges its objects in
groups (a last group of one object is left as it is), the small objects of thousands of
partitions are merged into several objects whose records each fit the coordinator's log, and
reads of the merged log return what was appended."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from coordinator.diskless import housekeeping as housekeeping_module
from coordinator.diskless.housekeeping import MERGE_GROUP_BATCHES, MERGE_MAX_MOVES
from protocol.records import validate_produce_records
from storage.config import LogConfig
from storage.diskless.control_plane import MAX_REQUEST_BYTES, Merge, wire_size
from storage.diskless.log import DisklessLog
from storage.diskless.read_cache import ReadCache
from storage.diskless.wal_writer import WalWriter

CONFIG = LogConfig(storage_mode="diskless")
ROUNDS = 12  # more merged objects than merging ever looked at (4 x merge_max_objects)
# Eight WAL objects, each holding a batch of two records of each of 800 partitions: one
# Merge record naming their 6,400 batches would take 1.7 MB of JSON (with these tests'
# object keys; 1.3 MB with a cluster's).
PARTITIONS, WAL_OBJECTS = 800, 8


async def test_merging_goes_on_past_many_small_merged_objects(
        control_plane, store, s3_prefix, build_batch, decode, make_housekeeping):
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    log = DisklessLog("t", 0, CONFIG, "topic-id", control_plane, writer, ReadCache(store.store))
    housekeeping = make_housekeeping(merge_min_objects=2, merge_max_objects=2)
    values = []
    try:
        for round_ in range(ROUNDS):
            # Two WAL objects, then one merge of them into one small merged object, which
            # is never merged again.
            for i in range(2):
                values.append(f"r{round_}-{i}".encode())
                records = build_batch([values[-1]])
                await log.append(records, validate_produce_records(records), -1)
            await housekeeping.merge_small_objects()
            assert housekeeping.stats.merges == round_ + 1
        merged = set(control_plane.merge_candidates(1 << 40, 100))
        assert len(merged) == ROUNDS
        assert all(key.startswith(f"{s3_prefix}wal/merged-") for key in merged)
        read = [value for _, _, value in decode((await log.read(0, 1 << 20)).records)]
        assert read == values
        # Each round read its two WAL objects once, with one ranged GET each.
        assert [key for key, _ in store.range_reads[-2:]] == store.puts[-3:-1]
    finally:
        await writer.close()


async def test_objects_younger_than_the_minimum_age_are_left_to_the_tail_readers(
        control_plane, store, s3_prefix, build_batch, decode, make_housekeeping, monkeypatch):
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    log = DisklessLog("t", 0, CONFIG, "topic-id", control_plane, writer, ReadCache(store.store))
    housekeeping = make_housekeeping(merge_min_objects=2, merge_min_age_ms=30_000)
    values = [b"a", b"b"]
    try:
        for value in values:
            records = build_batch([value])
            await log.append(records, validate_produce_records(records), -1)
        await housekeeping.merge_small_objects()
        assert housekeeping.stats.merges == 0
        later = housekeeping_module._now_ms() + 30_000
        monkeypatch.setattr(housekeeping_module, "_now_ms", lambda: later)
        await housekeeping.merge_small_objects()
        assert housekeeping.stats.merges == 1
        read = [value for _, _, value in decode((await log.read(0, 1 << 20)).records)]
        assert read == values
    finally:
        await writer.close()


async def test_a_last_group_of_one_object_is_left_as_it_is(
        control_plane, store, s3_prefix, build_batch, decode, make_housekeeping, monkeypatch):
    monkeypatch.setattr(housekeeping_module, "MERGE_GROUP_BATCHES", 2)
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=10)
    log = DisklessLog("t", 0, CONFIG, "topic-id", control_plane, writer, ReadCache(store.store))
    housekeeping = make_housekeeping(merge_min_objects=2)
    values = [b"a", b"b", b"c"]  # three objects of one batch each: groups of two and one
    try:
        for value in values:
            records = build_batch([value])
            await log.append(records, validate_produce_records(records), -1)
        await housekeeping.merge_small_objects()
        assert (housekeeping.stats.merges, housekeeping.stats.merged_objects) == (1, 2)
        assert len(control_plane.merge_candidates(1 << 40, 100, (f"{s3_prefix}wal/merged-",))
                   ) == 1
        read = [value for _, _, value in decode((await log.read(0, 1 << 20)).records)]
        assert read == values
    finally:
        await writer.close()


@pytest.mark.parametrize("group_batches", [MERGE_GROUP_BATCHES, 2 * PARTITIONS],
                         ids=["one-group", "groups-of-two-objects"])
async def test_a_merge_of_thousands_of_partitions_fits_each_record_and_keeps_every_batch(
        control_plane, store, s3_prefix, build_batch, decode, make_housekeeping, monkeypatch,
        group_batches):
    monkeypatch.setattr(housekeeping_module, "MERGE_GROUP_BATCHES", group_batches)
    objects_a_group = min(WAL_OBJECTS, -(-group_batches // PARTITIONS))
    topic_id = str(uuid.uuid4())  # as long as a cluster's, as are the records' sizes
    # Reads before the merge come from the cache the writer fills, reads after it from
    # the merged objects.
    cache = ReadCache(store.store)
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=3_600_000,
                       cache=cache)
    logs = [DisklessLog("t", partition, CONFIG, topic_id, control_plane, writer, cache)
            for partition in range(PARTITIONS)]
    housekeeping = make_housekeeping(merge_min_objects=WAL_OBJECTS, merge_max_objects=WAL_OBJECTS)
    appended = [[f"{object_}-{partition}-{i}".encode() for object_ in range(WAL_OBJECTS)
                 for i in (0, 1)] for partition in range(PARTITIONS)]
    try:
        for object_ in range(WAL_OBJECTS):
            appends = []
            for partition in range(PARTITIONS):
                records = build_batch(appended[partition][2 * object_:2 * object_ + 2])
                appends.append(writer.append(topic_id, partition, records,
                                             validate_produce_records(records), False))
            await writer.close()  # the open buffer: one WAL object of every partition
            await asyncio.gather(*appends)
        assert len(store.puts) == WAL_OBJECTS
        assert await read_values(logs, decode) == appended

        await housekeeping.merge_small_objects()

        merges = control_plane.submitted(Merge)
        moves = [move for merge in merges for move in merge.moves]
        assert len(moves) == PARTITIONS * WAL_OBJECTS
        assert sum(map(wire_size, moves)) > MAX_REQUEST_BYTES  # one record could not name them
        assert len(merges) >= 2 and all(wire_size(m) <= MAX_REQUEST_BYTES for m in merges)
        # Each a record every broker applies in one step: a bounded number of moves.
        assert max(len(merge.moves) for merge in merges) == MERGE_MAX_MOVES
        assert housekeeping.stats.merges == len(merges)
        # A group's objects are read and merged before the next group's are read.
        assert max(len({move.old_object_key for move in merge.moves})
                   for merge in merges) == objects_a_group
        assert housekeeping.stats.merged_objects == WAL_OBJECTS
        # No WAL object holds a live batch any more: every batch was moved.
        assert control_plane.merge_candidates(1 << 40, 100, (f"{s3_prefix}wal/merged-",)) == []
        assert await read_values(logs, decode) == appended
    finally:
        await writer.close()


async def read_values(logs: list[DisklessLog], decode) -> list[list[bytes]]:
    """The values of each log, read from its start as a Fetch reads them: every log's
    ranges prefetched in one turn, so that one GET per object brings them (800 reads that
    each missed would queue for the store's connections within its request timeout)."""
    prefetches = [log.prefetch(0, 1 << 20, max_offset=1 << 62) for log in logs]
    await asyncio.gather(*(prefetch.done for prefetch in prefetches if prefetch is not None))
    reads = [await log.read(0, 1 << 20, max_offset=1 << 62) for log in logs]
    return [[value for _, _, value in decode(read.records)] for read in reads]


async def test_batches_a_merge_moved_after_their_prefetch_are_brought_in_together(
        control_plane, store, s3_prefix, build_batch, decode, make_housekeeping):
    """A Fetch prefetches its partitions, waits for the GETs, then reads them in turn; a
    merge applied during the wait moved their batches. Looked up again, the moved batches
    come in with one GET per merged object, not one per partition's read."""
    partitions, objects = 40, 3
    topic_id = str(uuid.uuid4())
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1, commit_interval_ms=3_600_000)
    # Another broker's cache: it holds nothing the writer put.
    cache = ReadCache(store)
    logs = [DisklessLog("t", partition, CONFIG, topic_id, control_plane, writer, cache)
            for partition in range(partitions)]
    housekeeping = make_housekeeping(merge_min_objects=objects, merge_max_objects=objects)
    appended = [[f"{object_}-{partition}".encode() for object_ in range(objects)]
                for partition in range(partitions)]
    try:
        for object_ in range(objects):
            appends = []
            for partition in range(partitions):
                records = build_batch([appended[partition][object_]])
                appends.append(writer.append(topic_id, partition, records,
                                             validate_produce_records(records), False))
            await writer.close()
            await asyncio.gather(*appends)
        prefetches = [log.prefetch(0, 1 << 20, max_offset=1 << 62) for log in logs]
        await asyncio.gather(*(prefetch.done for prefetch in prefetches if prefetch))
        assert len(store.range_reads) == objects  # one GET per WAL object
        await housekeeping.merge_small_objects()  # as if applied while the GETs ran
        merged = store.puts[objects:]
        assert merged
        del store.range_reads[:]  # and the merge's own

        refreshed = [log.refresh_prefetch() for log in logs]
        await asyncio.gather(*(prefetch.done for prefetch in refreshed if prefetch))
        assert sorted(key for key, _ in store.range_reads) == sorted(merged)
        reads = [await log.read(0, 1 << 20, max_offset=1 << 62) for log in logs]
        assert [[value for _, _, value in decode(read.records)] for read in reads] == appended
        assert len(store.range_reads) == len(merged)  # every read found its batches
        assert [log.refresh_prefetch() for log in logs] == [None] * partitions
    finally:
        await writer.close()
