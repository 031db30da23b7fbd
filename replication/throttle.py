"""The replication throttle (Kafka's ReplicationQuotaManager, KIP-73).

A reassignment copies whole logs to new replicas; these bytes can crowd out produce and
consume traffic. Two dynamic broker configs cap them, each in bytes per second:
``leader.replication.throttled.rate`` (what this broker, as leader, sends to throttled
followers) and ``follower.replication.throttled.rate`` (what it, as follower, fetches for
throttled partitions). The topic configs ``leader/follower.replication.throttled.replicas``
say which replicas are throttled (``partition:broker`` pairs, or ``*``). As in Kafka only
replicas out of the ISR are held back (an in-sync follower stays in sync whatever the
rate), and a throttled partition is left out of a fetch while the measured rate is over
the quota.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from storage.config import LONG_MAX

from .dynamic_config import DynamicConfigs

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
# Kafka's replication.quota.window.num x replication.quota.window.size.seconds.
QUOTA_WINDOWS = 11
QUOTA_WINDOW_S = 1.0


def throttled_rate(configs: DynamicConfigs, name: str) -> int | None:
    """The effective value of a throttled-rate broker config on this node (its own dynamic
    value, else the cluster-wide default); None when unthrottled (Kafka's default, Long.MAX)."""
    rate = configs.broker_number(name)
    return None if rate >= LONG_MAX else int(rate)


def lists_replica(throttled_replicas: str, partition: int, broker: int) -> bool:
    """Whether a ``*.replication.throttled.replicas`` value names ``partition`` on ``broker``."""
    if throttled_replicas.strip() == "*":
        return True
    return f"{partition}:{broker}" in {item.strip() for item in throttled_replicas.split(",")}


class ReplicationQuota:
    """Bytes per second over the last ``QUOTA_WINDOWS`` windows, against a rate read
    afresh at each check (the config may change at any time)."""

    def __init__(self, rate: Callable[[], int | None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        # (window start, bytes) of the recent windows, oldest first.
        self._windows: deque[list[float]] = deque()

    def record(self, nbytes: int) -> None:
        now = self.clock()
        start = now - now % QUOTA_WINDOW_S
        if not self._windows or self._windows[-1][0] != start:
            self._windows.append([start, 0])
        self._windows[-1][1] += nbytes
        while now - self._windows[0][0] >= QUOTA_WINDOWS * QUOTA_WINDOW_S:
            self._windows.popleft()

    def measured_rate(self) -> float:
        now = self.clock()
        recent = [(start, n) for start, n in self._windows
                  if now - start < QUOTA_WINDOWS * QUOTA_WINDOW_S]
        if not recent:
            return 0.0
        # As Kafka's Rate: over at least all but one of the windows, so a first burst
        # is not measured over a sliver of a second.
        elapsed = max(now - recent[0][0], (QUOTA_WINDOWS - 1) * QUOTA_WINDOW_S)
        return sum(n for _, n in recent) / elapsed

    def exceeded(self) -> bool:
        rate = self.rate()
        return rate is not None and self.measured_rate() > rate
