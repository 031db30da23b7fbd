"""Shared partitions' stream metadata (KIP-1183) as the controller commits it: only the
leader in its current epoch commits, only at the stream's end; compactions replace whole
ranges and free the objects nothing refers to; a deposed leader (a zombie) is refused; the
ISR of a shared partition is every live replica; the state survives a snapshot."""

from __future__ import annotations

import pytest
from support.coordinators import controller_with_brokers
from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerSettings
from replication.cluster_metadata import MetadataImage
from storage.shared import StreamCommit, StreamRange

SHARED = {"kipper.storage.mode": "shared"}


@pytest.fixture
async def controller(tmp_path):
    """A controller with three ready brokers, 0..2, and a shared topic led by broker 0."""
    controller = await controller_with_brokers(
        tmp_path, 3, ControllerSettings(auto_leader_rebalance=False))
    await controller.create_topic("s", -1, -1, SHARED, assignments=[(0, [0, 1, 2])])
    yield controller
    await controller.stop()


def info(controller: Controller):
    return controller.image.topics["s"].partitions[0]


def wal(key: str, base: int, last: int, epoch: int, position: int = 0) -> StreamRange:
    return StreamRange("kipper-wal", key, base, last, position, 100, epoch, "wal")


def append(epoch: int, *ranges: StreamRange) -> StreamCommit:
    return StreamCommit("s", 0, epoch, ranges)


async def fence(controller: Controller, node: int) -> None:
    await controller.heartbeat(node, controller.image.brokers[node].epoch, want_fence=False,
                               want_shut_down=True)


async def test_the_leader_commits_at_the_stream_end_only(controller):
    epoch = info(controller).leader_epoch
    (ok,) = await controller.commit_shared_streams(0, [append(epoch, wal("w1", 0, 9, epoch))])
    assert ok.error_code == ErrorCode.none
    (gap,) = await controller.commit_shared_streams(0, [append(epoch, wal("w2", 11, 19, epoch))])
    (overlap,) = await controller.commit_shared_streams(0, [append(epoch, wal("w2", 5, 19, epoch))])
    (other,) = await controller.commit_shared_streams(1, [append(epoch, wal("w2", 10, 19, epoch))])
    assert (gap.error_code, overlap.error_code, other.error_code) == (
        ErrorCode.out_of_order_sequence_number, ErrorCode.invalid_request,
        ErrorCode.not_leader_or_follower)
    assert controller.image.shared_streams.end_offset("s", 0) == 10


async def test_a_refused_commit_frees_only_objects_no_stream_refers_to(controller):
    """A commit whose answer was lost in a controller failover is sent again and refused (it
    landed: the stream no longer ends where it starts); its object must not be deleted.
    The objects of a commit refused outright are the committer's to delete."""
    epoch = info(controller).leader_epoch
    first = append(epoch, wal("w1", 0, 9, epoch))
    (landed,) = await controller.commit_shared_streams(0, [first])
    (retried,) = await controller.commit_shared_streams(0, [first])
    assert (landed.error_code, retried.error_code) == (ErrorCode.none, ErrorCode.invalid_request)
    assert retried.freed == ()
    (outright,) = await controller.commit_shared_streams(1, [append(epoch, wal("w2", 10, 19, epoch))])
    assert outright.error_code == ErrorCode.not_leader_or_follower
    assert outright.freed == (("kipper-wal", "w2"),)
    # A compaction sent again replaces its data object by itself: nothing freed.
    data = StreamRange("kipper-wal", "d1", 0, 9, 0, 100, epoch, "data")
    compaction = StreamCommit("s", 0, epoch, (data,), compaction=True)
    (compacted,) = await controller.commit_shared_streams(0, [compaction])
    (again,) = await controller.commit_shared_streams(0, [compaction])
    assert (compacted.freed, again.freed) == ((("kipper-wal", "w1"),), ())
    assert controller.image.shared_streams.stream("s", 0) == [data]


async def test_a_deposed_leader_is_refused_and_the_new_one_continues_at_the_same_offset(
        controller):
    old_epoch = info(controller).leader_epoch
    await controller.commit_shared_streams(0, [append(old_epoch, wal("w1", 0, 9, old_epoch))])
    await fence(controller, 0)
    new = info(controller)
    assert new.leader != 0 and new.leader_epoch > old_epoch
    assert sorted(new.isr) == [1, 2]  # any live replica may lead: nothing to catch up
    (zombie,) = await controller.commit_shared_streams(
        0, [append(old_epoch, wal("w-zombie", 10, 19, old_epoch))])
    assert zombie.error_code == ErrorCode.not_leader_or_follower
    (stale,) = await controller.commit_shared_streams(
        new.leader, [append(old_epoch, wal("w2", 10, 19, old_epoch))])
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    (ok,) = await controller.commit_shared_streams(
        new.leader, [append(new.leader_epoch, wal("w2", 10, 19, new.leader_epoch))])
    assert ok.error_code == ErrorCode.none
    assert [r.key for r in controller.image.shared_streams.stream("s", 0)] == ["w1", "w2"]


async def test_a_compaction_replaces_whole_ranges_and_frees_unreferenced_objects(controller):
    epoch = info(controller).leader_epoch
    await controller.create_topic("t", -1, -1, SHARED, assignments=[(0, [0])])
    t_epoch = controller.image.topics["t"].partitions[0].leader_epoch
    # w1 holds both partitions' records, w2 only s-0's.
    await controller.commit_shared_streams(0, [
        append(epoch, wal("w1", 0, 9, epoch)),
        StreamCommit("t", 0, t_epoch, (wal("w1", 0, 4, t_epoch, position=100),))])
    await controller.commit_shared_streams(0, [append(epoch, wal("w2", 10, 19, epoch))])
    data = StreamRange("kipper-wal", "d1", 0, 19, 0, 200, epoch, "data")
    (partial,) = await controller.commit_shared_streams(0, [StreamCommit(
        "s", 0, epoch, (StreamRange("kipper-wal", "d0", 0, 14, 0, 150, epoch, "data"),), True)])
    assert partial.error_code == ErrorCode.invalid_request
    (compacted,) = await controller.commit_shared_streams(
        0, [StreamCommit("s", 0, epoch, (data,), compaction=True)])
    assert compacted.error_code == ErrorCode.none
    assert compacted.freed == (("kipper-wal", "w2"),)  # w1 still holds t-0's records
    assert controller.image.shared_streams.stream("s", 0) == [data]


async def test_the_isr_of_a_shared_partition_comes_back_with_its_broker(controller):
    await fence(controller, 2)
    assert 2 not in info(controller).isr
    epoch = await controller.register_broker(2, "127.0.0.1", 9094, None)
    await controller.heartbeat(2, epoch, want_fence=False, want_shut_down=False)
    assert sorted(info(controller).isr) == [0, 1, 2]


async def test_streams_survive_a_snapshot(controller):
    epoch = info(controller).leader_epoch
    await controller.commit_shared_streams(0, [append(epoch, wal("w1", 0, 9, epoch))])
    await controller.commit_shared_streams(0, [append(epoch, wal("w2", 10, 19, epoch))])
    records = controller.image.snapshot_records()
    rebuilt, lagging = MetadataImage(), MetadataImage()
    for offset, record in enumerate(records):
        rebuilt.apply(offset, record)
    # A lagging image that already holds part of the stream ends with the same one.
    for offset, record in enumerate(records):
        lagging.apply(offset, record)
    for offset, record in enumerate(lagging.snapshot_delta(records)):
        lagging.apply(offset, record)
    for image in (rebuilt, lagging):
        assert image.shared_streams.stream("s", 0) == controller.image.shared_streams.stream("s", 0)
    assert rebuilt.checksum() == controller.image.checksum()


async def test_the_stream_keeps_the_epochs_of_its_leaderships(controller):
    first = info(controller).leader_epoch
    await controller.commit_shared_streams(0, [append(first, wal("w1", 0, 9, first))])
    await controller.commit_shared_streams(0, [append(first, wal("w2", 10, 19, first))])
    await fence(controller, 0)
    new = info(controller)
    await controller.commit_shared_streams(
        new.leader, [append(new.leader_epoch, wal("w3", 20, 29, new.leader_epoch))])
    epochs = [(first, 0), (new.leader_epoch, 20)]
    assert controller.image.shared_streams.stream_epochs("s", 0) == epochs
    rebuilt = MetadataImage()
    for offset, record in enumerate(controller.image.snapshot_records()):
        rebuilt.apply(offset, record)
    assert rebuilt.shared_streams.stream_epochs("s", 0) == epochs
