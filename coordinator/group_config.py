"""Settings of the group coordinator and its ``__consumer_offsets`` topic.

Names and meanings are Kafka's broker settings (``group.initial.rebalance.delay.ms`` is
``initial_rebalance_delay_ms`` here, and so on); where a default differs, the reason is
given next to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .internal_topic import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, InternalTopic


@dataclass(frozen=True)
class GroupConfig:
    # Kafka waits 3000 ms after an empty group's first JoinGroup for more members to arrive
    # before the first generation; kipper defaults to 100 ms so a consumer (and a test)
    # starts quickly. A fleet of consumers starting together wants Kafka's value.
    initial_rebalance_delay_ms: int = 100
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    # Kafka creates 50 partitions; 10 spread groups well enough for the cluster sizes
    # kipper runs, and each needs its own log replayed when the coordinator loads.
    offsets_topic_num_partitions: int = 10
    # Kafka's default; kipper lowers it to the live broker count when it creates the
    # topic (on the first FindCoordinator), where Kafka would refuse until 3 are up.
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offset_metadata_max_bytes: int = 4096
    # KIP-848 consumer groups (Kafka's group.consumer.* settings and defaults).
    consumer_heartbeat_interval_ms: int = 5_000
    # kipper's own: a member still moving to its target (partitions to revoke, or to take
    # once others released them) is told to come back this soon, so partitions handed over
    # pause for about this long rather than a whole heartbeat interval (Kafka has no such
    # setting: equal to the interval, it behaves as Kafka).
    consumer_reconciling_heartbeat_interval_ms: int = 500
    consumer_session_timeout_ms: int = 45_000
    # The server-side assignors members may ask for; the first is the default.
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_max_size: int = 2**31 - 1

    def __post_init__(self) -> None:
        from .group.assignors import ASSIGNORS  # the assignors live with the groups
        unknown = [name for name in self.consumer_assignors if name not in ASSIGNORS]
        if unknown or not self.consumer_assignors:
            raise ValueError(f"unknown consumer group assignors {unknown}: "
                             f"choose among {sorted(ASSIGNORS)}")

    def offsets_topic(self) -> InternalTopic:
        return InternalTopic(OFFSETS_TOPIC, self.offsets_topic_num_partitions,
                             self.offsets_topic_replication_factor,
                             self.offsets_topic_segment_bytes)


# --- share groups (KIP-932) ------------------------------------------------------------------

@dataclass(frozen=True)
class ShareGroupConfig:
    """Kafka's ``group.share.*`` and ``share.coordinator.*`` broker settings; the group
    configs ``share.*`` (DescribeConfigs of a group) report them."""
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    # The ``share.auto.offset.reset`` group config, for every share group (kipper has no
    # per-group configs yet): ``latest`` (Kafka's default) or ``earliest``.
    auto_offset_reset: str = "latest"
    # Kafka creates 50 partitions; 10 as for __consumer_offsets.
    state_topic_num_partitions: int = 10
    state_topic_replication_factor: int = 3
    state_topic_segment_bytes: int = 100 * 1024 * 1024

    def state_topic(self) -> InternalTopic:
        return InternalTopic(SHARE_GROUP_STATE_TOPIC, self.state_topic_num_partitions,
                             self.state_topic_replication_factor,
                             self.state_topic_segment_bytes)
