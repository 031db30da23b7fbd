"""The storage modes the scenarios of tests/system run in, one class per mode.

A scenario asks for the ``storage_mode`` fixture (tests/system/conftest.py), which hands it one
of these per mode: where to connect, the replication factor to create topics with, how many
records a client round trip sends, which codecs it runs, and the mode's own checks of what was
stored. Each mode's cluster is started once for all scenarios (see tests/README.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .dataset import COMPRESSIONS, N_RECORDS, assert_stored_codec, segment_batches
from .diskless import DisklessCluster
from .groups import Restartable
from .processes import BrokerProcess, Cluster, start_all
from .s3 import S3Endpoint
from .shared_storage import SharedCluster
from .tiered import TieredCluster

MODES = ("classic", "active-tiered", "diskless", "shared")

# Active-tiered round trips run on RF=3 with every follower downloading from object storage:
# fewer records, and one codec per client (together they cover all four codecs).
TIERED_RECORDS = 2000
TIERED_CODECS = {"confluent-kafka": "zstd", "kafka-python": "gzip", "aiokafka": "lz4",
                 "kcat": "snappy", "kafkajs": "gzip"}


def compressions(mode: str, client: str) -> list[str]:
    """The codecs ``client``'s round trip runs with in ``mode``."""
    return [TIERED_CODECS[client]] if mode == "active-tiered" else list(COMPRESSIONS)


class WholeCluster:
    """A cluster as the group scenario's "broker": its kill -9 takes every broker down."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap

    def kill(self) -> None:
        for broker in self.cluster.brokers:
            broker.kill()

    def start(self) -> None:
        start_all(self.cluster.brokers)


@dataclass
class ClassicMode:
    """One broker, local logs: the classic tests have always run on a single broker."""

    broker: BrokerProcess
    name: str = "classic"
    replication_factor: int = 1
    records: int = N_RECORDS

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def metrics_urls(self) -> list[str]:
        return [self.broker.metrics_url]

    @staticmethod
    def single_broker_args(s3: S3Endpoint) -> list[str]:
        """Arguments of a one-broker set-up of this mode (the idempotence scenario's)."""
        return []

    def restartable(self, broker_factory) -> Restartable:
        """What the group scenario kills: a broker of its own, since the shared one serves
        other tests."""
        return broker_factory()

    def watch(self, topic: str) -> None:
        """Called before a scenario creates ``topic``; classic has nothing to remember."""

    def assert_stored(self, topic: str, codec: str, n_records: int) -> None:
        """Every record, with the client's codec, in the broker's segment files."""
        assert_stored_codec(segment_batches(self.broker.data_dir, topic), codec, n_records)

    def log_tail(self) -> str:
        return f"{self.broker.log_path}\n{self.broker.log_tail(60)}"


@dataclass
class _ClusterMode:
    cluster: Cluster

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def metrics_urls(self) -> list[str]:
        """The brokers' (the controller-only node serves none in these clusters)."""
        return [broker.metrics_url for broker in self.cluster.brokers if broker.alive()]

    def single_broker_args(self, s3: S3Endpoint) -> list[str]:
        return ["--default-storage-mode", self.name, "--s3-endpoint", s3.url,
                "--s3-access-key", s3.access_key, "--s3-secret-key", s3.secret_key]

    def restartable(self, broker_factory) -> Restartable:
        return WholeCluster(self.cluster)

    def log_tail(self) -> str:
        return "\n".join(f"{b.log_path}\n{b.log_tail(30)}" for b in self.cluster.brokers)


@dataclass
class DisklessMode(_ClusterMode):
    """Three brokers with diskless topics (KIP-1150): any broker takes a produce, offsets come
    from the batch coordinator."""

    cluster: DisklessCluster
    name: str = "diskless"
    replication_factor: int = 1
    records: int = N_RECORDS

    def watch(self, topic: str) -> None:
        """Called before a scenario creates ``topic``; diskless has nothing to remember."""

    def assert_stored(self, topic: str, codec: str, n_records: int) -> None:
        """Every record, with the client's codec, in the WAL objects at the coordinates the
        batch coordinator holds."""
        assert_stored_codec(self.cluster.stored_batches(topic), codec, n_records)


@dataclass
class TieredMode(_ClusterMode):
    """Three brokers in three AZs with RF=3 active-tiered topics (KIP-1176): followers get the
    leader's records from object storage."""

    cluster: TieredCluster
    name: str = "active-tiered"
    replication_factor: int = 3
    records: int = TIERED_RECORDS
    _counters_before: dict[str, Counter] = field(default_factory=dict)

    def watch(self, topic: str) -> None:
        self._counters_before[topic] = self.cluster.tiered_counters()

    def assert_stored(self, topic: str, codec: str, n_records: int) -> None:
        """Every replica holds every record with the client's codec, and the followers
        downloaded them from object storage rather than fetching them from the leader."""
        for broker in self.cluster.brokers:
            assert_stored_codec(segment_batches(broker.data_dir, topic), codec, n_records)
        grown = self.cluster.tiered_counters() - self._counters_before.pop(topic)
        assert grown["downloads"] > 0, grown
        assert grown["download_bytes"] >= 2 * grown["upload_bytes"] > 0, grown


@dataclass
class SharedMode(_ClusterMode):
    """Three brokers with shared topics (KIP-1183): the leader's appends are acknowledged once
    in object storage; no broker replicates from another."""

    cluster: SharedCluster
    name: str = "shared"
    replication_factor: int = 3
    records: int = N_RECORDS

    def watch(self, topic: str) -> None:
        """Called before a scenario creates ``topic``; shared has nothing to remember."""

    def assert_stored(self, topic: str, codec: str, n_records: int) -> None:
        """Every record, with the client's codec, in the partition's data objects in object
        storage (what a new leader reopens it from)."""
        assert_stored_codec(self.cluster.wait_for_data_objects(topic, n_records), codec,
                            n_records)


StorageMode = ClassicMode | DisklessMode | TieredMode | SharedMode
