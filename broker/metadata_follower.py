"""A broker's link to the controller: registration, heartbeats, and the metadata log.

The broker keeps no metadata of its own: it fetches ``__cluster_metadata`` from the active
controller (the quorum's leader, which sends observers committed records only) with
ordinary Fetch requests, applies each record to its image (coordinator.state_machine) and
tells the replica manager, exactly like a KRaft observer. On a node that is also a voter
it reads the committed records of its own voter's replica instead (``LocalReplica``), as
KRaft's combined nodes do. Its connections follow the active controller when it changes
(replication.raft.leader_connection).

Its lifecycle is KRaft's too: it registers, and heartbeats from then on, fenced (leading
nothing) while it catches up with the metadata (the replica manager notes the partitions it
hosts and opens their logs later); then it asks to be unfenced. Applying yields to the event
loop every few records, so heartbeats and requests are served while thousands of partition
records are applied.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Callable, Protocol

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v3.request import BrokerRegistrationRequest, Listener
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch_snapshot.v0.request import (
    FetchSnapshotRequest,
    PartitionSnapshot,
    SnapshotId,
    TopicSnapshot,
)

from coordinator.state_machine import DECODE_CHUNK, Applier
from protocol.apis import ApiKey
from protocol.build import make
from protocol.records import decode_json_records, json_record_chunks
from replication.cluster_metadata import METADATA_TOPIC, MetadataImage
from replication.partition import PartitionError
from replication.raft import RaftFetchResponse
from replication.raft import SnapshotId as RaftSnapshotId
from replication.raft.leader_connection import LeaderConnection

from .heap import Heap

# kipper brokers have one data directory; heartbeats name it when it is offline (full).
DATA_DIR_ID = uuid.UUID("6b697070-6572-4000-8000-000000000001")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """An advertised listener as BrokerRegistration carries it."""

    name: str
    host: str
    port: int
    security_protocol: int  # Kafka's id: PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3

FETCH_MAX_WAIT_MS = 500
# How long a read of this node's own quorum replica waits for news (nothing is sent: a
# long wait costs nothing, and a short one only wakes the loop).
LOCAL_READ_WAIT_S = 10.0


class LocalReplica(Protocol):
    """This node's own voter replica of the metadata log (coordinator.controller.Controller
    on a combined node)."""

    async def read_committed(self, offset: int, max_bytes: int,
                             max_wait_s: float) -> RaftFetchResponse: ...

    def snapshot_records(self, snapshot: RaftSnapshotId) -> list[dict]: ...

# Snapshot records loaded between two yields to the event loop (the log's records are applied
# in slices of time, Applier.apply_in_turns).
APPLY_SLICE = 8
# Snapshot bytes asked per FetchSnapshot.
SNAPSHOT_CHUNK = 4 << 20
# Between attempts to register or to get unfenced, and how often the heartbeat loop looks
# whether the data directory's state changed (reported at once, not at the next heartbeat).
RETRY_S = 0.5


class MetadataFollower:
    def __init__(self, node_id: int, controller: LeaderConnection,
                 metadata_fetches: LeaderConnection,
                 image: MetadataImage, listener: Callable[[dict], None],
                 heartbeat_interval_s: float = 2.0,
                 log_dir_full: Callable[[], bool] = lambda: False,
                 quorum_fetch_timeout_s: float = 1.0,
                 local: LocalReplica | None = None) -> None:
        """``local``: on a node that is also a voter, its replica, which the metadata is
        read from instead of fetched from the active controller: each voter replicates
        the log already, and fetching it again made the active controller answer every
        record once more per broker (and, idle, two more long polls a second each)."""
        self.node_id = node_id
        self.controller = controller
        # Long polls get their own connection so heartbeats are never queued behind them.
        self.metadata_fetches = metadata_fetches
        self.local = local
        self.image = image
        self.heartbeat_interval_s = heartbeat_interval_s
        # A metadata fetch unanswered for this long after its long poll: the voter asked may
        # be cut off (its answer would never come), so the next one is asked, as a KRaft
        # observer does after controller.quorum.fetch.timeout.ms. Whoever answers names the
        # leader, and the heartbeats hung on the old one follow (LeaderConnection).
        self.quorum_fetch_timeout_s = quorum_fetch_timeout_s
        # Reported in every heartbeat, so the controller moves our leaderships while it is.
        self.log_dir_full = log_dir_full
        self._reported_log_dir_full = False  # in the last heartbeat sent
        self.epoch = -1
        # Asked in every heartbeat until this broker has loaded what it hosts (start).
        self._want_fence = True
        self._registration: tuple[tuple[Endpoint, ...], str | None] | None = None
        self._tasks: list[asyncio.Task] = []
        self.applier = Applier(image)
        self.applier.listeners.append(lambda offset, record, result: listener(record))
        self.heap = Heap()
        self.applier.listeners.append(lambda offset, record, result: self.heap.added())

    async def start(self, endpoints: tuple[Endpoint, ...], rack: str | None) -> None:
        """Register, catch up with the metadata (noting every partition this broker hosts), then
        get unfenced: from then on it may lead partitions. ``endpoints``: the advertised
        listeners, the inter-broker one first (what other nodes connect to)."""
        self._registration = (endpoints, rack)
        await self._register()
        self._tasks = [asyncio.create_task(self._fetch_loop()),
                       asyncio.create_task(self._heartbeat_loop())]
        await self.catch_up()
        await self._unfence()

    async def _unfence(self) -> None:
        """Ask in a heartbeat now, and in every later one (the heartbeat loop re-registers
        if the controller forgot this broker), until the controller has unfenced it."""
        self._want_fence = False
        while True:
            try:
                response = await self._heartbeat(want_shut_down=False)
                if response.error_code == ErrorCode.none and not response.is_fenced:
                    break
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                log.warning("heartbeat failed: %s", e)
            await asyncio.sleep(RETRY_S)
        await self.catch_up()  # until this broker's image shows it unfenced

    async def _register(self) -> None:
        endpoints, rack = self._registration
        request = make(BrokerRegistrationRequest, broker_id=self.node_id, cluster_id="",
                       incarnation_id=None, rack=rack, is_migrating_zk_broker=False,
                       log_dirs=(), previous_broker_epoch=self.epoch, features=(),
                       listeners=tuple(make(Listener, name=e.name, host=e.host, port=e.port,
                                            security_protocol=e.security_protocol)
                                       for e in endpoints))
        # Retried every half second: a failure is logged when it differs from the last
        # one, not at every attempt (a controller on a full disk refused 117 in a row).
        last_failure, attempts = None, 0
        while True:
            attempts += 1
            try:
                response = await self.controller.call(ApiKey.BROKER_REGISTRATION, request, 10)
                if response.error_code == ErrorCode.none:
                    self.epoch = response.broker_epoch
                    if last_failure is not None:
                        log.info("registered after %d attempts", attempts)
                    return
                failure = f"registration refused: {response.error_code.name}"
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                failure = f"controller unreachable for registration: {e}"
            if failure != last_failure:
                log.warning("%s (retrying every %s s)", failure, RETRY_S)
                last_failure = failure
            await asyncio.sleep(RETRY_S)

    async def _heartbeat_loop(self, want_shut_down: bool = False) -> None:
        """A heartbeat every heartbeat_interval_s, and at once when the data directory
        starts or stops refusing appends (Kafka's BrokerLifecycleManager does the same for a
        failed log dir): the controller moves the leaderships of a full disk without waiting
        for the next one."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.heartbeat_interval_s
            while loop.time() < due and self.log_dir_full() == self._reported_log_dir_full:
                await asyncio.sleep(min(RETRY_S, due - loop.time()))
            try:
                response = await self._heartbeat(want_shut_down=False)
                if response.error_code == ErrorCode.stale_broker_epoch:
                    log.warning("controller no longer knows epoch %d: registering again",
                                self.epoch)
                    await self._register()
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                log.warning("heartbeat failed: %s", e)

    async def _heartbeat(self, want_shut_down: bool):
        self._reported_log_dir_full = self.log_dir_full()
        return await self.controller.call(ApiKey.BROKER_HEARTBEAT, make(
            BrokerHeartbeatRequest, broker_id=self.node_id, broker_epoch=self.epoch,
            current_metadata_offset=self.image.next_offset - 1, want_fence=self._want_fence,
            want_shut_down=want_shut_down,
            offline_log_dirs=(DATA_DIR_ID,) if self._reported_log_dir_full else ()), 5)

    async def shut_down(self) -> None:
        """Controlled shutdown: ask the controller to move our leaderships away first."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await self._heartbeat(want_shut_down=True)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.warning("controlled shutdown request failed: %s", e)

    def _fetch_request(self, max_wait_ms: int, max_bytes: int) -> FetchRequest:
        return make(FetchRequest, replica_id=-1, max_wait=max_wait_ms, min_bytes=1,
                    max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                    forgotten_topics_data=(), rack_id="",
                    topics=(make(FetchTopic, topic=METADATA_TOPIC, partitions=(
                        make(FetchPartition, partition=0, current_leader_epoch=-1,
                             fetch_offset=self.image.next_offset, last_fetched_epoch=-1,
                             log_start_offset=-1, partition_max_bytes=max_bytes),)),))

    async def _fetch_loop(self) -> None:
        if self.local is not None:
            await self._read_loop(self.local)
            return
        while True:
            request = self._fetch_request(FETCH_MAX_WAIT_MS, 16 << 20)
            try:
                response = await self.metadata_fetches.call(
                    ApiKey.FETCH, request, FETCH_MAX_WAIT_MS / 1000 + 10,
                    attempt_s=FETCH_MAX_WAIT_MS / 1000 + self.quorum_fetch_timeout_s)
            except (ConnectionError, OSError, asyncio.TimeoutError) as e:
                log.warning("metadata fetch failed: %s", e)
                await asyncio.sleep(0.5)
                continue
            data = response.responses[0].partitions[0]
            if data.error_code != ErrorCode.none:
                log.warning("metadata fetch error %s", data.error_code.name)
                await asyncio.sleep(0.5)
                continue
            if data.snapshot_id.end_offset >= 0:
                await self._load_snapshot(data.snapshot_id)
                continue
            await self.applier.apply_in_turns(json_record_chunks(data.records or b"",
                                                                 DECODE_CHUNK))

    async def _read_loop(self, local: LocalReplica) -> None:
        """The metadata from this node's own replica: committed records, or the snapshot
        below its log start."""
        while True:
            answer = await local.read_committed(self.image.next_offset, 16 << 20,
                                                LOCAL_READ_WAIT_S)
            if answer.snapshot is not None:
                try:
                    records = local.snapshot_records(answer.snapshot)
                except (OSError, ValueError) as e:  # replaced by a newer one meanwhile
                    log.warning("metadata snapshot not read: %s", e)
                    await asyncio.sleep(0.5)
                    continue
                await self._apply_snapshot(answer.snapshot.end_offset, records)
            elif answer.records:
                await self.applier.apply_in_turns(json_record_chunks(answer.records,
                                                                     DECODE_CHUNK))

    async def _load_snapshot(self, snapshot_id) -> None:
        """Fetch the snapshot the controller named (KIP-630 FetchSnapshot, a chunk at a time)
        and apply it in place of the log below its end offset."""
        data = bytearray()
        while True:
            response = await self.metadata_fetches.call(ApiKey.FETCH_SNAPSHOT, make(
                FetchSnapshotRequest, cluster_id=None, replica_id=-1, max_bytes=SNAPSHOT_CHUNK,
                topics=(make(TopicSnapshot, name=METADATA_TOPIC, partitions=(make(
                    PartitionSnapshot, partition=0, current_leader_epoch=-1,
                    snapshot_id=make(SnapshotId, end_offset=snapshot_id.end_offset,
                                     epoch=snapshot_id.epoch),
                    position=len(data)),)),)), 30)
            chunk = (response.topics[0].partitions[0] if response.topics
                     else None)
            error = chunk.error_code if chunk is not None else response.error_code
            if error != ErrorCode.none:
                # e.g. replaced by a newer snapshot meanwhile: the next fetch names that one.
                log.warning("metadata snapshot fetch failed: %s", error.name)
                await asyncio.sleep(0.5)
                return
            data += chunk.unaligned_records
            if len(data) >= chunk.size or not chunk.unaligned_records:
                break
        await self._apply_snapshot(snapshot_id.end_offset,
                                   [record for _, record in decode_json_records(bytes(data))])

    async def _apply_snapshot(self, end: int, snapshot: list[dict]) -> None:
        """Apply a snapshot ending at ``end`` in place of the log below it."""
        records = self.image.snapshot_delta(snapshot)
        log.info("loading metadata snapshot ending at %d (%d records)", end, len(records))
        for start in range(0, len(records), APPLY_SLICE):
            last = start + APPLY_SLICE >= len(records)
            # The image reaches the snapshot's end offset with the last slice only, so no
            # one (catch_up) sees it caught up before every record is applied.
            self.applier.load_snapshot(end if last else self.image.next_offset,
                                       records[start:start + APPLY_SLICE])
            await asyncio.sleep(0)

    async def catch_up(self, timeout: float = 30.0) -> None:
        """Wait until this broker has applied everything the controller has committed."""
        response = await self.controller.call(ApiKey.FETCH, self._fetch_request(0, 1), timeout)
        answer = response.responses[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            raise PartitionError(answer.error_code, "the active controller's metadata offset")
        await self.applier.wait_until_applied(answer.high_watermark, timeout)
