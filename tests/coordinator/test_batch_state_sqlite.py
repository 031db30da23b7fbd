"""What only the SQLite state machine does (the contract both control planes keep is in
test_control_plane_contract.py): replay gives the same results on every broker, reopening
reads the database, the applied offset, rollback of a failed record, reset."""

from __future__ import annotations

import random

import pytest
from support.control_plane_records import answers, batch, commit_file, random_records

from coordinator.diskless import BatchCoordinatorState
from storage.diskless.control_plane import (
    EnforceRetention,
    ObjectsDeleted,
    StateStats,
    decode_request,
)


@pytest.fixture
def state(tmp_path):
    s = BatchCoordinatorState(tmp_path / "coordinator.db")
    yield s
    s.close()


def apply(state, request):
    return state.apply(state.applied_offset + 1, request)


def commit(state, key, *batches, **kwargs):
    return list(apply(state, commit_file(key, *batches, **kwargs)).batches)


def test_same_records_give_identical_results_and_answers(tmp_path):
    first, second = (BatchCoordinatorState(tmp_path / name) for name in ("a.db", "b.db"))
    rng = random.Random(42)
    records, results = [], []
    for record in random_records(rng, first, count=300):
        results.append(apply(first, record))
        records.append(record)
    assert [apply(second, r) for r in records] == results
    assert first.applied_offset == second.applied_offset
    assert answers(first) == answers(second)
    # Reopened (producer state from the database, not the cache), it answers the same.
    second.close()
    reopened = BatchCoordinatorState(tmp_path / "b.db")
    assert reopened.applied_offset == first.applied_offset
    assert answers(reopened) == answers(first)
    for i, record in enumerate(random_records(rng, first, count=50)):
        assert first.apply(1_000 + i, record) == reopened.apply(1_000 + i, record)
    assert answers(first) == answers(reopened)
    first.close()
    reopened.close()


def test_applied_offset_and_errors_roll_back(state):
    assert state.applied_offset == -1
    state.apply(5, commit_file("o", batch(producer=1, seq=0), request_id="r", object_size=100,
                               uploader=0, now=0))
    with pytest.raises(ValueError):
        state.apply(5, EnforceRetention(0, ()))
    with pytest.raises(ValueError):
        state.apply(6, decode_request({"type": "bogus"}))
    before = state.stats()
    # The second batch is malformed: the first one's offsets and sequence are rolled back.
    with pytest.raises(TypeError):
        commit(state, "o2", batch(producer=1, seq=1), batch(count=None))
    assert state.applied_offset == 5 and state.stats() == before
    assert commit(state, "o3", batch(producer=1, seq=1))[0].base_offset == 1


def test_reset_empties_everything(state):
    commit(state, "o1", batch(producer=1, seq=0))
    apply(state, ObjectsDeleted(("x",)))
    state.reset()
    assert state.applied_offset == -1 and state.logs() == [] and not state.is_known_object("x")
    assert state.stats() == StateStats(logs=0, batches=0, objects=0, live_bytes=0, dead_bytes=0)
    # Producer state is gone too: any sequence is accepted again.
    assert commit(state, "o1", batch(producer=1, seq=3))[0].error_code == 0
