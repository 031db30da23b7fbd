"""acks=all appends wait on their leader until the ISR holds them (replication.partition):
each completes when the high watermark passes its records, and only then; a change of
leadership fails them; those that time out or whose connection closes are not kept."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from protocol.records import build_batch, validate_produce_records
from replication.cluster_metadata import PartitionInfo
from replication.partition import PartitionError, ReplicatedPartition
from storage.classic.log import ClassicLog
from storage.config import LogConfig

LEADER, FOLLOWERS = 0, (1, 2)
RECORDS_PER_APPEND = 3


def leader_partition(tmp_path, leader: int = LEADER, epoch: int = 1) -> ReplicatedPartition:
    log = ClassicLog("acks", 0, LogConfig(), tmp_path / "acks-0")
    return ReplicatedPartition(LEADER, log, info(leader, epoch))


def info(leader: int, epoch: int) -> PartitionInfo:
    replicas = [LEADER, *FOLLOWERS]
    return PartitionInfo("acks", 0, replicas, replicas, leader, epoch)


def append(partition: ReplicatedPartition, timeout_s: float = 10.0) -> asyncio.Task:
    batch = bytes(build_batch([(None, b"value")] * RECORDS_PER_APPEND, 1_700_000_000_000))
    return asyncio.ensure_future(partition.append_as_leader(
        bytearray(batch), validate_produce_records(batch), -1, timeout_s))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_append_completes_once_every_isr_follower_holds_it(tmp_path):
    partition = leader_partition(tmp_path)
    appends = [append(partition) for _ in range(3)]
    await settle()
    assert not any(task.done() for task in appends)

    second_end = 2 * RECORDS_PER_APPEND
    partition.record_follower_fetch(FOLLOWERS[0], second_end)
    await settle()
    assert not any(task.done() for task in appends), "one follower of two holds them"

    partition.record_follower_fetch(FOLLOWERS[1], second_end)
    await settle()
    assert [task.done() for task in appends] == [True, True, False]
    assert [task.result().base_offset for task in appends[:2]] == [0, RECORDS_PER_APPEND]

    for follower in FOLLOWERS:
        partition.record_follower_fetch(follower, 3 * RECORDS_PER_APPEND)
    assert (await appends[2]).base_offset == second_end


async def test_a_new_leader_fails_the_appends_waiting_on_the_old_one(tmp_path):
    partition = leader_partition(tmp_path)
    appends = [append(partition) for _ in range(3)]
    await settle()
    partition.update_info(info(leader=FOLLOWERS[0], epoch=2))
    for task in appends:
        with pytest.raises(PartitionError) as raised:
            await task
        assert raised.value.error_code == ErrorCode.not_leader_or_follower


async def test_appends_that_time_out_are_not_kept_while_the_isr_holds_back(tmp_path):
    partition = leader_partition(tmp_path)
    appends = [append(partition, timeout_s=0.05) for _ in range(200)]
    for task in appends:
        with pytest.raises(PartitionError) as raised:
            await task
        assert raised.value.error_code == ErrorCode.request_timed_out
    assert not partition._commit_waiters

    # Those still waiting are kept, and complete.
    later = [append(partition) for _ in range(2)]
    await settle()
    assert len(partition._commit_waiters) == 2
    for follower in FOLLOWERS:
        partition.record_follower_fetch(follower, partition.log.log_end_offset)
    await asyncio.gather(*later)


async def test_appends_whose_connection_closed_are_not_kept(tmp_path):
    partition = leader_partition(tmp_path)
    appends = [append(partition) for _ in range(100)]
    await settle()
    for task in appends:
        task.cancel()
    await asyncio.gather(*appends, return_exceptions=True)
    assert not partition._commit_waiters
