"""Checkpoints of the batch coordinator's SQLite state (coordinator/diskless/checkpoints.py):
a checkpoint plus the records after it rebuild the state a full replay builds, a damaged
checkpoint is refused, an unreadable database is set aside, and the checkpoint objects are
named so that listing them gives their offsets in order."""

from __future__ import annotations

import random

import pytest
from support.control_plane_records import answers, random_records

from coordinator.diskless import BatchCoordinatorState, CheckpointStore
from coordinator.diskless.checkpoints import copy_state, write_checkpoint
from storage.diskless.control_plane import CheckpointTaken


def replayed(state, records):
    for record in records:
        state.apply(state.applied_offset + 1, record)


def test_checkpoint_and_tail_answer_as_a_full_replay(tmp_path):
    full = BatchCoordinatorState(tmp_path / "full.db")
    records = []
    for record in random_records(random.Random(7), full, count=300):
        records.append(record)
        replayed(full, [record])
        if len(records) == 150:
            # Taken while the state is open and written to, as on the coordinator.
            assert copy_state(full.path, tmp_path / "copy") == 149
    data = (tmp_path / "copy").read_bytes()

    rebuilt = BatchCoordinatorState(tmp_path / "rebuilt.db")
    replayed(rebuilt, records[:3])  # whatever it held before is replaced
    assert write_checkpoint(data, tmp_path / "download") == 149
    rebuilt.replace_with(tmp_path / "download")
    assert rebuilt.applied_offset == 149
    replayed(rebuilt, records[150:])
    assert answers(rebuilt) == answers(full)
    full.close()
    rebuilt.close()


def test_the_checkpoints_recorded_are_part_of_the_state(tmp_path):
    state = BatchCoordinatorState(tmp_path / "state.db")
    assert state.latest_checkpoint() == -1
    replayed(state, [CheckpointTaken(0, "c/0", 2), CheckpointTaken(1, "c/1", 2)])
    assert copy_state(state.path, tmp_path / "copy") == 1
    state.close()
    copied = BatchCoordinatorState(tmp_path / "copy")
    assert copied.latest_checkpoint() == 1
    copied.close()


def test_records_toward_the_next_checkpoint_count_across_restarts(tmp_path):
    """A checkpoint is due after interval_records records counted in the state, not in
    the process: a broker restarted before it alone applies that many still checkpoints."""
    rng = random.Random(3)
    state = BatchCoordinatorState(tmp_path / "state.db")
    replayed(state, random_records(rng, state, count=20))
    replayed(state, [CheckpointTaken(state.applied_offset, "c/19", 2)])
    replayed(state, random_records(rng, state, count=15))
    state.close()
    reopened = BatchCoordinatorState(tmp_path / "state.db")
    assert reopened.records_since_checkpoint() == 16  # the CheckpointTaken record and 15
    replayed(reopened, random_records(rng, reopened, count=5))
    assert reopened.records_since_checkpoint() == 21
    reopened.close()


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_checkpoint_is_refused(tmp_path, damage):
    state = BatchCoordinatorState(tmp_path / "state.db")
    replayed(state, list(random_records(random.Random(1), state, count=50)))
    copy_state(state.path, tmp_path / "copy")
    state.close()
    data = (tmp_path / "copy").read_bytes()
    data = data[:len(data) // 2] if damage == "truncated" else b"x" * len(data)
    with pytest.raises(ValueError):
        write_checkpoint(data, tmp_path / "download")
    assert not (tmp_path / "download").exists()


def test_an_unreadable_database_is_set_aside(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database" * 1000)
    state = BatchCoordinatorState(path)
    assert state.applied_offset == -1
    assert (tmp_path / "state.db.corrupt").exists()
    state.close()


class _Bucket:
    """The object store calls CheckpointStore makes, in a dict."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    async def put(self, bucket, key, data):
        self.objects[key] = bytes(data)

    async def get(self, bucket, key):
        return self.objects[key]

    async def delete(self, bucket, keys):
        for key in keys:
            del self.objects[key]

    async def list_objects(self, bucket, prefix):
        for key in sorted(self.objects):
            if key.startswith(prefix):
                yield type("Info", (), {"key": key})


async def test_checkpoint_objects_are_listed_by_offset_and_old_ones_deleted():
    bucket = _Bucket()
    store = CheckpointStore(bucket, "cluster-a/")
    for offset in (1200, 99, 100_000):
        await store.put(offset, b"db")
    await bucket.put("b", "cluster-a/coordinator-checkpoints/stray.tmp", b"")
    assert await store.offsets() == [99, 1200, 100_000]
    assert await store.delete_below(1200) == 1
    assert await store.offsets() == [1200, 100_000]
    assert await store.get(1200) == b"db"
    assert "cluster-a/coordinator-checkpoints/00000000000000001200.sqlite" in bucket.objects
