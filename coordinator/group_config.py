"""Settings of the group coordinator and its ``__consumer_offsets`` topic, and the group
configs (KIP-848/KIP-932) that one group may set over them.

Names and meanings are Kafka's broker settings (``group.initial.rebalance.delay.ms`` is
``initial_rebalance_delay_ms`` here, and so on); where a default differs, the reason is
given next to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from replication.cluster_metadata import MetadataImage
from storage.config import InvalidConfig

from .internal_topic import OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, InternalTopic


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    """The group configs a KIP-848 consumer group's members follow: set on the group, else
    the broker's."""
    session_timeout_ms: int
    heartbeat_interval_ms: int


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

    def consumer_group_defaults(self) -> ConsumerGroupSettings:
        """What a consumer group follows when it sets no group configs."""
        return ConsumerGroupSettings(self.consumer_session_timeout_ms,
                                     self.consumer_heartbeat_interval_ms)

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
    # The ``share.auto.offset.reset`` of share groups that do not set it: ``latest``
    # (Kafka's default) or ``earliest``.
    auto_offset_reset: str = "latest"
    # Kafka creates 50 partitions; 10 as for __consumer_offsets.
    state_topic_num_partitions: int = 10
    state_topic_replication_factor: int = 3
    state_topic_segment_bytes: int = 100 * 1024 * 1024

    def state_topic(self) -> InternalTopic:
        return InternalTopic(SHARE_GROUP_STATE_TOPIC, self.state_topic_num_partitions,
                             self.state_topic_replication_factor,
                             self.state_topic_segment_bytes)


# --- group configs (KIP-848, KIP-932) --------------------------------------------------------

@dataclass(frozen=True)
class GroupConfigDef:
    """A group config (Kafka's GroupConfig): set on one group with IncrementalAlterConfigs of
    a GROUP resource, else the broker setting named by ``default`` applies."""
    name: str
    kind: str  # "int" or "string" (DescribeConfigs' config_type)
    doc: str
    default: Callable[[GroupConfig, ShareGroupConfig], object]
    # kipper applies a value set on one group (the others are described, not alterable).
    per_group: bool = False
    minimum: int | None = None
    choices: tuple[str, ...] = ()

    def validate(self, value: str) -> None:
        """Kafka's ConfigDef checks of a value (type, then range or valid strings)."""
        if self.kind == "int":
            try:
                number = int(value.strip())
            except ValueError:
                number = None
            if number is None or not -2**31 <= number < 2**31:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    "Not a number of type INT")
            if self.minimum is not None and number < self.minimum:
                raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                    f"Value must be at least {self.minimum}")
        elif self.choices and value not in self.choices:
            raise InvalidConfig(f"Invalid value {value} for configuration {self.name}: "
                                f"String must be one of: {', '.join(self.choices)}")


CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_RECORD_LOCK_DURATION_MS = "share.record.lock.duration.ms"
SHARE_SESSION_TIMEOUT_MS = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS = "share.heartbeat.interval.ms"

GROUP_CONFIGS = {d.name: d for d in (
    GroupConfigDef(CONSUMER_SESSION_TIMEOUT_MS, "int",
                   "Session timeout of the members of a consumer group (KIP-848 protocol)",
                   lambda group, share: group.consumer_session_timeout_ms, per_group=True,
                   minimum=1),
    GroupConfigDef(CONSUMER_HEARTBEAT_INTERVAL_MS, "int",
                   "Heartbeat interval of the members of a consumer group (KIP-848 protocol)",
                   lambda group, share: group.consumer_heartbeat_interval_ms, per_group=True,
                   minimum=1),
    GroupConfigDef(SHARE_SESSION_TIMEOUT_MS, "int",
                   "Session timeout of the members of a share group",
                   lambda group, share: share.session_timeout_ms, per_group=True, minimum=1),
    GroupConfigDef(SHARE_HEARTBEAT_INTERVAL_MS, "int",
                   "Heartbeat interval of the members of a share group",
                   lambda group, share: share.heartbeat_interval_ms, per_group=True,
                   minimum=1),
    GroupConfigDef(SHARE_RECORD_LOCK_DURATION_MS, "int",
                   "How long a share group member holds a record it was given",
                   lambda group, share: share.record_lock_duration_ms, per_group=True,
                   minimum=1000),
    GroupConfigDef(SHARE_AUTO_OFFSET_RESET, "string",
                   "Where a share group starts reading a partition it has no state for: "
                   "latest or earliest",
                   lambda group, share: share.auto_offset_reset, per_group=True,
                   choices=("latest", "earliest")),
    GroupConfigDef("share.isolation.level", "string",
                   "read_committed or read_uncommitted records for a share group",
                   lambda group, share: "read_uncommitted"),
)}


def validate_group_configs(configs: Mapping[str, str | None]) -> None:
    """Refuse (InvalidConfig) what a group may not have set: unknown names with Kafka's
    message, names kipper does not apply per group, values Kafka's checks refuse."""
    for name, value in configs.items():
        definition = GROUP_CONFIGS.get(name)
        if definition is None:
            raise InvalidConfig(f"Unknown group config name: {name}")
        if not definition.per_group:
            raise InvalidConfig(f"{name} cannot be set on one group in kipper yet: the "
                                "broker setting applies to every group")
        if value is not None:
            definition.validate(value)
    _check_session_outlasts_heartbeat(configs, CONSUMER_SESSION_TIMEOUT_MS,
                                      CONSUMER_HEARTBEAT_INTERVAL_MS)
    _check_session_outlasts_heartbeat(configs, SHARE_SESSION_TIMEOUT_MS,
                                      SHARE_HEARTBEAT_INTERVAL_MS)


def _check_session_outlasts_heartbeat(configs: Mapping[str, str | None], session: str,
                                      heartbeat: str) -> None:
    """Kafka's check that a member's session outlasts its heartbeat interval, on a group
    setting both (the controller does not know the brokers' settings for the other)."""
    if configs.get(session) is not None and configs.get(heartbeat) is not None \
            and int(configs[session]) <= int(configs[heartbeat]):
        raise InvalidConfig(f"{session} must be greater than {heartbeat}")


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """The group configs a share group's partitions follow: set on the group, else the
    broker's."""
    auto_offset_reset: str
    record_lock_duration_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int


@dataclass(frozen=True, slots=True)
class GroupConfigValue:
    """One group config as DescribeConfigs reports it; ``is_set``: set on the group."""
    definition: GroupConfigDef
    value: str
    is_set: bool


class GroupConfigs:
    """Each group's configs as they apply: the ones set on the group (GROUP config records
    in the metadata image, ``MetadataImage.group_configs``) over the broker settings."""

    def __init__(self, image: MetadataImage, group: GroupConfig,
                 share: ShareGroupConfig) -> None:
        self.image = image
        self.group = group
        self.share = share

    def consumer_group(self, group_id: str) -> ConsumerGroupSettings:
        stored = self.image.group_configs.get(group_id, {})
        return ConsumerGroupSettings(
            int(stored.get(CONSUMER_SESSION_TIMEOUT_MS, self.group.consumer_session_timeout_ms)),
            int(stored.get(CONSUMER_HEARTBEAT_INTERVAL_MS,
                           self.group.consumer_heartbeat_interval_ms)))

    def share_group(self, group_id: str) -> ShareGroupSettings:
        stored = self.image.group_configs.get(group_id, {})
        return ShareGroupSettings(
            stored.get(SHARE_AUTO_OFFSET_RESET, self.share.auto_offset_reset),
            int(stored.get(SHARE_RECORD_LOCK_DURATION_MS, self.share.record_lock_duration_ms)),
            int(stored.get(SHARE_SESSION_TIMEOUT_MS, self.share.session_timeout_ms)),
            int(stored.get(SHARE_HEARTBEAT_INTERVAL_MS, self.share.heartbeat_interval_ms)))

    def describe(self, group_id: str) -> list[GroupConfigValue]:
        stored = self.image.group_configs.get(group_id, {})
        return [GroupConfigValue(d, stored[d.name], True) if d.name in stored
                else GroupConfigValue(d, str(d.default(self.group, self.share)), False)
                for d in GROUP_CONFIGS.values()]
