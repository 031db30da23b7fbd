"""The controller: owns brokers, topics, configs, leaders and ISRs, replicated by a quorum
of voters (KRaft: replication.raft).

Every change is validated against the committed image, appended by the quorum's leader to
``__cluster_metadata`` and applied only once the quorum has committed it (a majority of
voters hold it), on every voter alike (``_apply_committed``), so a restart or a new leader
replays exactly what was acknowledged. Only the leader's controller is *active*: it decides,
once it has applied everything committed before its epoch; the others answer
NOT_CONTROLLER. A deposed leader's uncommitted records are truncated by the new one, never
applied. Brokers learn every change by fetching that log from the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from protocol.records import json_record_chunks
from replication.acls import AclBinding, AclBindingFilter
from replication.broker_configs import BROKER_CONFIGS, BrokerConfigDef, validate_broker_configs
from replication.cluster_metadata import (
    NO_LEADER,
    BrokerInfo,
    ImageSnapshot,
    MetadataImage,
    PartitionInfo,
    StorageSpan,
    TopicInfo,
    broker_record,
    group_config_record,
    partition_record,
    producer_ids_record,
)
from replication.loop_slice import LoopSlice
from replication.node_client import NodeClient
from replication.raft import QUORUM_STATE_FILE, NotLeader, QuorumSettings, RaftFetchResponse
from replication.raft.driver import QuorumDriver
from replication.scram_credentials import (
    InvalidScramCredential,
    ScramMechanism,
    UnknownScramMechanism,
    credential_from_password,
    credential_from_salted_password,
    credential_record,
)
from storage.config import TOPIC_CONFIGS, ConfigDef, InvalidConfig, validate_topic_configs
from storage.log import KafkaStorageError
from storage.shared import CommitOutcome, StreamCommit

from .acl_changes import AclDeletion, AclError, creation_records, deletion_records
from .config_changes import ConfigChange, changed_configs
from .group_config import validate_group_configs
from .metadata_log import MetadataLog, SnapshotId
from .placement import assign_replicas
from .scram_changes import ScramDeletion, ScramUpsertion
from .state_machine import DECODE_CHUNK, Applier

log = logging.getLogger(__name__)

MAX_TOPIC_NAME = 249
# Kafka refuses more in one request (KAFKA-17870): each partition costs open files.
MAX_PARTITIONS_PER_REQUEST = 10_000
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


STORAGE_MODE = "kipper.storage.mode"
# The modes a live topic switches between (docs/mode-switch.md).
SWITCHABLE_MODES = frozenset({"classic", "diskless"})
# Storage modes whose replicas need no catch-up (Controller._nominal_replicas).
NOMINAL_REPLICA_MODES = ("diskless", "shared")


# Partition changes committed at a time by an election or rebalancing over many partitions.
PARTITION_CHANGES_PER_COMMIT = 500
# Producer ids per AllocateProducerIds answer (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE):
# one metadata record per thousand idempotent or transactional producers.
PRODUCER_ID_BLOCK_SIZE = 1000
# The first block's start. Brokers used to hand out ids from ranges of their own (node id << 40):
# a cluster upgraded in place may still hold producer state of those ids, so the controller's
# start above the ranges of node ids below 4096, and below 2**53, which JavaScript clients
# holding an id as a number keep exact.
FIRST_PRODUCER_ID = 1 << 52


class Election(enum.IntEnum):
    """ElectLeaders' election_type (KIP-460)."""
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None
    # The partition as the election leaves it (None: unchanged).
    elected: PartitionInfo | None = None


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


@dataclass(frozen=True)
class IsrChange:
    """One partition's ISR change, as its leader proposes it (AlterPartition)."""
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int


@dataclass
class ControllerSettings:
    default_partitions: int = 1
    default_replication_factor: int = 1
    # A broker whose last heartbeat is older than this is fenced (broker.session.timeout.ms).
    session_timeout_ms: int = 9000
    unclean_leader_election: bool = False
    # `kipper.storage.mode` of topics created without one: a diskless topic's replicas are
    # nominal, so reassigning them only changes metadata.
    default_storage_mode: str = "classic"
    # Preferred-leader rebalancing (Kafka's auto.leader.rebalance.enable,
    # leader.imbalance.per.broker.percentage, leader.imbalance.check.interval.seconds).
    auto_leader_rebalance: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_s: float = 30.0
    # When to snapshot the metadata (metadata.log.max.record.bytes.between.snapshots,
    # metadata.log.max.snapshot.interval.ms; 0 s: never by time).
    snapshot_max_new_record_bytes: int = 20 << 20
    snapshot_max_interval_s: float = 3600.0
    # A clean stop also snapshots once this much was applied since the last snapshot (a
    # kipper rule; Kafka has none): after topic churn a restart otherwise replays up to
    # 20 MiB of records, seconds of CPU per node, where the snapshot is a few MB and the
    # stop takes it once (a rule that fired while running snapshotted again and again
    # during a restart's own leader elections; bench/README.md, session 16).
    snapshot_on_stop_min_bytes: int = 1 << 20


@dataclass(frozen=True)
class ControllerQuorum:
    """The voters of the metadata quorum (``controller_quorum_voters``) and this one's id;
    the default is a quorum of one, this node alone (nothing goes over the network)."""

    node_id: int = 0
    voters: dict[int, tuple[str, int]] | None = None
    nodes: NodeClient | None = None  # how voters reach each other (none for a quorum of one)
    settings: QuorumSettings = QuorumSettings()


# How long start() waits for a quorum of one to lead (it does at once).
SOLE_VOTER_START_TIMEOUT_S = 30.0
# Between two attempts to commit a fence that failed (a storage error, say).
FENCE_RETRY_S = 0.25
# How long a walk over every partition (building the changes of a fence or an election)
# holds the event loop before it lets the quorum's fetches and the brokers' requests through
# (committed records are applied in turns too: Applier.apply_in_turns): a voter that hears
# nothing from its leader for controller_quorum_fetch_timeout_ms elects another.
WALK_SLICE_S = 0.01


class Controller:
    def __init__(self, metadata_dir: Path, settings: ControllerSettings,
                 quorum: ControllerQuorum = ControllerQuorum()) -> None:
        self.settings = settings
        self.log = MetadataLog(metadata_dir)
        self.image = MetadataImage()
        self.applier = Applier(self.image)
        self.node_id = quorum.node_id
        self.quorum = QuorumDriver(quorum.node_id, quorum.voters or {quorum.node_id: ("", 0)},
                                   self.log, metadata_dir / QUORUM_STATE_FILE, quorum.nodes,
                                   quorum.settings)
        self.raft = self.quorum.raft
        self.raft.commit_listeners.append(lambda _: self._progressed())
        self.raft.leader_listeners.append(self._on_leader_change)
        # The quorum's leader, once it has applied what was committed before its epoch.
        self.active = False
        self._progress = asyncio.Event()
        self._last_heartbeat: dict[int, float] = {}
        # Brokers waiting for their controlled shutdown (node id -> broker epoch): whichever
        # request gets the lock first fences all of them in one commit.
        self._shutting_down: dict[int, int] = {}
        self._lock = asyncio.Lock()
        self._fence_task: asyncio.Task | None = None
        self._balance_task: asyncio.Task | None = None
        self._activation: asyncio.Task | None = None
        self._apply_task: asyncio.Task | None = None
        self._snapshot_task: asyncio.Task | None = None
        self._last_snapshot_at = time.monotonic()
        # Bytes of log records applied to the image since the snapshot it was loaded from or
        # last written, whichever process appended them: the tail a restart replays counts,
        # so a node that restarts often still snapshots (Kafka's SnapshotGenerator counts
        # the batches its loader publishes the same way).
        self._bytes_since_snapshot = 0

    async def start(self) -> None:
        """Load the newest snapshot, then join the quorum: the log after the snapshot is
        applied as the quorum commits it (a voter's uncommitted tail may yet be truncated)."""
        state = await self.log.load()
        if state.snapshot is not None:
            self.applier.load_snapshot(state.snapshot.end_offset, state.snapshot_records)
            log.info("loaded metadata snapshot %s; %d records after it await the quorum",
                     state.snapshot.file_name, len(state.tail))
        self._apply_task = asyncio.create_task(self._apply_committed())
        await self.quorum.start()
        if len(self.raft.voters) == 1:  # it leads at once: usable when start returns
            async with asyncio.timeout(SOLE_VOTER_START_TIMEOUT_S):
                while not self.active:
                    await self._wait_for_progress()

    async def stop(self) -> None:
        self._deactivate()
        await self.quorum.stop()
        tasks = [t for t in (self._apply_task, self._activation) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        while self._snapshot_task is not None and not self._snapshot_task.done():
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        if self._bytes_since_snapshot >= self.settings.snapshot_on_stop_min_bytes:
            try:
                await self._write_snapshot(*self._take_snapshot())
            except Exception:  # the log stays as it is: the next start replays it
                log.exception("the metadata snapshot of a clean stop failed")
        await self.log.close()

    # --- this node's broker (combined mode: broker.metadata_follower.LocalReplica) ------

    async def read_committed(self, offset: int, max_bytes: int,
                             max_wait_s: float) -> RaftFetchResponse:
        return await self.raft.read_committed(offset, max_bytes, max_wait_s)

    def snapshot_records(self, snapshot: SnapshotId) -> list[dict]:
        return self.log.read_snapshot(snapshot)

    # --- the quorum: leadership and commits ----------------------------------------------

    @property
    def leader_id(self) -> int:
        """The active controller as this voter knows it (-1: an election is under way)."""
        return self.raft.leader_id

    async def wait_until_active(self, timeout_s: float) -> bool:
        """Whether this node is the active controller, waiting up to ``timeout_s`` while its
        voter leads but the controller is not active yet (it applies the log first)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not self.active and self.raft.is_leader:
                    await self._wait_for_progress()
        return self.active

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def _wait_for_progress(self) -> None:
        await self._progress.wait()

    def _on_leader_change(self, leader_id: int, epoch: int) -> None:
        self._progressed()
        self._deactivate()
        if leader_id == self.node_id:
            self._activation = asyncio.create_task(self._activate(epoch))

    async def _activate(self, epoch: int) -> None:
        """Become the active controller of ``epoch`` once everything committed before it
        (up to this epoch's leader_change record) is applied."""
        start = self.raft.epoch_start_offset
        while self.image.next_offset <= start:
            if self.raft.epoch != epoch or not self.raft.is_leader:
                return
            await self._wait_for_progress()
        # Brokers get one session to find this controller before any is fenced; but the
        # leader this voter followed before (one that died, its broker with it: combined
        # mode) only what is left of its session since this voter last heard from it, so
        # its partitions move on as soon as a broker dying alone would have them move.
        now = time.monotonic()
        self._last_heartbeat = {node: now for node in self.image.brokers}
        if self.raft.last_leader_heard is not None:
            previous, heard_at = self.raft.last_leader_heard
            if previous in self._last_heartbeat and previous != self.node_id:
                self._last_heartbeat[previous] = min(now, heard_at)
        self.active = True
        self._fence_task = asyncio.create_task(self._fence_expired_brokers())
        if self.settings.auto_leader_rebalance:
            self._balance_task = asyncio.create_task(self._balance_leaders_periodically())
        log.info("controller %d is active in epoch %d (metadata at offset %d)", self.node_id,
                 epoch, self.image.next_offset)
        self._progressed()
        # The previous controller may have unfenced a broker and lost its leadership before
        # the elections that go with it were committed: nothing else would ever elect a
        # leader for those partitions.
        async with self._lock:
            try:
                await self._commit(await self._elect_leaderless())
            except ControllerError as e:
                log.warning("electing leaders on activation failed: %s", e.message)

    def _deactivate(self) -> None:
        if self.active:
            log.info("controller %d is no longer active", self.node_id)
        self.active = False
        for task in (self._fence_task, self._balance_task, self._activation):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        self._fence_task = self._balance_task = self._activation = None

    async def _apply_committed(self) -> None:
        """Apply what the quorum committed, in log order (on every voter, the leader too); a
        snapshot the quorum installed in place of the log below it is loaded first."""
        while True:
            committed = self.raft.high_watermark
            try:
                if self.image.next_offset < self.log.log_start_offset:
                    await self._load_installed_snapshot()
                while self.image.next_offset < committed:
                    offset = self.image.next_offset
                    data = await self.log.read(offset, 1 << 20, committed)
                    await self.applier.apply_in_turns(
                        [(o, r) for o, r in chunk if offset <= o < committed]
                        for chunk in json_record_chunks(data, DECODE_CHUNK))
                    if self.image.next_offset == offset:
                        break  # nothing committed was read
                    self._bytes_since_snapshot += len(data)
            except (KafkaStorageError, OSError, ValueError) as e:
                log.warning("applying committed metadata failed (retrying): %s", e)
                await asyncio.sleep(0.1)
                continue
            if self.image.next_offset >= committed:
                self._maybe_snapshot()
                self._progressed()
            if self.raft.high_watermark == committed:
                await self.raft.wait_for_change(1.0)

    async def _load_installed_snapshot(self) -> None:
        snapshot = self.log.latest_snapshot()
        records = await asyncio.to_thread(self.log.read_snapshot, snapshot)
        self.applier.load_snapshot(snapshot.end_offset, self.image.snapshot_delta(records))
        self._bytes_since_snapshot = 0
        log.info("loaded the leader's metadata snapshot %s", snapshot.file_name)

    def _check_active(self) -> None:
        if not self.active:
            raise ControllerError(ErrorCode.not_controller,
                                  f"node {self.node_id} is not the active controller (leader: "
                                  f"{self.raft.leader_id})")

    async def _commit(self, records: list[dict]) -> int:
        """Append through the quorum, then wait until it is committed and applied; the
        caller holds the lock, so what it validated against is still the image."""
        self._check_active()
        if not records:
            return self.image.next_offset
        epoch = self.raft.epoch
        try:
            offset = await self.raft.append(records)
        except NotLeader as e:
            raise ControllerError(ErrorCode.not_controller, str(e)) from e
        except KafkaStorageError as e:
            # Nothing was applied: the request that asked for the change fails, not the node.
            raise ControllerError(ErrorCode.kafka_storage_error, str(e)) from e
        last = offset + len(records) - 1
        while self.image.next_offset <= last:
            if self.raft.epoch != epoch or not self.raft.is_leader:
                # Never committed by this leader: the next one truncates or commits it.
                raise ControllerError(ErrorCode.not_controller,
                                      f"node {self.node_id} lost the leadership of epoch "
                                      f"{epoch} before the change was committed")
            await self._wait_for_progress()
        return offset

    def _maybe_snapshot(self) -> None:
        """Snapshot the image (KIP-630) in the background once enough was applied since the
        last one, or enough time passed."""
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return
        interval = self.settings.snapshot_max_interval_s
        due = (self._bytes_since_snapshot >= self.settings.snapshot_max_new_record_bytes
               or (interval > 0 and time.monotonic() - self._last_snapshot_at >= interval))
        if not due:
            return
        self._snapshot_task = asyncio.create_task(self._write_snapshot(*self._take_snapshot()))

    def _take_snapshot(self) -> tuple[int, ImageSnapshot]:
        """The applied image as a snapshot is made of it: its end offset and contents."""
        self._bytes_since_snapshot = 0
        self._last_snapshot_at = time.monotonic()
        return self.image.next_offset, self.image.snapshot()

    async def _write_snapshot(self, end_offset: int, image: ImageSnapshot) -> None:
        started = time.monotonic()
        records = await image.records_in_turns(WALK_SLICE_S)
        try:
            snapshot = SnapshotId(end_offset, await self.log.epoch_at(end_offset - 1))
            await self.log.write_snapshot(snapshot, records)
        except KafkaStorageError as e:
            log.warning("metadata snapshot at %d not written: %s", end_offset, e)
            return
        log.info("wrote metadata snapshot %s (%d records, %.0f ms); the log now starts at %d",
                 snapshot.file_name, len(records), (time.monotonic() - started) * 1000,
                 self.log.log.log_start_offset)
        # What was committed while this one was written may be due a snapshot already.
        self._snapshot_task = None
        self._maybe_snapshot()

    # --- brokers -------------------------------------------------------------------------

    async def register_broker(self, node_id: int, host: str, port: int, rack: str | None,
                              listeners: dict[str, tuple[str, int]] | None = None) -> int:
        """Register (or re-register after a restart); return the new broker epoch.

        The broker starts fenced, as in KRaft: it leads nothing and is in no election until
        it has loaded its logs and says so in a heartbeat (``want_fence=False``). Being
        fenced already, a broker still loading is never fenced for a late heartbeat."""
        async with self._lock:
            records = []
            if node_id in self.image.brokers and not self.image.brokers[node_id].fenced:
                # A restarted broker lost its in-memory state: its leaderships move first.
                records += await self._fence_records({node_id})
            # The registration record's offset: where the quorum appends next.
            epoch = self.raft.log.log_end_offset + len(records)
            registration = broker_record(BrokerInfo(node_id, host, port, rack, epoch,
                                                    fenced=True, listeners=listeners or {}))
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
        if want_shut_down:
            return await self._controlled_shutdown(node_id, epoch)
        async with self._lock:
            broker = self._heard_from(node_id, epoch)
            if broker is None:
                return ErrorCode.stale_broker_epoch, True
            if broker.fenced and not want_fence:
                log.info("broker %d is ready: unfencing it", node_id)
                await self._commit([{"type": "unfence_broker", "node_id": node_id}])
                await self._commit(await self._elect_leaderless())
            if log_dir_offline != broker.log_dir_offline:
                log.warning("broker %d reports its log dir %s", node_id,
                            "full: moving its leaderships" if log_dir_offline else "writable again")
                await self._commit(self._log_dir_records(node_id, log_dir_offline))
            return ErrorCode.none, broker.fenced

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> range:
        """The next block of producer ids, for the broker registered in ``broker_epoch``
        (AllocateProducerIds, KIP-730): committed to the metadata log before it is handed
        out, so no id is handed out twice, whatever happens to the broker's disk."""
        async with self._lock:
            self._check_active()
            broker = self.image.brokers.get(broker_id)
            if broker is None or broker.epoch != broker_epoch:
                raise ControllerError(ErrorCode.stale_broker_epoch,
                                      f"broker {broker_id} is not registered in epoch "
                                      f"{broker_epoch}")
            start = max(self.image.next_producer_id, FIRST_PRODUCER_ID)
            await self._commit([producer_ids_record(start + PRODUCER_ID_BLOCK_SIZE, broker_id,
                                                    broker_epoch)])
            return range(start, start + PRODUCER_ID_BLOCK_SIZE)

    def _heard_from(self, node_id: int, epoch: int):
        """The broker as registered in ``epoch``, its session renewed; None if that
        registration is stale (this controller must be the active one)."""
        self._check_active()
        broker = self.image.brokers.get(node_id)
        if broker is None or broker.epoch != epoch:
            return None
        self._last_heartbeat[node_id] = time.monotonic()
        return broker

    async def _fence_expired_brokers(self) -> None:
        """Fence each broker whose session ran out. It wakes when the earliest session ends
        (a heartbeat only moves a session's end later, and a new one ends a full timeout
        from now), so a broker is fenced at its timeout rather than up to a polling tick
        after it."""
        timeout = self.settings.session_timeout_ms / 1000
        while True:
            now = time.monotonic()
            ends = [self._last_heartbeat.get(b.node_id, 0) + timeout
                    for b in self.image.live_brokers()]
            await asyncio.sleep(max(min(ends, default=now + timeout) - now, 0))
            for node in self._expired_sessions(timeout):
                async with self._lock:
                    if node not in self._expired_sessions(timeout):
                        continue  # it heartbeated (or was fenced) while this waited
                    log.warning("fencing broker %d: no heartbeat for %.1f s", node,
                                time.monotonic() - self._last_heartbeat.get(node, 0))
                    try:
                        await self._commit(await self._fence_records({node}))
                    except ControllerError as e:
                        log.warning("fencing broker %d failed (trying again): %s", node, e)
                        await asyncio.sleep(FENCE_RETRY_S)

    def _expired_sessions(self, timeout: float) -> list[int]:
        now = time.monotonic()
        return [b.node_id for b in self.image.live_brokers()
                if now - self._last_heartbeat.get(b.node_id, 0) >= timeout]

    async def _controlled_shutdown(self, node_id: int, epoch: int) -> tuple[ErrorCode, bool]:
        """Fence a broker that asks to shut down, its leaderships moved first (KRaft's
        controlled shutdown). The requests that queue for the lock meanwhile are fenced in
        the same commit: when a whole cluster stops, one change per partition goes through
        the quorum rather than one per broker.

        With no other live broker nothing can move: nothing is committed (the last broker of
        a stopping cluster may be the last voter, with no quorum left), and the broker is
        fenced when it registers again, as after a crash."""
        self._shutting_down[node_id] = epoch
        try:
            async with self._lock:
                broker = self._heard_from(node_id, epoch)
                if broker is None:
                    return ErrorCode.stale_broker_epoch, True
                if not broker.fenced:
                    stopping = {node for node, asked in self._shutting_down.items()
                                if (b := self.image.brokers.get(node)) is not None
                                and b.epoch == asked and not b.fenced}
                    if not {b.node_id for b in self.image.live_brokers()} - stopping:
                        log.info("controlled shutdown of broker(s) %s: no other live broker "
                                 "to move leaderships to", ", ".join(map(str, sorted(stopping))))
                        return ErrorCode.none, True
                    log.info("controlled shutdown of broker(s) %s: moving leaderships",
                             ", ".join(map(str, sorted(stopping))))
                    await self._commit(await self._fence_records(stopping))
                return ErrorCode.none, True
        finally:
            if self._shutting_down.get(node_id) == epoch:
                del self._shutting_down[node_id]

    async def _fence_records(self, nodes: set[int]) -> list[dict]:
        """Fence ``nodes``: drop them from ISRs and move their leaderships to ISR members
        still live. An ISR of fenced brokers only is kept: they were the last in sync.
        The caller holds the lock: no other change is made while this yields (and if this
        controller loses its leadership meanwhile, committing the records fails)."""
        live = {b.node_id for b in self.image.live_brokers()} - nodes
        records: list[dict] = [{"type": "fence_broker", "node_id": node} for node in sorted(nodes)]
        turns = LoopSlice(WALK_SLICE_S)
        for topic in list(self.image.topics.values()):
            for info in list(topic.partitions.values()):
                await turns.pause()
                if nodes.isdisjoint(info.isr) and info.leader not in nodes:
                    continue
                isr = [r for r in info.isr if r not in nodes] or info.isr
                if self._storage_mode(topic.name) == "shared":
                    isr = self._shared_isr(info, live)
                leader = info.leader
                if leader in nodes:
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

    @staticmethod
    def _shared_isr(info: PartitionInfo, live: set[int]) -> list[int]:
        """A shared partition's ISR: its live replicas (object storage holds its records, so
        any of them can lead it), or, with none live, the last ISR (as for any partition)."""
        return [r for r in info.replicas if r in live] or info.isr

    async def _elect_leaderless(self) -> list[dict]:
        """Elect a leader for the partitions without one; and bring the live replicas of
        shared partitions back into their ISRs (after a broker is unfenced). The caller
        holds the lock."""
        live = {b.node_id for b in self.image.live_brokers()}
        records = []
        turns = LoopSlice(WALK_SLICE_S)
        for topic in list(self.image.topics.values()):
            shared = self._storage_mode(topic.name) == "shared"
            for info in list(topic.partitions.values()):
                await turns.pause()
                if shared and info.leader != NO_LEADER:
                    isr = self._shared_isr(info, live)
                    if set(isr) != set(info.isr):
                        records.append(self._changed(info, isr, info.leader))
                    continue
                if info.leader != NO_LEADER:
                    continue
                if shared:
                    info = replace(info, isr=self._shared_isr(info, live))
                leader = self._choose_leader(info, info.isr, live)
                if leader != NO_LEADER:
                    isr = info.isr if leader in info.isr else [leader]
                    records.append(self._changed(info, isr, leader))
        return records

    @staticmethod
    def _changed(info: PartitionInfo, isr: list[int], leader: int) -> dict:
        return _partition_change(info, info, isr=isr, leader=leader)

    # --- ISR changes from partition leaders (AlterPartition) -----------------------------

    async def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, new_isr: list[int],
                              partition_epoch: int) -> tuple[ErrorCode, PartitionInfo | None]:
        (result,) = await self.alter_partitions(broker_id, [IsrChange(
            topic_id, partition, leader_epoch, list(new_isr), partition_epoch)])
        return result

    async def alter_partitions(self, broker_id: int, changes: Sequence[IsrChange]
                               ) -> list[tuple[ErrorCode, PartitionInfo | None]]:
        """AlterPartition: each ISR change checked, the accepted ones committed together
        (one append and fsync for a request of hundreds: a restarted leader proposes
        thousands at once); per change, the error and the partition as it is now."""
        async with self._lock:
            self._check_active()
            live = {b.node_id for b in self.image.live_brokers()}
            # In turns (a request carries up to 2,000): the image changes only through this
            # controller's commits, which wait for the lock held here.
            checked = []
            turns = LoopSlice(WALK_SLICE_S)
            for change in changes:
                checked.append(self._checked_isr_change(broker_id, change, live))
                await turns.pause()
            records = [record for _, _, record in checked if record is not None]
            if records:
                await self._commit(records)
            return [(error, self.image.topics[info.topic].partitions[info.partition]
                     if record is not None else info) for error, info, record in checked]

    def _checked_isr_change(self, broker_id: int, change: IsrChange, live: set[int]
                            ) -> tuple[ErrorCode, PartitionInfo | None, dict | None]:
        topic = self.image.topics_by_id.get(change.topic_id)
        info = topic.partitions.get(change.partition) if topic else None
        if info is None:
            return ErrorCode.unknown_topic_or_partition, None, None
        if info.leader != broker_id:
            return ErrorCode.not_leader_or_follower, info, None
        if change.leader_epoch != info.leader_epoch:
            return ErrorCode.fenced_leader_epoch, info, None
        if change.partition_epoch != info.partition_epoch:
            return ErrorCode.invalid_update_version, info, None
        if broker_id not in change.new_isr or any(r not in live or r not in info.replicas
                                                  for r in change.new_isr):
            return ErrorCode.ineligible_replica, info, None
        # The ISR change may complete a reassignment (all its target replicas in sync).
        return ErrorCode.none, info, _partition_change(info, _complete_reassignment_if_caught_up(
            replace(info, isr=list(change.new_isr)), live))

    # --- configs ------------------------------------------------------------------------

    async def alter_topic_configs(self, name: str, changes: Sequence[ConfigChange],
                                  replace: bool = False, validate_only: bool = False) -> None:
        """Change a topic's explicit configs (``replace``: AlterConfigs' legacy semantics, the
        changes become all of them; kipper.storage.mode is kept unless named). A new
        kipper.storage.mode starts a live switch (docs/mode-switch.md): every partition is
        sealed, and the mode changes once each has its span of the new mode."""
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
                current_mode = self._storage_mode(name)
                target_mode = configs.get(STORAGE_MODE, self.settings.default_storage_mode)
                configs = validate_topic_configs(configs)
                switching_to = next((info.switch_to for info in topic.partitions.values()
                                     if info.switch_to is not None), None)
                if switching_to is not None and any(c.name == STORAGE_MODE for c in changes) \
                        and target_mode != switching_to:
                    raise InvalidConfig(f"{name} is already switching its storage mode to "
                                        f"{switching_to}")
                switch = switching_to is None and target_mode != current_mode
                if switch:
                    self._check_storage_switch(topic, current_mode, target_mode)
                if switch or STORAGE_MODE in topic.configs:
                    # Kept explicit; a switch changes it once every partition has its new
                    # span (record_storage_span).
                    configs[STORAGE_MODE] = current_mode
            if validate_only:
                return
            records = []
            if configs != topic.configs:
                records.append({"type": "config", "topic": name, "configs": configs})
            if switch:
                log.info("switching %s from %s to %s", name, current_mode, target_mode)
                records += [_partition_change(info, _switching(info, target_mode))
                            for info in topic.partitions.values()]
            if records:
                await self._commit(records)

    def _check_storage_switch(self, topic: TopicInfo, current: str, target: str) -> None:
        """A live storage-mode switch (docs/mode-switch.md): between classic and diskless,
        of a data topic."""
        if {current, target} != SWITCHABLE_MODES:
            raise InvalidConfig(
                f"{STORAGE_MODE} of a live topic switches between "
                f"{' and '.join(sorted(SWITCHABLE_MODES))} only, not from {current} to {target}")
        if topic.name.startswith("__"):
            raise InvalidConfig(f"the storage mode of internal topic {topic.name} is fixed")

    async def record_storage_span(self, broker_id: int, topic_id: uuid.UUID, partition: int,
                                  leader_epoch: int, mode: str, base_offset: int) -> ErrorCode:
        """The partition's leader sealed its newest span at ``base_offset`` and started the
        next one, of ``mode``, there (replication/storage_switch.py): record the span, which
        unseals the partition with a new leader epoch; with the topic's last partition, the
        topic's kipper.storage.mode becomes ``mode`` in the same commit."""
        async with self._lock:
            self._check_active()
            topic = self.image.topics_by_id.get(topic_id)
            info = topic.partitions.get(partition) if topic is not None else None
            if topic is None or info is None:
                return ErrorCode.unknown_topic_or_partition
            current_mode = self._storage_mode(topic.name)
            chain = info.span_chain(current_mode)
            if info.switch_to is None:
                # A retry of a request already recorded: the span is there.
                return (ErrorCode.none if chain[-1] == StorageSpan(mode, base_offset)
                        else ErrorCode.invalid_request)
            if info.leader != broker_id:
                return ErrorCode.not_leader_or_follower
            if leader_epoch != info.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if mode != info.switch_to or base_offset < chain[-1].base_offset:
                return ErrorCode.invalid_request
            switched = replace(info, spans=[*chain, StorageSpan(mode, base_offset)],
                               switch_to=None, leader_epoch=info.leader_epoch + 1,
                               partition_epoch=info.partition_epoch + 1)
            records = [partition_record(switched)]
            if all(other.switch_to is None for other in topic.partitions.values()
                   if other.partition != partition):
                records.append({"type": "config", "topic": topic.name,
                                "configs": {**topic.configs, STORAGE_MODE: mode}})
            log.info("%s-%d continues in %s storage at offset %d", topic.name, partition,
                     mode, base_offset)
            await self._commit(records)
            return ErrorCode.none

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

    async def alter_group_configs(self, group: str, changes: Sequence[ConfigChange],
                                  replace: bool = False, validate_only: bool = False) -> None:
        """Change the configs set on one group (KIP-848/KIP-932 group configs); the group
        need not exist, as in Kafka. Deleting a config restores the broker setting's value."""
        if not group:
            raise ControllerError(ErrorCode.invalid_request, "Group name must not be empty")
        async with self._lock:
            current = self.image.group_configs.get(group, {})
            with _invalid_config():
                _check_unique(changes)
                validate_group_configs({change.name: None for change in changes})
                configs = changed_configs(current, changes, replace, lambda name: None)
                validate_group_configs(configs)
            if not validate_only and configs != current:
                await self._commit([group_config_record(group, configs)])

    # --- SCRAM credentials ---------------------------------------------------------------

    async def alter_scram_credentials(
            self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion],
    ) -> dict[str, ControllerError | None]:
        """AlterUserScramCredentials: each user's changes succeed or fail together, with
        Kafka's checks (ControllerApis / ScramControlManager); the outcome per user, in the
        order the users first appear."""
        async with self._lock:
            outcome: dict[str, ControllerError | None] = {}
            changes: dict[str, list[dict]] = {}
            seen: dict[tuple[str, int], int] = {}
            for change in [*deletions, *upsertions]:
                outcome.setdefault(change.user, None)
                key = (change.user, change.mechanism)
                seen[key] = seen.get(key, 0) + 1
            for change in [*deletions, *upsertions]:
                if outcome[change.user] is not None:
                    continue
                try:
                    if seen[(change.user, change.mechanism)] > 1:
                        raise ControllerError(ErrorCode.duplicate_resource,
                                              "A user credential cannot be altered twice in the "
                                              "same request")
                    changes.setdefault(change.user, []).append(self._scram_record(change))
                except ControllerError as e:
                    outcome[change.user] = e
            records = [record for user, user_records in changes.items()
                       if outcome[user] is None for record in user_records]
            await self._commit(records)
            return outcome

    def _scram_record(self, change: ScramDeletion | ScramUpsertion) -> dict:
        if not change.user:
            raise ControllerError(ErrorCode.unacceptable_credential, "Username must not be empty")
        try:
            mechanism = ScramMechanism.from_type_id(change.mechanism)
        except UnknownScramMechanism as e:
            raise ControllerError(ErrorCode.unsupported_sasl_mechanism, str(e)) from None
        if isinstance(change, ScramDeletion):
            if self.image.scram_credentials.lookup(change.user, mechanism) is None:
                raise ControllerError(ErrorCode.resource_not_found,
                                      "Attempt to delete a user credential that does not exist")
            return {"type": "remove_scram_credential", "name": change.user,
                    "mechanism": mechanism.type_id}
        try:
            credential = credential_from_salted_password(mechanism, change.salted_password,
                                                         change.salt, change.iterations)
        except InvalidScramCredential as e:
            raise ControllerError(ErrorCode.unacceptable_credential, str(e)) from None
        return {"type": "scram_credential", **credential_record(change.user, credential)}

    async def bootstrap_scram_users(self, passwords: dict[str, str]) -> None:
        """Give each of these users SCRAM-SHA-256 and -512 credentials for its password
        unless it has that credential already (Kafka's ``kafka-storage format --add-scram``:
        the first users of a SASL cluster, who can then create the others)."""
        async with self._lock:
            records = [
                {"type": "scram_credential",
                 **credential_record(user, credential_from_password(mechanism, password))}
                for user, password in passwords.items() for mechanism in ScramMechanism
                if self.image.scram_credentials.lookup(user, mechanism) is None]
            await self._commit(records)

    # --- ACLs ---------------------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Add ``bindings`` in one commit; each one's outcome (None: created or there)."""
        async with self._lock:
            records, outcomes = creation_records(self.image.acls, bindings)
            await self._commit(records)
        return outcomes

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        """Remove what ``filters`` match in one commit; each filter's outcome."""
        async with self._lock:
            records, outcomes = deletion_records(self.image.acls, filters)
            await self._commit(records)
        return outcomes

    # --- topics -------------------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: dict[str, str | None], validate_only: bool = False,
                           assignments: list[tuple[int, list[int]]] | None = None,
                           ) -> TopicInfo | None:
        """``assignments``: (partition, replicas) as CreateTopics gives them (then the
        partition count and replication factor must be -1); none = placed here."""
        async with self._lock:
            validate_topic_name(name)
            if name in self.image.topics:
                raise ControllerError(ErrorCode.topic_already_exists,
                                      f"Topic '{name}' already exists.")
            if assignments:
                assignment = self._manual_topic_assignment(num_partitions, replication_factor,
                                                           assignments)
            else:
                assignment = self._default_topic_assignment(num_partitions, replication_factor)
            try:
                clean_configs = validate_topic_configs(configs)
            except InvalidConfig as e:
                raise ControllerError(ErrorCode.invalid_config, str(e)) from None
            if validate_only:
                return None
            records: list[dict] = [{"type": "topic", "name": name, "id": str(uuid.uuid4()),
                                    "configs": clean_configs}]
            records += await self._new_partitions(name, assignment)
            await self._commit(records)
            return self.image.topics[name]

    def _default_topic_assignment(self, num_partitions: int,
                                  replication_factor: int) -> dict[int, list[int]]:
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
        return self._assign(range(num_partitions), replication_factor)

    def _assign(self, partitions: range, replication_factor: int) -> dict[int, list[int]]:
        brokers = self.image.live_brokers()
        if replication_factor > len(brokers):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: "
                f"{len(brokers)}.")
        return assign_replicas({b.node_id: b.rack for b in brokers}, partitions,
                               replication_factor)

    async def _new_partitions(self, topic: str,
                              assignment: dict[int, list[int]]) -> list[dict]:
        """The records of new partitions, each led by its first live replica; fenced ones
        join the ISR later (a manual assignment may name them, KRaft's createTopic). Made in
        turns of the event loop: 5,000 of them in one step held it for 60 ms and more."""
        live = {b.node_id for b in self.image.live_brokers()}
        turns = LoopSlice(WALK_SLICE_S)
        records = []
        for partition, replicas in assignment.items():
            isr = [r for r in replicas if r in live]
            records.append(partition_record(
                PartitionInfo(topic, partition, list(replicas), isr, isr[0])))
            await turns.pause()
        return records

    async def delete_topic(self, name: str) -> TopicInfo:
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                      "This server does not host this topic-partition.")
            await self._commit([{"type": "remove_topic", "name": name}])
            return topic

    async def create_partitions(self, name: str, count: int, validate_only: bool = False,
                                assignments: list[list[int]] | None = None) -> None:
        """``assignments``: the replicas of each new partition (None: placed here)."""
        async with self._lock:
            topic = self.image.topics.get(name)
            if topic is None:
                raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                      f"The topic '{name}' does not exist.")
            if any(info.switch_to is not None for info in topic.partitions.values()):
                # A new partition would start in the old mode, which the topic is leaving.
                raise ControllerError(ErrorCode.reassignment_in_progress,
                                      f"The topic '{name}' is switching its storage mode.")
            current = len(topic.partitions)
            if count <= current:
                raise ControllerError(
                    ErrorCode.invalid_partitions,
                    f"Topic currently has {current} partitions, which is higher than or equal "
                    f"to the requested {count}.")
            _check_partition_count(count - current)
            replication_factor = len(topic.partitions[0].replicas)
            if assignments is None:
                assignment = self._assign(range(current, count), replication_factor)
            else:
                assignment = self._manual_partition_assignment(
                    current, count, replication_factor, assignments)
            if validate_only:
                return
            await self._commit(await self._new_partitions(name, assignment))

    # --- replicas: manual assignment, reassignment (KIP-455), elections (KIP-460) --------

    def _manual_topic_assignment(self, num_partitions: int, replication_factor: int,
                                 assignments: list[tuple[int, list[int]]]) -> dict[int, list[int]]:
        """CreateTopics' own placement, checked as KRaft's ReplicationControlManager does."""
        if replication_factor != -1:
            raise ControllerError(ErrorCode.invalid_request,
                                  "A manual partition assignment was specified, but "
                                  "replication factor was not set to -1.")
        if num_partitions != -1:
            raise ControllerError(ErrorCode.invalid_request,
                                  "A manual partition assignment was specified, but "
                                  "numPartitions was not set to -1.")
        _check_partition_count(len(assignments))
        assignment: dict[int, list[int]] = {}
        expected_factor: int | None = None
        for partition, replicas in assignments:
            if partition in assignment:
                raise ControllerError(ErrorCode.invalid_replica_assignment,
                                      "Found multiple manual partition assignments for "
                                      f"partition {partition}")
            self._check_replicas(partition, replicas, expected_factor)
            expected_factor = len(replicas)
            assignment[partition] = list(replicas)
        if sorted(assignment) != list(range(len(assignment))):
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  "partitions should be a consecutive 0-based integer sequence")
        return assignment

    def _manual_partition_assignment(self, current: int, count: int, replication_factor: int,
                                     assignments: list[list[int]]) -> dict[int, list[int]]:
        """CreatePartitions' placement of the new partitions."""
        if len(assignments) != count - current:
            raise ControllerError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {count - current} additional partition(s), but only "
                f"{len(assignments)} assignment(s) were specified.")
        for partition, replicas in enumerate(assignments, current):
            self._check_replicas(partition, replicas, replication_factor)
        return {partition: list(replicas) for partition, replicas in enumerate(assignments, current)}

    def _check_replicas(self, partition: int, replicas: list[int],
                        replication_factor: int | None) -> None:
        """A manually given replica list: registered brokers, each once, as many as the
        topic's other partitions have, at least one of them live. As KRaft, an unknown
        broker is INVALID_REPLICA_ASSIGNMENT (ZooKeeper-era Kafka said BROKER_NOT_AVAILABLE)."""
        def refuse(message: str) -> ControllerError:
            return ControllerError(ErrorCode.invalid_replica_assignment, message)

        if not replicas:
            raise refuse("The manual partition assignment includes an empty replica list.")
        previous = None
        for broker in sorted(replicas):
            if broker not in self.image.brokers:
                raise refuse(f"The manual partition assignment includes broker {broker}, but "
                             "no such broker is registered.")
            if broker == previous:
                raise refuse(f"The manual partition assignment includes the broker {broker} "
                             "more than once.")
            previous = broker
        if replication_factor is not None and len(replicas) != replication_factor:
            raise refuse(f"The manual partition assignment includes a partition with "
                         f"{len(replicas)} replica(s), but this is not consistent with previous "
                         f"partitions, which have {replication_factor} replica(s).")
        if not any(b.node_id in replicas for b in self.image.live_brokers()):
            raise refuse("All brokers specified in the manual partition assignment for "
                         f"partition {partition} are fenced or in controlled shutdown.")

    def _partition(self, topic: str, partition: int) -> PartitionInfo:
        info = self.image.topics[topic].partitions.get(partition) \
            if topic in self.image.topics else None
        if info is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                  f"Unable to find partition {topic}:{partition}.")
        return info

    def _storage_mode(self, topic: str) -> str:
        return self.image.topics[topic].configs.get("kipper.storage.mode",
                                                    self.settings.default_storage_mode)

    def _nominal_replicas(self, topic: str) -> bool:
        """Whether the topic's replicas need no catch-up to serve or lead it: diskless
        (every broker serves it) and shared (object storage holds it; a new leader reopens
        it from there)."""
        return self._storage_mode(topic) in NOMINAL_REPLICA_MODES

    # --- shared partitions' streams (KIP-1183) -------------------------------------------

    async def commit_shared_streams(self, broker_id: int,
                                    commits: Sequence[StreamCommit]) -> list[CommitOutcome]:
        """Commit ranges of object storage to shared partitions' streams, each only if
        ``broker_id`` leads the partition in the commit's leader epoch (a deposed leader
        still uploading is refused) and the ranges continue the stream
        (storage.shared.stream). The accepted ones are committed together."""
        async with self._lock:
            self._check_active()
            streams = self.image.shared_streams
            outcomes: list[CommitOutcome] = []
            accepted: list[StreamCommit] = []
            seen: set[tuple[str, int]] = set()
            for commit in commits:
                error, message = self._check_stream_commit(broker_id, commit, seen)
                outcomes.append(CommitOutcome(error, message))
                if error == ErrorCode.none:
                    accepted.append(commit)
            replaced = {id(commit): streams.replaced_objects(commit) for commit in accepted}
            await self._commit([commit.record() for commit in accepted])
            # What the committer may delete, which only this image can tell: an accepted
            # commit's replaced objects no stream refers to any more, a refused one's own
            # objects no stream refers to. A refusal does not prove its objects unused: an
            # earlier attempt of the same commit, whose answer was lost in a controller
            # failover, may have landed (and is why this one was refused).
            return [replace(outcome, freed=tuple(sorted(
                        obj for obj in (replaced.get(id(commit), ()) if outcome.error_code == 0
                                        else {(r.bucket, r.key) for r in commit.ranges})
                        if not streams.referenced(*obj))))
                    for commit, outcome in zip(commits, outcomes)]

    def _check_stream_commit(self, broker_id: int, commit: StreamCommit,
                             seen: set[tuple[str, int]]) -> tuple[ErrorCode, str]:
        topic = self.image.topics.get(commit.topic)
        info = topic.partitions.get(commit.partition) if topic is not None else None
        if info is None:
            return ErrorCode.unknown_topic_or_partition, ""
        if self._storage_mode(commit.topic) != "shared":
            return ErrorCode.invalid_request, f"{commit.topic} is not a shared topic"
        if info.leader != broker_id:
            return ErrorCode.not_leader_or_follower, f"the leader is {info.leader}"
        if info.leader_epoch != commit.leader_epoch:
            return ErrorCode.fenced_leader_epoch, f"the leader epoch is {info.leader_epoch}"
        if (commit.topic, commit.partition) in seen:
            return ErrorCode.invalid_request, "one commit per partition and request"
        seen.add((commit.topic, commit.partition))
        return self.image.shared_streams.check(commit)

    async def alter_partition_reassignment(self, topic: str, partition: int,
                                           target: list[int] | None) -> None:
        """Move a partition to ``target`` (None: cancel the reassignment under way).

        As KIP-455: ``replicas`` becomes target + the replicas being removed, the new ones
        follow the leader and catch up, and once every target replica is in the ISR (an
        AlterPartition from the leader) the controller drops the others
        (``_complete_reassignment_if_caught_up``). A diskless partition's replicas are
        nominal (every broker serves it): its reassignment completes at once."""
        async with self._lock:
            info = self._partition(topic, partition)
            live = {b.node_id for b in self.image.live_brokers()}
            if target is None:
                if not (info.adding_replicas or info.removing_replicas):
                    raise ControllerError(ErrorCode.no_reassignment_in_progress,
                                          f"No ongoing reassignment for {topic}-{partition}.")
                log.info("cancelling the reassignment of %s-%d", topic, partition)
                await self._commit([_partition_change(info, self._reverted(info, live))])
                return
            self._check_replicas(partition, target, None)
            original = [r for r in info.replicas if r not in info.adding_replicas]
            if self._nominal_replicas(topic):
                isr = [r for r in target if r in live]
                moved = replace(info, replicas=list(target), isr=isr, adding_replicas=[],
                                removing_replicas=[],
                                leader=info.leader if info.leader in isr else isr[0])
            else:
                removing = [r for r in original if r not in target]
                moved = _complete_reassignment_if_caught_up(replace(
                    info, replicas=list(target) + removing,
                    isr=[r for r in info.isr if r in target or r in removing],
                    adding_replicas=[r for r in target if r not in original],
                    removing_replicas=removing), live)
            log.info("reassigning %s-%d from %s to %s", topic, partition, original, target)
            await self._commit([_partition_change(info, moved)])

    def _reverted(self, info: PartitionInfo, live: set[int]) -> PartitionInfo:
        """The partition as before its reassignment: the replicas being added leave."""
        original = [r for r in info.replicas if r not in info.adding_replicas]
        isr = [r for r in info.isr if r in original]
        reverted = replace(info, replicas=original, adding_replicas=[], removing_replicas=[])
        if not isr:  # only new replicas were in sync: the originals take over uncleanly
            leader = next((r for r in original if r in live), NO_LEADER)
            return replace(reverted, isr=[leader] if leader != NO_LEADER else original,
                           leader=leader)
        leader = info.leader if info.leader in isr else self._choose_leader(reverted, isr, live)
        return replace(reverted, isr=isr, leader=leader)

    def ongoing_reassignments(self, topics: list[tuple[str, list[int]]] | None,
                              ) -> list[PartitionInfo]:
        """The partitions being reassigned, of ``topics`` (name, partitions) or of all;
        unknown topics and partitions are left out (as Kafka does)."""
        if topics is None:
            asked = [info for topic in self.image.topics.values()
                     for info in topic.partitions.values()]
        else:
            asked = [self.image.topics[name].partitions[p] for name, partitions in topics
                     if name in self.image.topics for p in partitions
                     if p in self.image.topics[name].partitions]
        return [info for info in asked if info.adding_replicas or info.removing_replicas]

    async def elect_leaders(self, election: Election,
                            partitions: list[tuple[str, int]] | None,
                            ) -> list[ElectionResult]:
        """ElectLeaders (KIP-460): each asked partition's result; with ``partitions`` None,
        every partition's, leaving out those whose election was not needed (as Kafka)."""
        elect_all = partitions is None
        if elect_all:
            partitions = [(t.name, p) for t in self.image.topics.values() for p in t.partitions]
        results: list[ElectionResult] = []
        known = []
        for topic, partition in partitions:
            try:
                self._partition(topic, partition)
                known.append((topic, partition))
            except ControllerError as e:
                results.append(ElectionResult(topic, partition, e.error_code, e.message))

        def elect(info: PartitionInfo, live: set[int]) -> PartitionInfo | None:
            result = self._election(info, election, live)
            if not (elect_all and result.error == ErrorCode.election_not_needed):
                results.append(result)
            return result.elected

        await self._change_partitions(known, elect)
        return results

    def _election(self, info: PartitionInfo, election: Election,
                  live: set[int]) -> ElectionResult:
        def result(error: ErrorCode, message: str | None = None,
                   elected: PartitionInfo | None = None) -> ElectionResult:
            return ElectionResult(info.topic, info.partition, error, message, elected)

        if election == Election.PREFERRED:
            preferred = info.replicas[0]
            if info.leader == preferred:
                return result(ErrorCode.election_not_needed, "Leader election not needed")
            if preferred not in live or preferred not in info.isr:
                return result(ErrorCode.preferred_leader_not_available,
                              f"Failed to elect leader for partition {info.topic}-"
                              f"{info.partition} under strategy PreferredReplicaPartition"
                              "LeaderElectionStrategy")
            return result(ErrorCode.none, elected=replace(info, leader=preferred))
        if info.leader != NO_LEADER:
            return result(ErrorCode.election_not_needed, "Leader election not needed")
        leader = next((r for r in info.isr if r in live), None)
        isr = info.isr
        if leader is None:
            leader = next((r for r in info.replicas if r in live), None)
            isr = [leader]
        if leader is None:
            return result(ErrorCode.eligible_leaders_not_available,
                          f"Failed to elect leader for partition {info.topic}-{info.partition}"
                          " under strategy UncleanLeaderElectionStrategy")
        log.warning("unclean election of %d for %s-%d (ElectLeaders)", leader, info.topic,
                    info.partition)
        return result(ErrorCode.none, elected=replace(info, leader=leader, isr=isr))

    async def _change_partitions(
            self, partitions: list[tuple[str, int]],
            change: Callable[[PartitionInfo, set[int]], PartitionInfo | None]) -> None:
        """Apply ``change`` (the partition as it should become, or None) to many partitions,
        committing a batch at a time and letting go of the lock in between, so heartbeats
        and AlterPartitions of a large cluster are not held up behind one long change."""
        for start in range(0, len(partitions), PARTITION_CHANGES_PER_COMMIT):
            async with self._lock:
                live = {b.node_id for b in self.image.live_brokers()
                        if not b.log_dir_offline}
                records = []
                for topic, partition in partitions[start:start + PARTITION_CHANGES_PER_COMMIT]:
                    info = self.image.topics[topic].partitions.get(partition) \
                        if topic in self.image.topics else None
                    changed = change(info, live) if info is not None else None  # deleted since
                    if changed is not None:
                        records.append(_partition_change(info, changed))
                await self._commit(records)
            await asyncio.sleep(0)

    # --- preferred-leader rebalancing -------------------------------------------------------

    async def _balance_leaders_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.leader_imbalance_check_interval_s)
            try:
                await self.balance_leaders()
            except ControllerError as e:  # tried again next interval
                log.warning("preferred-leader rebalancing failed: %s", e.message)

    def imbalanced_partitions(self) -> list[tuple[str, int]]:
        """The partitions whose preferred replica (the first) could lead and does not, of
        brokers whose share of such partitions exceeds leader.imbalance.per.broker.percentage
        (Kafka's checkAndTriggerAutoLeaderRebalance)."""
        preferred_of: dict[int, int] = {}
        not_led: dict[int, list[PartitionInfo]] = {}
        for topic in self.image.topics.values():
            for info in topic.partitions.values():
                preferred = info.replicas[0]
                preferred_of[preferred] = preferred_of.get(preferred, 0) + 1
                if info.leader != preferred:
                    not_led.setdefault(preferred, []).append(info)
        live = {b.node_id for b in self.image.live_brokers() if not b.log_dir_offline}
        threshold = self.settings.leader_imbalance_per_broker_percentage / 100
        return [(info.topic, info.partition)
                for broker, infos in not_led.items()
                if broker in live and len(infos) / preferred_of[broker] > threshold
                for info in infos if broker in info.isr]

    async def balance_leaders(self) -> None:
        imbalanced = self.imbalanced_partitions()
        if not imbalanced:
            return
        log.info("moving %d leaderships back to their preferred replicas", len(imbalanced))

        def to_preferred(info: PartitionInfo, live: set[int]) -> PartitionInfo | None:
            return self._election(info, Election.PREFERRED, live).elected

        await self._change_partitions(imbalanced, to_preferred)


def _partition_change(before: PartitionInfo, after: PartitionInfo, **changes) -> dict:
    """The record that turns ``before`` into ``after`` (with ``changes`` made to it): a new
    partition epoch, and a new leader epoch if the leader changed."""
    leader = changes.get("leader", after.leader)
    return partition_record(replace(
        after, **changes,
        leader_epoch=before.leader_epoch + (1 if leader != before.leader else 0),
        partition_epoch=before.partition_epoch + 1))


def _switching(info: PartitionInfo, mode: str) -> PartitionInfo:
    """The partition sealed for a live switch to storage mode ``mode``."""
    return replace(info, switch_to=mode)


def _complete_reassignment_if_caught_up(info: PartitionInfo, live: set[int]) -> PartitionInfo:
    """Once every target replica of a reassignment is in the ISR, the partition becomes the
    target: the removed replicas leave replicas and ISR, and if the leader was one of them
    the first target replica in sync leads (Kafka's PartitionChangeBuilder)."""
    if not (info.adding_replicas or info.removing_replicas):
        return info
    target = [r for r in info.replicas if r not in info.removing_replicas]
    if any(r not in info.isr for r in target):
        return info
    isr = [r for r in info.isr if r in target]
    leader = info.leader
    if leader not in isr:
        leader = next((r for r in target if r in live), NO_LEADER)
    return replace(info, replicas=target, isr=isr, leader=leader, adding_replicas=[],
                   removing_replicas=[])
