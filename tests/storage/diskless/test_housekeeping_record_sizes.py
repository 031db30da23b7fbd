"""The records housekeeping writes fit the batch coordinator's log at any scale
(coordinator/diskless/housekeeping.py, against the in-memory control plane and the session
S3 server): the deletion of tens of thousands of emptied objects and the retention of
thousands of topics take several records, and a record that cannot be made to fit fails
the step with one line, every run."""

from __future__ import annotations

import logging
import time
import uuid

import storage.diskless.control_plane as control_plane_module
from protocol.records import validate_produce_records
from replication.cluster_metadata import MetadataImage
from storage.diskless.control_plane import (
    MAX_REQUEST_BYTES,
    CommitBatch,
    CommitFile,
    DeleteRecords,
    EnforceRetention,
    Merge,
    ObjectsDeleted,
    wire_size,
)
from storage.diskless.wal_writer import WalWriter

# More keys than one ObjectsDeleted record can name: about 22,000 of a cluster's, fewer of
# these tests' (their key prefix is longer).
EMPTIED_OBJECTS = 25_000
# More topics than one EnforceRetention record can name (about 10,000).
RETAINED_TOPICS = 12_000


async def test_tens_of_thousands_of_emptied_objects_are_deleted_in_records_that_fit(
        control_plane, s3_prefix, make_housekeeping):
    now_ms = time.time_ns() // 1_000_000
    keys = [f"{s3_prefix}wal/{i:032x}" for i in range(EMPTIED_OBJECTS)]
    for key in keys:  # a batch each, then all removed at once (a topic's records deleted)
        control_plane.apply(CommitFile(key, key, 100, 1, now_ms, (
            CommitBatch("topic-id", 0, 0, 100, 1, now_ms, False, -1, -1, -1, -1),)))
    control_plane.apply(DeleteRecords("topic-id", 0, -1, now_ms))
    housekeeping = make_housekeeping(object_delete_delay_ms=0)

    await housekeeping.run_once()

    deletions = control_plane.submitted(ObjectsDeleted)
    assert sum(map(wire_size, keys)) > MAX_REQUEST_BYTES  # one record could not name them
    assert len(deletions) >= 2 and all(wire_size(d) <= MAX_REQUEST_BYTES for d in deletions)
    assert [key for d in deletions for key in d.keys] == keys
    assert housekeeping.stats.deleted_objects == EMPTIED_OBJECTS
    assert control_plane.files_to_delete(now_ms + 1, 0) == []


async def test_retention_of_thousands_of_topics_is_enforced_in_records_that_fit(
        control_plane, make_housekeeping):
    image = MetadataImage()
    topic_ids = [str(uuid.UUID(int=i)) for i in range(RETAINED_TOPICS)]
    for offset, topic_id in enumerate(topic_ids):
        image.apply(offset, {"type": "topic", "name": f"t{offset}", "id": topic_id, "configs": {
            "kipper.storage.mode": "diskless", "retention.ms": "604800000"}})
    housekeeping = make_housekeeping(image)

    await housekeeping.apply_retention(time.time_ns() // 1_000_000)

    runs = control_plane.submitted(EnforceRetention)
    assert sum(wire_size(limits) for run in runs for limits in run.topics) > MAX_REQUEST_BYTES
    assert len(runs) >= 2 and all(wire_size(run) <= MAX_REQUEST_BYTES for run in runs)
    assert sorted(limits.topic_id for run in runs for limits in run.topics) == topic_ids
    assert housekeeping.stats.retention_runs == 1


async def test_a_record_that_cannot_fit_fails_its_step_with_one_line(
        control_plane, store, s3_prefix, build_batch, make_housekeeping, monkeypatch, caplog):
    writer = WalWriter(store, control_plane, s3_prefix, node_id=1)
    for value in (b"a", b"b"):
        records = build_batch([value])
        writer.append("topic-id", 0, records, validate_produce_records(records), False)
        await writer.close()  # a WAL object each
    housekeeping = make_housekeeping(merge_min_objects=2)
    monkeypatch.setattr(control_plane_module, "MAX_REQUEST_LIST_BYTES", 10)

    await housekeeping.run_once()
    await housekeeping.run_once()

    refusals = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in refusals] == [
        "diskless merge refused by the batch coordinator"] * 2
    assert "exceeds the 10 a request's list may take" in refusals[0].getMessage()
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in refusals)
    assert control_plane.submitted(Merge) == []
    assert len(control_plane.merge_candidates(1 << 40, 100)) == 2  # nothing moved
