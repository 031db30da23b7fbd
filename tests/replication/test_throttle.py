"""The replication throttle's parts: the effective rate, the replica lists, the quota."""

from __future__ import annotations

from replication.cluster_metadata import MetadataImage
from replication.throttle import LEADER_RATE, ReplicationQuota, lists_replica, throttled_rate


def test_a_brokers_own_rate_overrides_the_cluster_default():
    image = MetadataImage()
    assert throttled_rate(image, 1, LEADER_RATE) is None
    image.apply(0, {"type": "broker_config", "resource": "", "configs": {LEADER_RATE: "100"}})
    assert throttled_rate(image, 1, LEADER_RATE) == 100
    image.apply(1, {"type": "broker_config", "resource": "1", "configs": {LEADER_RATE: "7"}})
    assert (throttled_rate(image, 1, LEADER_RATE), throttled_rate(image, 2, LEADER_RATE)) == (7, 100)


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
