"""The replication throttle's parts: the effective rate, the replica lists, the quota."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs
from replication.fetcher import LeaderFetcher
from replication.throttle import LEADER_RATE, ReplicationQuota, lists_replica, throttled_rate


def test_a_brokers_own_rate_overrides_the_cluster_default():
    image = MetadataImage()
    node_1, node_2 = (DynamicConfigs(node, image, {}, {}) for node in (1, 2))
    assert throttled_rate(node_1, LEADER_RATE) is None
    image.apply(0, {"type": "broker_config", "resource": "", "configs": {LEADER_RATE: "100"}})
    assert throttled_rate(node_1, LEADER_RATE) == 100
    image.apply(1, {"type": "broker_config", "resource": "1", "configs": {LEADER_RATE: "7"}})
    assert (throttled_rate(node_1, LEADER_RATE), throttled_rate(node_2, LEADER_RATE)) == (7, 100)


def test_throttled_replica_lists():
    assert lists_replica("*", 3, 1)
    assert lists_replica("0:1, 3:1", 3, 1)
    assert not lists_replica("0:1,3:2", 3, 1)
    assert not lists_replica("", 0, 0)


def test_the_quota_is_exceeded_while_the_measured_rate_is_over_it():
    now = [100.0]
    rate: list[int | None] = [1000]
    quota = ReplicationQuota(lambda: rate[0], clock=lambda: now[0])
    quota.record(9_000)  # measured over at least ten windows: 900 B/s
    assert not quota.exceeded()
    quota.record(2_000)
    assert quota.exceeded()
    rate[0] = None  # the config removed: unthrottled
    assert not quota.exceeded()
    rate[0] = 1000
    now[0] += 11  # the bytes age out of the windows
    assert not quota.exceeded()


class RecordingConnection:
    """A leader that answers every fetch with ``size`` bytes of records per partition."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fetched: list[list[int]] = []

    async def call(self, api_key, request, timeout):
        asked = [p.partition for topic in request.topics for p in topic.partitions]
        self.fetched.append(asked)
        # Session id 0: the leader keeps no session, so every fetch lists every partition.
        return SimpleNamespace(error_code=ErrorCode.none, session_id=0, responses=[
            SimpleNamespace(topic="t", partitions=[
                SimpleNamespace(partition_index=p, records=b"r" * self.size) for p in asked])])


def fake_partition(index: int) -> SimpleNamespace:
    log = SimpleNamespace(log_end_offset=0, log_start_offset=0, latest_epoch=lambda: -1,
                          follower_append_waits=False)
    return SimpleNamespace(topic="t", index=index, leader_epoch=0, log=log)


async def test_a_follower_leaves_throttled_partitions_out_while_over_the_quota():
    connection = RecordingConnection(5_000)
    quota = ReplicationQuota(lambda: 1_000)
    fetcher = LeaderFetcher(1, 0, connection, lambda p: p.index == 1, quota)
    fetcher._apply = lambda partition, data: asyncio.sleep(0, True)  # (nothing to store)
    for index in (0, 1):
        fetcher.partitions[("t", index)] = fake_partition(index)
    await fetcher._fetch_once()  # nothing measured yet: both fetched, 5 kB counted
    await fetcher._fetch_once()  # 5 kB in 10 s: under 1 kB/s
    await fetcher._fetch_once()  # 10 kB: not over yet (exactly 1 kB/s)
    await fetcher._fetch_once()
    assert connection.fetched == [[0, 1], [0, 1], [0, 1], [0]]
