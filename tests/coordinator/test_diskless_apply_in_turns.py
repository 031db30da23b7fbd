"""Every broker applies the batch coordinator's log (``__diskless-metadata``) a record at a
time, giving the event loop its turn between records: at 10,000 partitions one commit or
merge record takes 100-150 ms to apply, and one read of the log brings several."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from coordinator.diskless import BatchCoordinator
from coordinator.state_machine import APPLY_SLICE_S
from protocol.records import encode_json_records, iter_batches
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, MetadataImage
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.diskless.control_plane import COORDINATOR_MAX_MESSAGE_BYTES, ObjectsDeleted

RECORDS = 6


@dataclass
class FollowerReplica:
    """``__diskless-metadata-0`` as a follower holds it: everything in its log committed."""

    log: ClassicLog
    is_leader: bool = False
    leader_epoch_start_offset: int = 0

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset


async def _never_called(*_args):
    raise AssertionError("not called by this test")


async def test_a_read_of_many_records_is_applied_with_turns_in_between(tmp_path, monkeypatch):
    log = ClassicLog(DISKLESS_METADATA_TOPIC, 0,
                     LogConfig(max_message_bytes=COORDINATOR_MAX_MESSAGE_BYTES), tmp_path / "log")
    replica = FollowerReplica(log)
    for i in range(RECORDS):
        records = encode_json_records([ObjectsDeleted((f"wal/{i}",)).to_wire()])
        await log.append(records, list(iter_batches(records)), 0)
    coordinator = BatchCoordinator(0, tmp_path / "state.db", MetadataImage(), lambda: replica,
                                   _never_called, _never_called, _never_called, 1.0)
    turns = 0

    async def count_turns():
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    turns_at_apply: list[int] = []
    machine = coordinator.applier.machine
    apply = machine.apply

    def slow_apply(offset, record):
        turns_at_apply.append(turns)
        time.sleep(APPLY_SLICE_S)  # as long as the event loop's slice: a large record
        return apply(offset, record)

    monkeypatch.setattr(machine, "apply", slow_apply)
    counter = asyncio.create_task(count_turns())
    try:
        await asyncio.sleep(0)
        assert await coordinator._apply_committed(replica)
        assert coordinator.applier.next_offset == RECORDS
        assert len(turns_at_apply) == RECORDS
        # The loop ran other work between every two records.
        assert all(b > a for a, b in zip(turns_at_apply, turns_at_apply[1:])), turns_at_apply
    finally:
        counter.cancel()
        await coordinator.stop()
        await log.close()
