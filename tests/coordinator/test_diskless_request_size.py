"""The size bound of the batch coordinator's records (storage/diskless/control_plane.py,
coordinator/diskless/batch_coordinator.py): a request of MAX_REQUEST_BYTES is a record its
log takes, a larger one is refused with RequestTooLarge (RecordRejected: never retried),
lists are cut into requests that fit, and a WAL object of COMMIT_MAX_BATCHES batches
commits in one record however wide its batches."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coordinator.diskless import BatchCoordinator
from protocol.records import BatchHeader, encode_json_records, iter_batches
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, MetadataImage
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.diskless.control_plane import (
    COMMIT_MAX_BATCHES,
    COORDINATOR_MAX_MESSAGE_BYTES,
    MAX_REQUEST_BYTES,
    CommitBatch,
    CommitFile,
    ObjectsDeleted,
    RecordRejected,
    RequestTooLarge,
    split_to_fit,
    wire_size,
)
from storage.log import AppendResult


@dataclass
class LeaderReplica:
    """``__diskless-metadata-0`` led by this broker: appends go straight to its log."""

    log: ClassicLog
    is_leader: bool = True

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float) -> AppendResult:
        return await self.log.append(records, batches, 0)


async def _never_called(*_args):
    raise AssertionError("not called by these tests")


@pytest.fixture
async def replica(tmp_path):
    config = LogConfig(max_message_bytes=COORDINATOR_MAX_MESSAGE_BYTES)
    replica = LeaderReplica(ClassicLog(DISKLESS_METADATA_TOPIC, 0, config, tmp_path / "log"))
    yield replica
    await replica.log.close()


def deletion_of(size: int) -> ObjectsDeleted:
    """An ObjectsDeleted request of exactly ``size`` bytes of JSON."""
    request = ObjectsDeleted(("",))
    return ObjectsDeleted(("k" * (size - wire_size(request)),))


async def test_the_largest_request_is_a_record_the_coordinator_s_log_takes(replica):
    records = encode_json_records([deletion_of(MAX_REQUEST_BYTES).to_wire()])
    appended = await replica.log.append(records, list(iter_batches(records)), 0)
    assert appended.base_offset == 0


async def test_a_request_the_log_refuses_as_too_large_fails_without_retry(replica, tmp_path):
    coordinator = BatchCoordinator(0, tmp_path / "state.db", MetadataImage(), lambda: replica,
                                   _never_called, _never_called, _never_called, 1.0)
    try:
        with pytest.raises(RequestTooLarge, match=(
                f"objects_deleted request refused: record batch of [0-9]+ bytes exceeds "
                f"max.message.bytes={COORDINATOR_MAX_MESSAGE_BYTES} of "
                f"{DISKLESS_METADATA_TOPIC}-0")) as refused:
            await coordinator.append(deletion_of(COORDINATOR_MAX_MESSAGE_BYTES), 1.0)
        assert isinstance(refused.value, RecordRejected)  # the internal API's invalid_request
        assert replica.log.log_end_offset == 0
    finally:
        await coordinator.stop()


def test_a_list_is_cut_in_order_into_requests_that_fit():
    keys = [f"wal/{i:032x}" for i in range(50_000)]  # 40 bytes each in the list
    requests = [ObjectsDeleted(some_keys) for some_keys in split_to_fit(keys)]
    assert len(requests) == 2 and all(wire_size(r) <= MAX_REQUEST_BYTES for r in requests)
    assert [key for r in requests for key in r.keys] == keys
    with pytest.raises(RequestTooLarge, match="one str of [0-9]+ bytes exceeds"):
        split_to_fit(["k" * MAX_REQUEST_BYTES])


def test_a_wal_object_of_the_most_batches_commits_in_one_record_however_wide_they_are():
    widest = CommitBatch("7c7b7a3e-05a1-4d3c-9a4b-5d1f0e2c3b4a", -2**31, -2**63, -2**31, -2**31,
                         -2**63, False, -2**63, -2**15, -2**31, -2**31, True, False, -2**31)
    key = "a-long-key-prefix/" * 10 + "wal/" + "f" * 32
    commit = CommitFile(f"2147483647:{key}", key, 2**63 - 1, 2**31 - 1, 2**63 - 1,
                        (widest,) * COMMIT_MAX_BATCHES)
    assert wire_size(commit) <= MAX_REQUEST_BYTES
    assert 2_000 < COMMIT_MAX_BATCHES < 2_500
