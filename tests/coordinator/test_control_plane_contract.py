"""The diskless control plane's contract (Inkless's AbstractControlPlaneTest): every test
runs against the in-memory control plane and against the SQLite state machine driven
directly (no replicated log); both must answer the same."""

from __future__ import annotations

import base64
import itertools
import random

import pytest
from support.control_plane_records import (
    answers,
    batch,
    commit_file,
    delete_records,
    live_bytes,
    marker,
    random_records,
    retention,
)

from coordinator.diskless import BatchCoordinatorState
from storage.diskless.control_plane import (
    REQUEST_DEDUP_WINDOW_MS,
    BatchMove,
    BatchResult,
    BatchRewrite,
    CheckpointTaken,
    CheckpointTakenResult,
    CommitFileResult,
    Compact,
    CompactResult,
    DeleteRecordsResult,
    DeleteTopic,
    EnforceRetentionResult,
    ExpireProducers,
    ExpireProducersResult,
    LogInfo,
    Merge,
    MergeResult,
    ObjectsDeleted,
    ObjectsDeletedResult,
    OpenLog,
    SealLog,
    decode_request,
)
from storage.diskless.memory_control_plane import InMemoryControlPlane
from storage.producer_state import AbortedTransaction, ProducerState

STORAGE_ERROR, UNKNOWN_TOPIC, OUT_OF_ORDER, FENCED_EPOCH, INVALID_RECORD = 56, 3, 45, 47, 87
OFFSET_OUT_OF_RANGE, INVALID_TXN_STATE, COORDINATOR_FENCED = 1, 48, 52
NOT_LEADER_OR_FOLLOWER, INVALID_REQUEST = 6, 42


@pytest.fixture(params=["in-memory", "sqlite"])
def control_plane(request, tmp_path):
    if request.param == "in-memory":
        yield InMemoryControlPlane()
        return
    state = BatchCoordinatorState(tmp_path / "coordinator.db")
    yield state
    state.close()


async def commit(control_plane, key, *batches, **kwargs):
    return list(await control_plane.commit_file(commit_file(key, *batches, **kwargs)))


async def test_offsets_have_no_gaps_or_duplicates_across_commits_and_partitions(control_plane):
    expected = {0: 0, 1: 0}
    for i in range(20):
        batches = [batch(partition=i % 2, count=i + 1), batch(partition=1, count=2)]
        results = await commit(control_plane, f"o{i}", *batches)
        for b, r in zip(batches, results):
            assert r.error_code == 0 and r.base_offset == expected[b.partition]
            expected[b.partition] += b.record_count
    for partition, hw in expected.items():
        assert control_plane.log_info("t", partition).high_watermark == hw
        coords = control_plane.find_batches("t", partition, 0, 1 << 30)
        assert coords[0].base_offset == 0 and coords[-1].last_offset == hw - 1
        assert all(a.last_offset + 1 == b.base_offset for a, b in zip(coords, coords[1:]))
    assert control_plane.logs() == [("t", 0), ("t", 1)]


async def test_commit_is_idempotent_by_request_id(control_plane):
    first = await commit(control_plane, "o1", batch(), batch(), request_id="r")
    stats = control_plane.stats()
    assert await commit(control_plane, "o1", batch(), batch(), request_id="r") == first
    assert control_plane.stats() == stats and control_plane.log_info("t", 0).high_watermark == 2


async def test_commit_answers_are_kept_for_retries_an_hour_then_forgotten(control_plane):
    """The answers kept for request-id retries are bounded: one older than
    REQUEST_DEDUP_WINDOW_MS (by the requests' own now_ms) is forgotten, so a retry that late
    is a new commit, which an existing object refuses (nothing stored twice)."""
    first = await commit(control_plane, "o1", batch(), request_id="r1", now=1_000)
    await commit(control_plane, "o2", batch(), request_id="r2",
                 now=1_000 + REQUEST_DEDUP_WINDOW_MS)
    assert await commit(control_plane, "o1", batch(), request_id="r1", now=1_000) == first
    await commit(control_plane, "o3", batch(), request_id="r3",
                 now=1_001 + REQUEST_DEDUP_WINDOW_MS)
    late = await commit(control_plane, "o1", batch(), request_id="r1", now=1_000)
    assert late[0].error_code == STORAGE_ERROR
    assert control_plane.log_info("t", 0).high_watermark == 3


async def test_each_partition_of_an_object_committed_on_its_own(control_plane):
    """The naive fan-out (diskless_append_commit_per_partition): one CommitFile per partition
    of the object; the first registers it, the others join it. A first part whose batches
    all fail leaves the object empty only until a later part's batches land in it."""
    await control_plane.delete_topic(DeleteTopic("gone", 7))
    parts = [batch(topic="gone", byte_offset=0), batch(partition=0, byte_offset=100),
             batch(partition=1, byte_offset=200, count=3)]
    results = [await commit(control_plane, "o1", part, request_id=f"o1:{i}",
                            object_size=300, one_partition_of_object=True)
               for i, part in enumerate(parts)]
    assert [r[0].error_code for r in results] == [UNKNOWN_TOPIC, 0, 0]
    assert live_bytes(control_plane, "o1") == [100, 100]
    assert control_plane.files_to_delete(now_ms=10_000, delay_ms=0) == []
    assert control_plane.log_info("t", 1).high_watermark == 3
    assert control_plane.stats().objects == 1
    # An object commit that is not one partition's is still refused for a known object.
    refused = await commit(control_plane, "o1", batch(), request_id="again")
    assert refused[0].error_code == STORAGE_ERROR


async def test_idempotent_producer(control_plane):
    ok = (await commit(control_plane, "o1", batch(producer=7, seq=0, count=2)))[0]
    assert (ok.error_code, ok.base_offset) == (0, 0)
    # A retry of the same sequence range answers with the original offset, stores nothing.
    await commit(control_plane, "o2", batch(producer=9, seq=0))
    retry, out_of_order, fenced = await commit(
        control_plane, "o3", batch(producer=7, seq=0, count=2, size=10),
        batch(producer=7, seq=5, size=20), batch(producer=7, epoch=-1, seq=2, size=30))
    assert (retry.error_code, retry.base_offset) == (0, 0)
    assert out_of_order.error_code == OUT_OF_ORDER and out_of_order.error_message
    assert fenced.error_code == FENCED_EPOCH
    # The producer continues in sequence after the rejections.
    after = (await commit(control_plane, "o4", batch(producer=7, seq=2)))[0]
    assert (after.error_code, after.base_offset) == (0, 3)
    assert control_plane.log_info("t", 0) == LogInfo(0, 4, 300)
    # Rejected and duplicate bytes are dead: object o3 holds no live batch.
    assert control_plane.stats().dead_bytes == 60 and live_bytes(control_plane, "o3") is None
    assert control_plane.files_to_delete(now_ms=1_000, delay_ms=0) == ["o3"]
    invalid = (await commit(control_plane, "o5", batch(producer=8, seq=-1)))[0]
    assert invalid.error_code == INVALID_RECORD


async def test_idle_producers_expire_unless_a_transaction_is_open(control_plane):
    await commit(control_plane, "o1", batch(producer=7, seq=0, ts=1_000),
                 batch(producer=8, seq=0, ts=1_000, transactional=True),
                 batch(producer=9, seq=0, ts=5_000))
    result = await control_plane.expire_producers(ExpireProducers(now_ms=6_000,
                                                                  expiration_ms=4_000))
    assert result == ExpireProducersResult(1)
    assert [p.producer_id for p in control_plane.active_producers("t", 0)] == [8, 9]
    # Forgotten, producer 7 starts anew: a later sequence is not out of order.
    later = (await commit(control_plane, "o2", batch(producer=7, seq=40, ts=7_000)))[0]
    assert later.error_code == 0


async def test_log_append_time(control_plane):
    await commit(control_plane, "o1", batch(ts=50), now=1_000)
    result = (await commit(control_plane, "o2", batch(ts=10, log_append_time=True), now=2_000))[0]
    assert result.log_append_time_ms == 2_000
    coordinate = control_plane.offset_for_timestamp("t", 0, 1_500)
    assert (coordinate.base_offset, coordinate.timestamp_type) == (1, 1)
    assert coordinate.append_time_ms == 2_000
    assert control_plane.offset_for_timestamp("t", 0, 40).base_offset == 0
    assert control_plane.offset_for_timestamp("t", 0, 2_001) is None
    assert control_plane.max_timestamp_batch("t", 0).base_offset == 1
    assert control_plane.max_timestamp_batch("missing", 0) is None


async def test_max_timestamp_ties_pick_the_earliest(control_plane):
    await commit(control_plane, "o1", batch(ts=5), batch(ts=9), batch(ts=9), batch(ts=1))
    assert control_plane.max_timestamp_batch("t", 0).base_offset == 1


async def test_find_batches_boundaries_and_max_bytes(control_plane):
    await commit(control_plane, "o1",
                 *[batch(count=10, size=100, byte_offset=100 * i) for i in range(5)])
    await control_plane.delete_records(delete_records(15, now=0))
    assert control_plane.find_batches("t", 0, 14, 1 << 20) == []  # below log start
    assert control_plane.find_batches("t", 0, 50, 1 << 20) == []  # at HW
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 15, 250)] == [10, 20]
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 29, 200)] == [20, 30]
    # Always one batch, even over max_bytes.
    only = control_plane.find_batches("t", 0, 49, 1)
    assert [(c.base_offset, c.last_offset, c.record_count) for c in only] == [(40, 49, 10)]
    assert control_plane.find_batches("unknown", 0, 0, 100) == []


async def test_delete_records(control_plane):
    await commit(control_plane, "o1", batch(count=5), batch(count=5))
    delete = control_plane.delete_records
    assert await delete(delete_records(11, now=5)) == DeleteRecordsResult(OFFSET_OUT_OF_RANGE)
    assert await delete(delete_records(3, now=5)) == DeleteRecordsResult(0, 3)
    assert control_plane.log_info("t", 0) == LogInfo(3, 10, 200)  # the straddling batch stays
    assert await delete(delete_records(1, now=5)) == DeleteRecordsResult(0, 3)
    assert await delete(delete_records(-1, now=5)) == DeleteRecordsResult(0, 10)
    assert control_plane.log_info("t", 0) == LogInfo(10, 10, 0)
    assert control_plane.files_to_delete(now_ms=5, delay_ms=0) == ["o1"]
    assert await delete(delete_records(0, now=5, partition=9)) == DeleteRecordsResult(UNKNOWN_TOPIC)


async def test_retention_by_time(control_plane):
    await commit(control_plane, "o1", batch(ts=100), batch(ts=200), batch(ts=300, count=2))
    enforce = control_plane.enforce_retention
    assert await enforce(retention(now=1_000, retention_ms=750)) == EnforceRetentionResult(2, 200)
    assert control_plane.log_info("t", 0) == LogInfo(2, 4, 100)
    assert await enforce(retention(now=2_000, retention_ms=-1)) == EnforceRetentionResult(0, 0)
    await enforce(retention(now=2_000, retention_ms=1_000))
    assert control_plane.log_info("t", 0) == LogInfo(4, 4, 0)


async def test_retention_by_bytes(control_plane):
    await commit(control_plane, "o1", *[batch(size=100, partition=p) for p in (0, 1) for _ in range(5)])
    assert await control_plane.enforce_retention(retention(now=0, retention_bytes=250)) == \
        EnforceRetentionResult(6, 600)
    assert control_plane.log_info("t", 1) == LogInfo(3, 5, 200)
    assert live_bytes(control_plane, "o1") == [100] * 4


async def test_delete_topic_then_commit_fails(control_plane):
    await commit(control_plane, "o1", batch(topic="a", producer=1, seq=0), batch(topic="b"))
    assert await control_plane.delete_topic(DeleteTopic("a", 7)) is None
    assert control_plane.logs() == [("b", 0)] and live_bytes(control_plane, "o1") == [100]
    assert (await commit(control_plane, "o2", batch(topic="a")))[0].error_code == UNKNOWN_TOPIC
    assert control_plane.log_info("a", 0) == LogInfo(0, 0, 0)


async def test_objects_deletable_only_without_live_batches_after_delay(control_plane):
    await commit(control_plane, "o1", batch(), now=100)
    assert control_plane.files_to_delete(now_ms=10_000, delay_ms=0) == []
    await control_plane.delete_records(delete_records(-1, now=500))
    assert control_plane.files_to_delete(now_ms=1_499, delay_ms=1_000) == []
    assert control_plane.files_to_delete(now_ms=1_500, delay_ms=1_000) == ["o1"]
    assert await control_plane.objects_deleted(ObjectsDeleted(("o1", "orphan"))) == \
        ObjectsDeletedResult(("o1", "orphan"), ())
    assert control_plane.is_known_object("o1") and control_plane.is_known_object("orphan")
    assert not control_plane.is_known_object("o2")
    assert control_plane.stats().objects == 0


async def test_objects_deleted_refuses_live_object_and_late_commit_fails(control_plane):
    await commit(control_plane, "live", batch())
    assert await control_plane.objects_deleted(ObjectsDeleted(("live", "gone"))) == \
        ObjectsDeletedResult(("gone",), ("live",))
    result = await commit(control_plane, "gone", batch(), batch())
    assert [r.error_code for r in result] == [STORAGE_ERROR] * 2
    assert result[0].error_message == "object was garbage-collected before its commit"
    assert control_plane.log_info("t", 0).high_watermark == 1
    assert live_bytes(control_plane, "live") == [100]


async def test_merge_repoints_skips_stale_moves_and_frees_old_objects(control_plane):
    await commit(control_plane, "a", batch(size=10), batch(partition=1, size=20), now=1)
    await commit(control_plane, "b", batch(size=30), now=2)
    assert control_plane.merge_candidates(max_object_size=100, limit=5) == ["a", "b"]
    assert control_plane.merge_candidates(max_object_size=25, limit=5) == []
    assert control_plane.merge_candidates(100, 5, created_before_ms=1) == ["a"]
    assert [(c.partition, c.byte_size) for c in control_plane.object_batches("a")] == [
        (0, 10), (1, 20)]
    # Partition 1's batch is deleted before the merge commits, so its move is skipped.
    await control_plane.delete_records(delete_records(-1, now=3, partition=1))
    moves = (BatchMove("t", 0, 0, "a", 0, 10), BatchMove("t", 1, 0, "a", 10, 20),
             BatchMove("t", 0, 1, "b", 30, 30))
    merge = Merge("m", 60, 4, moves)
    assert await control_plane.merge(merge) == MergeResult(2, 1)
    assert [(c.object_key, c.byte_offset) for c in control_plane.find_batches("t", 0, 0, 100)] == [
        ("m", 0), ("m", 30)]
    assert control_plane.files_to_delete(now_ms=4, delay_ms=0) == ["a", "b"]
    # Replaying the same moves into another object finds them already moved.
    assert await control_plane.merge(Merge("m2", 60, 4, moves)) == MergeResult(0, 3)
    assert control_plane.files_to_delete(now_ms=4, delay_ms=0) == ["a", "b", "m2"]


async def test_log_info_is_a_new_object_after_any_change_of_its_log(control_plane):
    """What DisklessLog relies on to reuse a lookup: the same LogInfo object twice means no
    batch of that log changed in between, whatever the change."""
    await commit(control_plane, "a", batch(size=10), batch(partition=1, size=20), now=1)
    before = control_plane.log_info("t", 1)
    await commit(control_plane, "b", batch(partition=1, size=30), now=2)
    assert control_plane.log_info("t", 1) is not before
    before = control_plane.log_info("t", 0)
    # A merge moves batches to another object; offsets and sizes stay as they were.
    assert await control_plane.merge(Merge("m", 10, 3, (BatchMove("t", 0, 0, "a", 0, 10),))
                                     ) == MergeResult(1, 0)
    after = control_plane.log_info("t", 0)
    assert after is not before and after == before
    await control_plane.delete_records(delete_records(1, now=4))
    assert control_plane.log_info("t", 0) is not after


async def test_merge_candidates_leave_out_skipped_prefixes(control_plane):
    """Housekeeping leaves merged and compacted objects out by key prefix, in the query:
    however many older ones there are, the limit counts only the others."""
    for i, key in enumerate(["m_1", "m_2", "mx3", "w4"]):
        await commit(control_plane, key, batch(size=10), now=i)

    def keys(*args):
        return control_plane.merge_candidates(100, *args)
    assert keys(2) == ["m_1", "m_2"]
    assert keys(2, ("m_",)) == ["mx3", "w4"]  # a literal prefix: "_" is no wildcard
    assert keys(1, ("m_", "mx")) == ["w4"]


async def test_markers_take_offsets_and_decide_the_last_stable_offset(control_plane):
    assert [r.base_offset for r in await commit(
        control_plane, "o1", batch(producer=5, seq=0, count=2, transactional=True),
        batch())] == [0, 2]
    assert control_plane.last_stable_offset("t", 0) == 0  # producer 5's transaction is open
    (abort,) = await commit(control_plane, "o2", marker(5, commit=False))
    assert (abort.error_code, abort.base_offset) == (0, 3)  # the marker is a batch of the log
    assert control_plane.last_stable_offset("t", 0) == 4
    assert control_plane.aborted_transactions("t", 0, 0, 4) == [AbortedTransaction(5, 0, 3)]
    await commit(control_plane, "o3", batch(producer=5, seq=2, transactional=True),
                 batch(producer=6, seq=0, transactional=True))
    assert control_plane.last_stable_offset("t", 0) == 4
    # Producer 5 commits at 6; producer 6's transaction, open from 5, still holds the LSO.
    assert (await commit(control_plane, "o4", marker(5, commit=True)))[0].base_offset == 6
    assert control_plane.last_stable_offset("t", 0) == 5
    await commit(control_plane, "o5", marker(6, commit=True))
    assert control_plane.last_stable_offset("t", 0) == control_plane.log_info("t", 0).high_watermark == 8
    assert control_plane.aborted_transactions("t", 0, 4, 8) == []  # commits are not listed
    assert control_plane.aborted_transactions("t", 0, 3, 4) == [AbortedTransaction(5, 0, 3)]
    assert [(p.producer_id, p.txn_first_offset) for p in control_plane.active_producers(
        "t", 0)] == [(5, -1), (6, -1)]
    assert control_plane.last_stable_offset("t", 9) == 0
    assert control_plane.aborted_transactions("unknown", 0, 0, 10) == []
    assert control_plane.active_producers("unknown", 0) == []


async def test_transaction_errors_and_a_fenced_producer_s_dead_bytes(control_plane):
    await commit(control_plane, "o1", batch(producer=5, seq=0, transactional=True))
    not_in_txn, = await commit(control_plane, "o2", batch(producer=5, seq=1, size=10))
    assert not_in_txn.error_code == INVALID_TXN_STATE
    # The transaction coordinator aborts with a bumped epoch: producer 5 epoch 0 is fenced.
    await commit(control_plane, "o3", marker(5, commit=False, epoch=1, coordinator_epoch=3))
    zombie, stale_coordinator, stale_marker = await commit(
        control_plane, "o4", batch(producer=5, seq=1, size=20, transactional=True),
        marker(5, commit=True, epoch=1, coordinator_epoch=2, size=30),
        marker(5, commit=True, epoch=0, coordinator_epoch=3, size=40))
    assert zombie.error_code == FENCED_EPOCH and zombie.base_offset == -1
    assert stale_coordinator.error_code == COORDINATOR_FENCED
    assert stale_marker.error_code == FENCED_EPOCH
    # Nothing of them is visible and their object holds no live byte: the GC takes it.
    assert control_plane.log_info("t", 0) == LogInfo(0, 2, 170)
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 0, 1 << 20)] == [0, 1]
    assert live_bytes(control_plane, "o4") is None
    assert control_plane.stats().dead_bytes == 10 + 20 + 30 + 40
    assert control_plane.files_to_delete(now_ms=1_000, delay_ms=0) == ["o2", "o4"]
    # The new epoch starts over at sequence 0.
    (restart,) = await commit(control_plane, "o5", batch(producer=5, epoch=1, seq=0,
                                                         transactional=True))
    assert (restart.error_code, control_plane.last_stable_offset("t", 0)) == (0, 2)


async def test_aborted_transactions_go_with_their_offsets_not_with_merges(control_plane):
    for i, (first_ts, ts) in enumerate([(100, 200), (300, 400)]):
        await commit(control_plane, f"o{i}", batch(producer=i, seq=0, ts=first_ts,
                                                   transactional=True),
                     marker(i, commit=False, ts=ts), now=500)
    aborted = [AbortedTransaction(0, 0, 1), AbortedTransaction(1, 2, 3)]
    assert control_plane.aborted_transactions("t", 0, 0, 4) == aborted
    moves = tuple(BatchMove("t", 0, c.base_offset, c.object_key, 0, c.byte_size)
                  for c in control_plane.find_batches("t", 0, 0, 1 << 20))
    assert await control_plane.merge(Merge("m", 1_000, 600, moves)) == MergeResult(4, 0)
    assert control_plane.aborted_transactions("t", 0, 0, 4) == aborted
    # Retention removes the first transaction's data but not its marker: it stays listed.
    await control_plane.enforce_retention(retention(now=1_000, retention_ms=850))
    assert control_plane.log_info("t", 0).log_start_offset == 1
    assert control_plane.aborted_transactions("t", 0, 1, 4) == aborted
    await control_plane.enforce_retention(retention(now=1_000, retention_ms=750))
    assert control_plane.aborted_transactions("t", 0, 0, 4) == aborted[1:]
    await control_plane.delete_records(delete_records(4, now=1_000))
    assert control_plane.aborted_transactions("t", 0, 0, 4) == []


async def test_both_implementations_give_identical_results_and_answers(tmp_path):
    sqlite, memory = BatchCoordinatorState(tmp_path / "a.db"), InMemoryControlPlane()
    rng = random.Random(7)
    errors, aborted = set(), []
    for request in random_records(rng, sqlite, count=300):
        result = await memory.submit(request)
        assert result == await sqlite.submit(request)
        errors |= {r.error_code for r in getattr(result, "batches", ())}
        aborted.append(sum(len(memory.aborted_transactions(*log, 0, 1 << 62))
                           for log in memory.logs()))
        # After every record: the SQLite state's cached LogInfos of the logs it did not
        # change are still right.
        assert [memory.log_info(*log) for log in memory.logs()] == [
            sqlite.log_info(*log) for log in memory.logs()]
    assert answers(memory) == answers(sqlite)
    # The records exercised transactions: markers fenced epochs, aborted transactions were
    # listed, then trimmed with their offsets.
    assert {FENCED_EPOCH, INVALID_TXN_STATE, COORDINATOR_FENCED} <= errors
    assert max(aborted) > 0 and any(b < a for a, b in itertools.pairwise(aborted))
    sqlite.close()


def test_wire_shape_is_the_records_in_diskless_metadata():
    """Records as kipper has always written them to ``__diskless-metadata`` decode to the
    typed requests and encode back to the same dicts."""
    written = [
        {"type": "commit_file", "request_id": "1:k", "object_key": "k", "object_size": 100,
         "uploader": 1, "now_ms": 5, "batches": [
             {"topic_id": "t", "partition": 0, "byte_offset": 0, "byte_size": 100,
              "record_count": 2, "max_timestamp": 4, "log_append_time": True,
              "producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "last_sequence": 1}]},
        {"type": "delete_records", "topic_id": "t", "partition": 0, "offset": 1, "now_ms": 5},
        {"type": "retention", "now_ms": 5, "topics": [
            {"topic_id": "t", "retention_ms": 10, "retention_bytes": -1}]},
        {"type": "delete_topic", "topic_id": "t", "now_ms": 5},
        {"type": "objects_deleted", "keys": ["a", "b"]},
        {"type": "merge", "object_key": "m", "object_size": 10, "now_ms": 5, "moves": [
            {"topic_id": "t", "partition": 0, "base_offset": 0, "old_object_key": "k",
             "byte_offset": 0, "byte_size": 10}]},
        {"type": "compact", "topic_id": "t", "partition": 0, "object_key": "c",
         "object_size": 10, "now_ms": 5, "cleaned_offset": 3, "batches": [
             {"base_offset": 0, "old_object_key": "k", "old_byte_offset": 0,
              "old_byte_size": 100, "byte_offset": 0, "byte_size": 10}],
         "tombstone_horizon_ms": 60},
    ]
    for wire in written:
        assert decode_request(wire).to_wire() == wire
    # A Compact record written before the tombstone horizon was kept in the state.
    older = {**written[-1], "batches": []}
    del older["tombstone_horizon_ms"]
    assert decode_request(older).tombstone_horizon_ms == -1
    with pytest.raises(ValueError):
        decode_request({"type": "bogus"})
    with pytest.raises(KeyError):
        decode_request({"type": "delete_topic", "topic_id": "t"})
    # Commit results as the SQLite state has stored them per request id, and answers of
    # coordinators that left out fields with a default.
    stored = {"batches": [{"error_code": 0, "base_offset": 3, "log_append_time_ms": -1,
                           "log_start_offset": 0, "error_message": None},
                          {"error_code": 45, "base_offset": -1, "log_append_time_ms": -1,
                           "log_start_offset": -1, "error_message": "out of order"}]}
    result = CommitFileResult.from_wire(stored)
    assert result == CommitFileResult((BatchResult.stored(3, None, 0),
                                       BatchResult.out_of_order_sequence("out of order")))
    assert result.to_wire() == stored
    assert DeleteRecordsResult.from_wire({"error_code": 1}) == \
        DeleteRecordsResult.offset_out_of_range()


def rewrite(coordinate, byte_offset=0, byte_size=0):
    """The swap of one batch as the cleaner read it (``byte_size`` 0: dropped)."""
    return BatchRewrite(coordinate.base_offset, coordinate.object_key, coordinate.byte_offset,
                        coordinate.byte_size, byte_offset, byte_size)


async def test_compaction_swaps_batches_atomically_and_moves_the_checkpoint(control_plane):
    await commit(control_plane, "a", *[batch(count=2, size=100, byte_offset=100 * i)
                                       for i in range(4)], now=1)
    first, second, _, _ = control_plane.find_batches("t", 0, 0, 1 << 20)
    swap = Compact("t", 0, "c", 30, 5, 6, (rewrite(first, 0, 30), rewrite(second)),
                   tombstone_horizon_ms=65)
    assert await control_plane.compact(swap) == CompactResult(1, 1, 200, 30)
    info = control_plane.log_info("t", 0)
    assert (info.high_watermark, info.size_bytes, info.cleaned_offset) == (8, 230, 6)
    assert info.tombstone_horizon_ms == 65  # when the cleaner must look again
    batches = control_plane.find_batches("t", 0, 0, 1 << 20)
    assert [(c.base_offset, c.last_offset, c.object_key, c.byte_offset, c.byte_size)
            for c in batches] == [(0, 1, "c", 0, 30), (4, 5, "a", 200, 100),
                                  (6, 7, "a", 300, 100)]
    # The cleaning reached the first three batches at 5; the last is still dirty.
    assert [c.cleaned_at_ms for c in batches] == [5, 5, -1]
    # A read from inside the dropped batch starts at the next one; offsets never change.
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 2, 1 << 20)] == [4, 6]
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 3, 1)] == [4]
    assert live_bytes(control_plane, "c") == [30] and live_bytes(control_plane, "a") == [100, 100]
    # Replaying the record changes nothing: its object is known.
    stats = control_plane.stats()
    replay = await control_plane.compact(swap)
    assert replay.refused and control_plane.stats() == stats
    assert control_plane.log_info("t", 0) == info
    # A later cleaning drops the first batch: reads from the log start find the next one.
    await control_plane.compact(Compact("t", 0, "", 0, 7, 6, (rewrite(batches[0]),)))
    assert control_plane.log_info("t", 0).tombstone_horizon_ms == -1  # it kept none
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 0, 1 << 20)] == [4, 6]
    assert control_plane.files_to_delete(now_ms=7, delay_ms=0) == ["c"]


@pytest.mark.parametrize("race", ["retention", "delete_records", "merge", "delete_topic"])
async def test_compaction_is_refused_when_a_batch_changed_meanwhile(control_plane, race):
    await commit(control_plane, "a", batch(size=100), batch(size=100, byte_offset=100),
                 batch(size=100, byte_offset=200), now=1)
    first, second, _ = control_plane.find_batches("t", 0, 0, 1 << 20)
    if race == "retention":
        await control_plane.enforce_retention(retention(now=10, retention_bytes=250))
    elif race == "delete_records":
        await control_plane.delete_records(delete_records(1, now=10))
    elif race == "merge":
        await control_plane.merge(Merge("m", 100, 10, (BatchMove("t", 0, 1, "a", 0, 100),)))
    else:
        await control_plane.delete_topic(DeleteTopic("t", 10))
    before = [control_plane.log_info("t", 0), control_plane.find_batches("t", 0, 0, 1 << 20)]
    result = await control_plane.compact(
        Compact("t", 0, "c", 20, 11, 2, (rewrite(first, 0, 10), rewrite(second, 10, 10))))
    assert result.refused and (result.rewritten, result.dropped) == (0, 0)
    # Nothing moved, and the compacted object is garbage for the GC.
    assert [control_plane.log_info("t", 0),
            control_plane.find_batches("t", 0, 0, 1 << 20)] == before
    assert "c" in control_plane.files_to_delete(now_ms=11, delay_ms=0)


async def test_checkpoints_kept_and_where_the_log_may_start(control_plane):
    first = await control_plane.checkpoint_taken(CheckpointTaken(10, "c/10", keep=2))
    assert first == CheckpointTakenResult(-1)  # one checkpoint: the whole log is kept
    assert await control_plane.checkpoint_taken(
        CheckpointTaken(25, "c/25", keep=2)) == CheckpointTakenResult(11)
    assert await control_plane.checkpoint_taken(
        CheckpointTaken(40, "c/40", keep=2)) == CheckpointTakenResult(26)
    # One taken late (a deposed coordinator's) between those kept counts as any other.
    assert await control_plane.checkpoint_taken(
        CheckpointTaken(30, "c/30", keep=2)) == CheckpointTakenResult(31)
    record = CheckpointTaken(50, "c/50", keep=2)
    assert decode_request(record.to_wire()) == record


# --- live storage-mode switches (docs/mode-switch.md) ----------------------------------------


async def test_a_sealed_log_refuses_commits_retriably_and_answers_the_same_end(control_plane):
    await commit(control_plane, "o1", batch(count=3, producer=7, seq=0))
    first = await control_plane.seal_log(SealLog("t", 0))
    assert (first.error_code, first.offset) == (0, 3)
    carried = ProducerState.restore(base64.b64decode(first.producer_state))
    assert carried.producers[7].last_sequence == 2
    (refused,) = await commit(control_plane, "o2", batch(count=1, producer=7, seq=3))
    assert refused.error_code == NOT_LEADER_OR_FOLLOWER
    assert await control_plane.seal_log(SealLog("t", 0)) == first
    assert control_plane.log_info("t", 0).high_watermark == 3


async def test_an_opened_log_continues_at_the_boundary_with_the_carried_producers(control_plane):
    producers = ProducerState()
    producers.load_batch(batch(count=5, producer=7, seq=0), 0)
    state = base64.b64encode(producers.snapshot()).decode()
    opened = await control_plane.open_log(OpenLog("t", 0, 40, state))
    assert (opened.error_code, opened.offset) == (0, 40)
    # A retry of the producer's last batch is a duplicate; the next one takes offset 40.
    (duplicate,) = await commit(control_plane, "o1", batch(count=5, producer=7, seq=0))
    assert (duplicate.error_code, duplicate.base_offset) == (0, 0)
    (stored,) = await commit(control_plane, "o2", batch(count=2, producer=7, seq=5))
    assert (stored.error_code, stored.base_offset) == (0, 40)
    assert await control_plane.open_log(OpenLog("t", 0, 40, state)) == opened  # a repeat

    # Sealed again and reopened further on: the offsets in between are another engine's.
    await control_plane.seal_log(SealLog("t", 0))
    assert (await control_plane.open_log(OpenLog("t", 0, 41, state))).error_code == INVALID_REQUEST
    assert (await control_plane.open_log(OpenLog("t", 0, 60, state))).offset == 60
    (later,) = await commit(control_plane, "o3", batch(count=1))
    assert later.base_offset == 60
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 45, 1 << 20)] == [60]
    assert [c.base_offset for c in control_plane.find_batches("t", 0, 40, 1 << 20)] == [40, 60]
