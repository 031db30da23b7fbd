import random

import pytest

from coordinator.batch_state import BatchCoordinatorState, LogInfo

STORAGE_ERROR, UNKNOWN_TOPIC, OUT_OF_ORDER, FENCED_EPOCH, INVALID_RECORD = 56, 3, 45, 47, 87


@pytest.fixture
def state(tmp_path):
    s = BatchCoordinatorState(tmp_path / "coordinator.db")
    yield s
    s.close()


def batch(topic="t", partition=0, size=100, count=1, ts=1_000, log_append_time=False,
          producer=-1, epoch=0, seq=-1, byte_offset=0):
    return {"topic_id": topic, "partition": partition, "byte_offset": byte_offset,
            "byte_size": size, "record_count": count, "max_timestamp": ts,
            "log_append_time": log_append_time, "producer_id": producer,
            "producer_epoch": epoch, "base_sequence": seq,
            "last_sequence": -1 if seq < 0 else seq + count - 1}


def apply(state, record):
    return state.apply(state.applied_offset + 1, record)


def commit(state, key, *batches, now=1_000, request_id=None, object_size=None):
    record = {"type": "commit_file", "request_id": request_id or f"req-{key}",
              "object_key": key, "object_size": object_size or sum(b["byte_size"] for b in batches),
              "uploader": 1, "now_ms": now, "batches": list(batches)}
    return apply(state, record)["batches"]


def live_bytes(state, key):
    return {k: [b.byte_size for b in bs] for k, bs in state.merge_candidates(1 << 40, 100)}.get(key)


def test_offsets_have_no_gaps_or_duplicates_across_commits_and_partitions(state):
    expected = {0: 0, 1: 0}
    for i in range(20):
        batches = [batch(partition=i % 2, count=i + 1), batch(partition=1, count=2)]
        results = commit(state, f"o{i}", *batches)
        for b, r in zip(batches, results):
            assert r["error_code"] == 0 and r["base_offset"] == expected[b["partition"]]
            expected[b["partition"]] += b["record_count"]
    for partition, hw in expected.items():
        assert state.log_info("t", partition).high_watermark == hw
        coords = state.find_batches("t", partition, 0, 1 << 30)
        assert coords[0].base_offset == 0 and coords[-1].last_offset == hw - 1
        assert all(a.last_offset + 1 == b.base_offset for a, b in zip(coords, coords[1:]))
    assert state.logs() == [("t", 0), ("t", 1)]


def test_commit_is_idempotent_by_request_id(state):
    first = commit(state, "o1", batch(), batch(), request_id="r")
    stats = state.stats()
    assert commit(state, "o1", batch(), batch(), request_id="r") == first
    assert state.stats() == stats and state.log_info("t", 0).high_watermark == 2


def test_idempotent_producer(state):
    ok = commit(state, "o1", batch(producer=7, seq=0, count=2))[0]
    assert (ok["error_code"], ok["base_offset"]) == (0, 0)
    # A retry of the same sequence range answers with the original offset, stores nothing.
    commit(state, "o2", batch(producer=9, seq=0))
    retry, out_of_order, fenced = commit(
        state, "o3", batch(producer=7, seq=0, count=2, size=10),
        batch(producer=7, seq=5, size=20), batch(producer=7, epoch=-1, seq=2, size=30))
    assert (retry["error_code"], retry["base_offset"]) == (0, 0)
    assert out_of_order["error_code"] == OUT_OF_ORDER and out_of_order["error_message"]
    assert fenced["error_code"] == FENCED_EPOCH
    # The producer continues in sequence after the rejections.
    after = commit(state, "o4", batch(producer=7, seq=2))[0]
    assert (after["error_code"], after["base_offset"]) == (0, 3)
    assert state.log_info("t", 0) == LogInfo(0, 4, 300)
    # Rejected and duplicate bytes are dead: object o3 holds no live batch.
    assert state.stats()["dead_bytes"] == 60 and live_bytes(state, "o3") is None
    assert state.deletable_objects(now_ms=1_000, delay_ms=0) == ["o3"]
    invalid = commit(state, "o5", batch(producer=8, seq=-1))[0]
    assert invalid["error_code"] == INVALID_RECORD


def test_log_append_time(state):
    commit(state, "o1", batch(ts=50), now=1_000)
    result = commit(state, "o2", batch(ts=10, log_append_time=True), now=2_000)[0]
    assert result["log_append_time_ms"] == 2_000
    coordinate = state.offset_for_timestamp("t", 0, 1_500)
    assert (coordinate.base_offset, coordinate.timestamp_type) == (1, 1)
    assert coordinate.append_time_ms == 2_000
    assert state.offset_for_timestamp("t", 0, 40).base_offset == 0
    assert state.offset_for_timestamp("t", 0, 2_001) is None
    assert state.max_timestamp_batch("t", 0).base_offset == 1
    assert state.max_timestamp_batch("missing", 0) is None


def test_max_timestamp_ties_pick_the_earliest(state):
    commit(state, "o1", batch(ts=5), batch(ts=9), batch(ts=9), batch(ts=1))
    assert state.max_timestamp_batch("t", 0).base_offset == 1


def test_find_batches_boundaries_and_max_bytes(state):
    commit(state, "o1", *[batch(count=10, size=100, byte_offset=100 * i) for i in range(5)])
    apply(state, {"type": "delete_records", "topic_id": "t", "partition": 0, "offset": 15,
                  "now_ms": 0})
    assert state.find_batches("t", 0, 14, 1 << 20) == []  # below log start
    assert state.find_batches("t", 0, 50, 1 << 20) == []  # at HW
    assert [c.base_offset for c in state.find_batches("t", 0, 15, 250)] == [10, 20]
    assert [c.base_offset for c in state.find_batches("t", 0, 29, 200)] == [20, 30]
    # Always one batch, even over max_bytes.
    only = state.find_batches("t", 0, 49, 1)
    assert [(c.base_offset, c.last_offset, c.record_count) for c in only] == [(40, 49, 10)]
    assert state.find_batches("unknown", 0, 0, 100) == []


def test_delete_records(state):
    commit(state, "o1", batch(count=5), batch(count=5))
    delete = {"type": "delete_records", "topic_id": "t", "partition": 0, "now_ms": 5}
    assert apply(state, {**delete, "offset": 11}) == {"error_code": 1}
    assert apply(state, {**delete, "offset": 3}) == {"error_code": 0, "low_watermark": 3}
    assert state.log_info("t", 0) == LogInfo(3, 10, 200)  # the straddling batch stays
    assert apply(state, {**delete, "offset": 1}) == {"error_code": 0, "low_watermark": 3}
    assert apply(state, {**delete, "offset": -1}) == {"error_code": 0, "low_watermark": 10}
    assert state.log_info("t", 0) == LogInfo(10, 10, 0)
    assert state.deletable_objects(now_ms=5, delay_ms=0) == ["o1"]
    assert apply(state, {**delete, "partition": 9, "offset": 0}) == {"error_code": UNKNOWN_TOPIC}


def retention(state, now, retention_ms=-1, retention_bytes=-1):
    return apply(state, {"type": "retention", "now_ms": now, "topics": [
        {"topic_id": "t", "retention_ms": retention_ms, "retention_bytes": retention_bytes}]})


def removed(batches, size):
    return {"removed_batches": batches, "removed_bytes": size}


def test_retention_by_time(state):
    commit(state, "o1", batch(ts=100), batch(ts=200), batch(ts=300, count=2))
    assert retention(state, now=1_000, retention_ms=750) == removed(2, 200)
    assert state.log_info("t", 0) == LogInfo(2, 4, 100)
    assert retention(state, now=2_000, retention_ms=-1) == removed(0, 0)
    retention(state, now=2_000, retention_ms=1_000)
    assert state.log_info("t", 0) == LogInfo(4, 4, 0)


def test_retention_by_bytes(state):
    commit(state, "o1", *[batch(size=100, partition=p) for p in (0, 1) for _ in range(5)])
    assert retention(state, now=0, retention_bytes=250) == removed(6, 600)
    assert state.log_info("t", 1) == LogInfo(3, 5, 200)
    assert live_bytes(state, "o1") == [100] * 4


def test_delete_topic_then_commit_fails(state):
    commit(state, "o1", batch(topic="a", producer=1, seq=0), batch(topic="b"))
    assert apply(state, {"type": "delete_topic", "topic_id": "a", "now_ms": 7}) == {}
    assert state.logs() == [("b", 0)] and live_bytes(state, "o1") == [100]
    assert commit(state, "o2", batch(topic="a"))[0]["error_code"] == UNKNOWN_TOPIC
    assert state.log_info("a", 0) == LogInfo(0, 0, 0)


def test_objects_deletable_only_without_live_batches_after_delay(state):
    commit(state, "o1", batch(), now=100)
    assert state.deletable_objects(now_ms=10_000, delay_ms=0) == []
    apply(state, {"type": "delete_records", "topic_id": "t", "partition": 0, "offset": -1,
                  "now_ms": 500})
    assert state.deletable_objects(now_ms=1_499, delay_ms=1_000) == []
    assert state.deletable_objects(now_ms=1_500, delay_ms=1_000) == ["o1"]
    assert apply(state, {"type": "objects_deleted", "keys": ["o1", "orphan"]}) == {
        "deleted": ["o1", "orphan"], "refused": []}
    assert state.is_known_object("o1") and state.is_known_object("orphan")
    assert not state.is_known_object("o2")
    assert state.stats()["objects"] == 0


def test_objects_deleted_refuses_live_object_and_late_commit_fails(state):
    commit(state, "live", batch())
    assert apply(state, {"type": "objects_deleted", "keys": ["live", "gone"]}) == {
        "deleted": ["gone"], "refused": ["live"]}
    result = commit(state, "gone", batch(), batch())
    assert [r["error_code"] for r in result] == [STORAGE_ERROR] * 2
    assert result[0]["error_message"] == "object was garbage-collected before its commit"
    assert state.log_info("t", 0).high_watermark == 1 and live_bytes(state, "live") == [100]


def test_merge_repoints_skips_stale_moves_and_frees_old_objects(state):
    commit(state, "a", batch(size=10), batch(partition=1, size=20), now=1)
    commit(state, "b", batch(size=30), now=2)
    assert [key for key, _ in state.merge_candidates(max_object_size=100, limit=5)] == ["a", "b"]
    assert [key for key, _ in state.merge_candidates(max_object_size=25, limit=5)] == []
    # Partition 1's batch is deleted before the merge commits, so its move is skipped.
    apply(state, {"type": "delete_records", "topic_id": "t", "partition": 1, "offset": -1,
                  "now_ms": 3})
    moves = [{"topic_id": "t", "partition": 0, "base_offset": 0, "old_object_key": "a",
              "byte_offset": 0, "byte_size": 10},
             {"topic_id": "t", "partition": 1, "base_offset": 0, "old_object_key": "a",
              "byte_offset": 10, "byte_size": 20},
             {"topic_id": "t", "partition": 0, "base_offset": 1, "old_object_key": "b",
              "byte_offset": 30, "byte_size": 30}]
    merge = {"type": "merge", "object_key": "m", "object_size": 60, "now_ms": 4, "moves": moves}
    assert apply(state, merge) == {"moved": 2, "skipped": 1}
    assert [(c.object_key, c.byte_offset) for c in state.find_batches("t", 0, 0, 100)] == [
        ("m", 0), ("m", 30)]
    assert state.deletable_objects(now_ms=4, delay_ms=0) == ["a", "b"]
    # Replaying the same moves into another object finds them already moved.
    assert apply(state, {**merge, "object_key": "m2"}) == {"moved": 0, "skipped": 3}
    assert state.deletable_objects(now_ms=4, delay_ms=0) == ["a", "b", "m2"]


def random_records(rng, state, count):
    """Records as a coordinator would write them; merges move what ``state`` proposes."""
    for i in range(count):
        kind = rng.choices(["commit", "delete", "retention", "gc", "merge", "topic"],
                           [60, 8, 8, 8, 8, 1])[0]
        now = 1_000 * i
        if kind == "commit":
            batches = [batch(topic=rng.choice("xyz"), partition=rng.randrange(3),
                             size=rng.randrange(1, 500), count=rng.randrange(1, 5),
                             ts=now - rng.randrange(5_000), log_append_time=rng.random() < 0.3,
                             producer=rng.choice([-1, 1, 2]), epoch=rng.randrange(2),
                             seq=rng.randrange(6)) for _ in range(rng.randrange(1, 6))]
            yield {"type": "commit_file", "request_id": f"r{rng.randrange(i + 1)}",
                   "object_key": f"o{i}", "object_size": 3_000, "uploader": 0,
                   "now_ms": now, "batches": batches}
        elif kind == "delete":
            yield {"type": "delete_records", "topic_id": rng.choice("xyz"),
                   "partition": rng.randrange(3), "offset": rng.randrange(-1, 30), "now_ms": now}
        elif kind == "retention":
            yield {"type": "retention", "now_ms": now, "topics": [
                {"topic_id": t, "retention_ms": rng.choice([-1, 20_000]),
                 "retention_bytes": rng.choice([-1, 2_000])} for t in "xyz"]}
        elif kind == "gc":
            keys = [f"o{rng.randrange(i + 1)}" for _ in range(3)]
            yield {"type": "objects_deleted", "keys": keys}
        elif kind == "merge":
            moves = [{"topic_id": c.topic_id, "partition": c.partition,
                      "base_offset": c.base_offset, "old_object_key": key, "byte_offset": 0,
                      "byte_size": c.byte_size}
                     for key, coordinates in state.merge_candidates(5_000, 3) for c in coordinates]
            # The repeated first move is stale by then: it must be skipped.
            yield {"type": "merge", "object_key": f"m{i}", "object_size": 9_000, "now_ms": now,
                   "moves": moves + moves[:1]}
        else:
            yield {"type": "delete_topic", "topic_id": "z", "now_ms": now}


def answers(state):
    per_log = [(log, state.log_info(*log), state.find_batches(*log, 0, 1 << 30),
                state.offset_for_timestamp(*log, 100_000), state.max_timestamp_batch(*log))
               for log in state.logs()]
    stats = {k: v for k, v in state.stats().items() if k != "db_bytes"}
    return (state.applied_offset, per_log, stats, state.deletable_objects(400_000, 10_000),
            state.merge_candidates(2_000, 10))


def test_same_records_give_identical_results_and_answers(tmp_path):
    first, second = (BatchCoordinatorState(tmp_path / name) for name in ("a.db", "b.db"))
    rng = random.Random(42)
    records, results = [], []
    for record in random_records(rng, first, count=300):
        results.append(apply(first, record))
        records.append(record)
    assert [apply(second, r) for r in records] == results
    assert answers(first) == answers(second)
    # Reopened (producer state from the database, not the cache), it answers the same.
    second.close()
    reopened = BatchCoordinatorState(tmp_path / "b.db")
    assert answers(reopened) == answers(first)
    for i, record in enumerate(random_records(rng, first, count=50)):
        assert first.apply(1_000 + i, record) == reopened.apply(1_000 + i, record)
    assert answers(first) == answers(reopened)
    first.close()
    reopened.close()


def test_applied_offset_and_errors_roll_back(state):
    assert state.applied_offset == -1
    state.apply(5, {"type": "commit_file", "request_id": "r", "object_key": "o",
                    "object_size": 100, "uploader": 0, "now_ms": 0,
                    "batches": [batch(producer=1, seq=0)]})
    with pytest.raises(ValueError):
        state.apply(5, {"type": "retention", "now_ms": 0, "topics": []})
    with pytest.raises(ValueError):
        state.apply(6, {"type": "bogus"})
    before = state.stats()
    # The second batch is malformed: the first one's offsets and sequence are rolled back.
    with pytest.raises(KeyError):
        commit(state, "o2", batch(producer=1, seq=1), {"topic_id": "t"})
    assert state.applied_offset == 5 and state.stats() == before
    assert commit(state, "o3", batch(producer=1, seq=1))[0]["base_offset"] == 1


def test_reset_empties_everything(state):
    commit(state, "o1", batch(producer=1, seq=0))
    apply(state, {"type": "objects_deleted", "keys": ["x"]})
    state.reset()
    assert state.applied_offset == -1 and state.logs() == [] and not state.is_known_object("x")
    assert {k: v for k, v in state.stats().items() if k != "db_bytes"} == {
        "logs": 0, "batches": 0, "objects": 0, "live_bytes": 0, "dead_bytes": 0}
    # Producer state is gone too: any sequence is accepted again.
    assert commit(state, "o1", batch(producer=1, seq=3))[0]["error_code"] == 0
