"""The controller: a quorum of one that owns brokers, topics, configs, leaders and ISRs.

Every change is validated, appended to ``__cluster_metadata`` (fsync) and only then
applied to the image (coordinator.state_machine), so a restart replays exactly what was
acknowledged. Brokers learn every change by fetching that log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from replication.cluster_metadata import (
    NO_LEADER,
    MetadataImage,
    PartitionInfo,
    TopicInfo,
    partition_record,
)
from replication.broker_configs import BROKER_CONFIGS, BrokerConfigDef, validate_broker_configs
from storage.config import TOPIC_CONFIGS, ConfigDef, InvalidConfig, validate_topic_configs
from storage.log import KafkaStorageError

from .config_changes import ConfigChange, changed_configs
from .metadata_log import MetadataLog
from .placement import assign_replicas
from .state_machine import Applier

log = logging.getLogger(__name__)

MAX_TOPIC_NAME = 249
# Kafka refuses more in one request (KAFKA-17870): each partition costs open files.
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


STORAGE_MODE = "kipper.storage.mode"


class ControllerError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def validate_topic_name(name: str | None) -> None:
    if not name:
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name is empty")
    if name in (".", ".."):
        raise ControllerError(ErrorCode.invalid_topic_exception,
                              f"Topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME:
        raise ControllerError(ErrorCode.invalid_topic_exception,
                              f"Topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")


def _check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise ControllerError(
            ErrorCode.policy_violation,
            f"Excessively large number of partitions per request: {count} (at most "
            f"{MAX_PARTITIONS_PER_REQUEST}).")


@contextlib.contextmanager
def _invalid_config() -> Iterator[None]:
    """A config Kafka would refuse: INVALID_CONFIG, with its reason."""
    try:
        yield
    except InvalidConfig as e:
        raise ControllerError(ErrorCode.invalid_config, str(e)) from None


def _check_unique(changes: Sequence[ConfigChange]) -> None:
    names = [change.name for change in changes]
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ControllerError(ErrorCode.invalid_request,
                              f"Error due to duplicate config keys: {', '.join(duplicates)}")


def _list_defaults(definitions: Iterable[ConfigDef | BrokerConfigDef]) -> dict[str, str]:
    """The default of each list config (what APPEND and SUBTRACT start from when unset)."""
    return {d.name: d.default or "" for d in definitions if d.kind == "list"}


@dataclass
class ControllerSettings:
    default_partitions: int = 1
    default_replication_factor: int = 1
    # A broker whose last heartbeat is older than this is fenced (broker.session.timeout.ms).
    session_timeout_ms: int = 9000
    unclean_leader_election: bool = False


class Controller:
    def __init__(self, metadata_dir: Path, settings: ControllerSettings) -> None:
        self.settings = settings
        self.log = MetadataLog(metadata_dir)
        self.image = MetadataImage()
        self.applier = Applier(self.image)
        self.on_commit: list[Callable[[], None]] = []
        self._last_heartbeat: dict[int, float] = {}
        self._lock = asyncio.Lock()
        self._fence_task: asyncio.Task | None = None

    async def start(self) -> None:
        self.applier.apply(await self.log.load())
        # Brokers known from the log get one session to heartbeat before being fenced.
        now = time.monotonic()
        self._last_heartbeat = {node: now for node in self.image.brokers}
        self._fence_task = asyncio.create_task(self._fence_expired_brokers())

    async def stop(self) -> None:
        if self._fence_task is not None:
            self._fence_task.cancel()
            await asyncio.gather(self._fence_task, return_exceptions=True)
        await self.log.log.close()

    async def _commit(self, records: list[dict]) -> int:
        """Append (committed once fsynced: a quorum of one), then apply."""
        if not records:
            return self.image.next_offset
        try:
            offset = await self.log.append(records)
        except KafkaStorageError as e:
            # Nothing was applied: the request that asked for the change fails, not the node.
            raise ControllerError(ErrorCode.kafka_storage_error, str(e)) from e
        self.applier.apply(enumerate(records, offset))
        for listener in self.on_commit:
            listener()
        return offset

    # --- brokers -------------------------------------------------------------------------

    async def register_broker(self, node_id: int, host: str, port: int, rack: str | None) -> int:
        """Register (or re-register after a restart); return the new broker epoch.

        The broker starts fenced, as in KRaft: it leads nothing and is in no election until
        it has loaded its logs and says so in a heartbeat (``want_fence=False``). Being
        fenced already, a broker still loading is never fenced for a late heartbeat."""
        async with self._lock:
            records = []
            if node_id in self.image.brokers and not self.image.brokers[node_id].fenced:
                # A restarted broker lost its in-memory state: its leaderships move first.
                records += self._fence_records(node_id)
            epoch = self.image.next_offset + len(records)
            registration = {"type": "broker", "node_id": node_id, "host": host, "port": port,
                            "rack": rack, "epoch": epoch, "fenced": True}
            self._last_heartbeat[node_id] = time.monotonic()
            await self._commit(records + [registration])
            log.info("registered broker %d at %s:%d rack %s (epoch %d)", node_id, host, port,
                     rack, epoch)
            return epoch

    async def heartbeat(self, node_id: int, epoch: int, want_fence: bool, want_shut_down: bool,
                        log_dir_offline: bool = False) -> tuple[ErrorCode, bool]:
        """Record a heartbeat; return (error, fenced). A fenced broker is unfenced (and
        takes part in elections) once it no longer asks to stay fenced. ``log_dir_offline``:
        the broker's data directory refuses appends (a full disk)."""
        async with self._lock:
            broker = self.image.brokers.get(node_id)
            if broker is None or broker.epoch != epoch:
                return ErrorCode.stale_broker_epoch, True
            self._last_heartbeat[node_id] = time.monotonic()
            if want_shut_down:
                if not broker.fenced:
                    log.info("broker %d is shutting down: moving its leaderships", node_id)
                    await self._commit(self._fence_records(node_id))
                return ErrorCode.none, True
            if broker.fenced and not want_fence:
                log.info("broker %d is ready: unfencing it", node_id)
                await self._commit([{"type": "unfence_broker", "node_id": node_id}])
                await self._commit(self._elect_leaderless())
            if log_dir_offline != broker.log_dir_offline:
                log.warning("broker %d reports its log dir %s", node_id,
                            "full: moving its leaderships" if log_dir_offline else "writable again")
                await self._commit(self._log_dir_records(node_id, log_dir_offline))
            return ErrorCode.none, broker.fenced

    async def _fence_expired_brokers(self) -> None:
        timeout = self.settings.session_timeout_ms / 1000
        while True:
            await asyncio.sleep(min(0.25, timeout / 4))
            now = time.monotonic()
            for broker in list(self.image.brokers.values()):
                if not broker.fenced and now - self._last_heartbeat.get(broker.node_id, 0) > timeout:
                    async with self._lock:
                        log.warning("fencing broker %d: no heartbeat for %.1f s",
                                    broker.node_id, now - self._last_heartbeat.get(broker.node_id, 0))
                        with contextlib.suppress(ControllerError):  # tried again next tick
                            await self._commit(self._fence_records(broker.node_id))

    def _fence_records(self, node_id: int) -> list[dict]:
        """Fence ``node_id``: drop it from ISRs and move its leaderships to ISR members."""
        live = {b.node_id for b in self.image.live_brokers()} - {node_id}
        records: list[dict] = [{"type": "fence_broker", "node_id": node_id}]
        for topic in self.image.topics.values():
            for info in topic.partitions.values():
                if node_id not in info.isr and info.leader != node_id:
                    continue
                isr = [r for r in info.isr if r != node_id] or info.isr
                leader = info.leader
                if leader == node_id:
                    leader = self._choose_leader(info, isr, live)
                    if leader not in isr and leader != NO_LEADER:
                        isr = [leader]
                records.append(self._changed(info, isr, leader))
        return records

    def _log_dir_records(self, node_id: int, offline: bool) -> list[dict]:
        """Mark ``node_id``'s log dir offline (or back): while it is, the broker leaves the
        ISRs and its leaderships go to other ISR members, as Kafka does for a failed log dir;
        a partition with no other in-sync replica keeps it (its reads are still served)."""
        records: list[dict] = [{"type": "broker_log_dir", "node_id": node_id, "offline": offline}]
        if not offline:
            return records
        live = {b.node_id for b in self.image.live_brokers()
                if not b.log_dir_offline and b.node_id != node_id}
        for topic in self.image.topics.values():
            for info in topic.partitions.values():
                others = [r for r in info.isr if r != node_id and r in live]
                if node_id not in info.isr or not others:
                    continue
                leader = others[0] if info.leader == node_id else info.leader
                records.append(self._changed(info, [r for r in info.isr if r != node_id], leader))
        return records

    def _choose_leader(self, info: PartitionInfo, isr: list[int], live: set[int]) -> int:
        # Replicas whose log dir is offline lead only when no other replica can.
        for replica in sorted(isr, key=self._log_dir_offline):
            if replica in live:
                return replica
        if self._unclean_allowed(info.topic):
            for replica in info.replicas:
                if replica in live:
                    log.warning("unclean election of %d for %s-%d", replica, info.topic,
                                info.partition)
                    return replica
        return NO_LEADER

    def _log_dir_offline(self, node_id: int) -> bool:
        broker = self.image.brokers.get(node_id)
        return broker is not None and broker.log_dir_offline

    def _unclean_allowed(self, topic: str) -> bool:
        configured = self.image.topics[topic].configs.get("unclean.leader.election.enable")
        return (configured == "true" if configured is not None
                else self.settings.unclean_leader_election)

    def _elect_leaderless(self) -> list[dict]:
        live = {b.node_id for b in self.image.live_brokers()}
        records = []
        for topic in self.image.topics.values():
            for info in topic.partitions.values():
                if info.leader != NO_LEADER:
                    continue
                leader = self._choose_leader(info, info.isr, live)
                if leader != NO_LEADER:
                    isr = info.isr if leader in info.isr else [leader]
                    records.append(self._changed(info, isr, leader))
        return records

    @staticmethod
    def _changed(info: PartitionInfo, isr: list[int], leader: int) -> dict:
        epoch = info.leader_epoch + (1 if leader != info.leader else 0)
        return partition_record(replace(info, isr=isr, leader=leader, leader_epoch=epoch,
                                        partition_epoch=info.partition_epoch + 1))

    # --- ISR changes from partition leaders (AlterPartition) -----------------------------

    async def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, new_isr: list[int],
                              partition_epoch: int) -> tuple[ErrorCode, PartitionInfo | None]:
        async with self._lock:
            topic = self.image.topics_by_id.get(topic_id)
            info = topic.partitions.get(partition) if topic else None
            if info is None:
                return ErrorCode.unknown_topic_or_partition, None
            if info.leader != broker_id:
                return ErrorCode.not_leader_or_follower, info
            if leader_epoch != info.leader_epoch:
                return ErrorCode.fenced_leader_epoch, info
            if partition_epoch != info.partition_epoch:
                return ErrorCode.invalid_update_version, info
            live = {b.node_id for b in self.image.live_brokers()}
            if broker_id not in new_isr or any(r not in live or r not in info.replicas
                                               for r in new_isr):
                return ErrorCode.ineligible_replica, info
            await self._commit([self._changed(info, list(new_isr), info.leader)])
            return ErrorCode.none, self.image.topics[info.topic].partitions[partition]

    # --- configs ------------------------------------------------------------------------

    async def alter_topic_configs(self, name: str, changes: Sequence[ConfigChange],
                                  replace: bool = False, validate_only: bool = False) -> None:
        """Change a topic's explicit configs (``replace``: AlterConfigs' legacy semantics, the
        changes become all of them; kipper.storage.mode is kept, being fixed at creation)."""
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                      f"The topic '{name}' does not exist.")
            with _invalid_config():
                _check_unique(changes)
                validate_topic_configs({change.name: None for change in changes})
                configs = changed_configs(topic.configs, changes, replace, _list_defaults(
                    TOPIC_CONFIGS.values()).get)
                if replace and STORAGE_MODE in topic.configs:
                    configs.setdefault(STORAGE_MODE, topic.configs[STORAGE_MODE])
                if configs.get(STORAGE_MODE) != topic.configs.get(STORAGE_MODE):
                    raise InvalidConfig(
                        f"{STORAGE_MODE} is fixed at creation: changing the storage mode of a "
                        "live topic is not supported yet")
                configs = validate_topic_configs(configs)
            if not validate_only and configs != topic.configs:
                await self._commit([{"type": "config", "topic": name, "configs": configs}])

    async def alter_broker_configs(self, resource: str, changes: Sequence[ConfigChange],
                                   replace: bool = False, validate_only: bool = False) -> None:
        """Change the dynamic configs of one broker (``resource`` = its id) or the
        cluster-wide default (``resource`` = "")."""
        if resource != "" and not resource.isdigit():
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Invalid broker name {resource!r}: a broker id, or an empty "
                                  "name for the cluster-wide default")
        async with self._lock:
            current = self.image.broker_configs.get(resource, {})
            with _invalid_config():
                _check_unique(changes)
                validate_broker_configs({change.name: None for change in changes})
                configs = changed_configs(current, changes, replace, _list_defaults(
                    BROKER_CONFIGS.values()).get)
                validate_broker_configs(configs)
            if not validate_only and configs != current:
                await self._commit([{"type": "broker_config", "resource": resource,
                                     "configs": configs}])

    # --- topics -------------------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str | None],
                           validate_only: bool = False) -> TopicInfo | None:
        async with self._lock:
            validate_topic_name(name)
            if name in self.image.topics:
                raise ControllerError(ErrorCode.topic_already_exists,
                                      f"Topic '{name}' already exists.")
            if num_partitions == -1:
                num_partitions = self.settings.default_partitions
            if replication_factor == -1:
                replication_factor = self.settings.default_replication_factor
            if num_partitions <= 0:
                raise ControllerError(ErrorCode.invalid_partitions,
                                      "Number of partitions must be larger than 0.")
            _check_partition_count(num_partitions)
            if replication_factor <= 0:
                raise ControllerError(ErrorCode.invalid_replication_factor,
                                      "Replication factor must be larger than 0.")
            try:
                clean_configs = validate_topic_configs(configs)
            except InvalidConfig as e:
                raise ControllerError(ErrorCode.invalid_config, str(e)) from None
            assignment = self._assign(range(num_partitions), replication_factor)
            if validate_only:
                return None
            records: list[dict] = [{"type": "topic", "name": name, "id": str(uuid.uuid4()),
                                    "configs": clean_configs}]
            records += [self._new_partition(name, p, replicas) for p, replicas in assignment.items()]
            await self._commit(records)
            return self.image.topics[name]

    def _assign(self, partitions: range, replication_factor: int) -> dict[int, list[int]]:
        brokers = self.image.live_brokers()
        if replication_factor > len(brokers):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(brokers)}.")
        return assign_replicas({b.node_id: b.rack for b in brokers}, partitions,
                               replication_factor)

    @staticmethod
    def _new_partition(topic: str, partition: int, replicas: list[int]) -> dict:
        return partition_record(PartitionInfo(topic, partition, replicas, list(replicas),
                                              replicas[0]))

    async def delete_topic(self, name: str) -> TopicInfo:
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                      "This server does not host this topic-partition.")
            await self._commit([{"type": "remove_topic", "name": name}])
            return topic

    async def create_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                      f"The topic '{name}' does not exist.")
            current = len(topic.partitions)
            if count <= current:
                raise ControllerError(
                    ErrorCode.invalid_partitions,
                    f"Topic currently has {current} partitions, which is higher than or equal "
                    f"to the requested {count}.")
            _check_partition_count(count - current)
            assignment = self._assign(range(current, count), len(topic.partitions[0].replicas))
            if validate_only:
                return
            await self._commit([self._new_partition(name, p, replicas)
                                for p, replicas in assignment.items()])
