"""The diskless batch coordinator (KIP-1164) as every broker runs it.

Its log is the internal classic topic ``__diskless-metadata`` (one partition, replicated).
Every broker that hosts a replica of it applies the committed records, in log order, to
its own SQLite copy of the state (``BatchCoordinatorState``) and answers read-only queries
(find batches, log offsets) from it. The broker leading the partition is the writable
coordinator: a state change (commit a WAL file, delete records, retention, object
deletion, merge) is appended with acks=all and answered with the result of applying it.
Other brokers reach the coordinator through the internal API
DISKLESS_COORDINATOR_APPEND; when leadership moves they retry against the new leader with
the same record, whose request id makes the retry harmless.

Queries answer from this broker's copy, which trails the coordinator by a replication
round: ``catch_up`` first brings it up to what the coordinator has committed, so that
reads through any broker see every acknowledged change (see ``catch_up``).

The writable coordinator checkpoints the state to object storage, and a broker without a
usable database restores the newest checkpoint and applies the log after it; the log below
the checkpoints is deleted (checkpoints.py).

Of the replica layer it needs only ``MetadataLogReplica`` (the partition, as this broker
holds it), ``CallNode`` (a call to another broker) and ``CommittedOffsetAt`` (the
coordinator's committed offset, asked of another broker), all given by the broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from protocol.internal import JsonBody
from protocol.records import (
    BatchHeader,
    encode_json_records,
    iter_batches,
    json_record_chunks,
)
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, MetadataImage
from replication.partition import PartitionError
from storage.diskless.control_plane import (
    COORDINATOR_MAX_MESSAGE_BYTES,
    BatchCoordinate,
    CheckpointTaken,
    CheckpointTakenResult,
    CommitFile,
    DeleteRecords,
    LogInfo,
    RecordControlPlane,
    RecordRejected,
    Request,
    RequestTooLarge,
    StateStats,
    decode_request,
)
from storage.log import AppendResult, NotCaughtUp, PartitionLog, RecordTooLarge
from storage.objectstore import ObjectStoreError
from storage.producer_state import AbortedTransaction, ProducerEntry

from ..state_machine import Applier
from .batch_state import BatchCoordinatorState
from .checkpoints import (
    CHECKPOINTS_KEPT,
    CheckpointSettings,
    CheckpointStore,
    copy_state,
    write_checkpoint,
)

log = logging.getLogger(__name__)
RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5)
COMMIT_TIMEOUT_S = 30.0
# How often a call to a remote coordinator looks whether the metadata still names it.
LEADERSHIP_CHECK_S = 0.2
# How often the writable coordinator looks whether a checkpoint is due.
CHECKPOINT_POLL_S = 1.0


class MetadataLogReplica(Protocol):
    """The partition ``__diskless-metadata-0`` as this broker's replica layer holds it
    (replication's Partition)."""

    log: PartitionLog

    @property
    def is_leader(self) -> bool: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def leader_epoch_start_offset(self) -> int: ...

    async def append_as_leader(self, records: bytearray, batches: list[BatchHeader],
                               required_acks: int, timeout_s: float) -> AppendResult:
        """Raises PartitionError when this broker cannot append as the leader."""

    async def wait_for_change(self, timeout_s: float) -> None: ...


# Send an internal request body to the broker at (host, port); its answer.
CallNode = Callable[[str, int, JsonBody, float], Awaitable[JsonBody]]
# The high watermark of __diskless-metadata-0 at the broker (host, port) leading it
# (ListOffsets LATEST); raises PartitionError with that broker's error.
CommittedOffsetAt = Callable[[str, int, float], Awaitable[int]]


class NotCoordinator(Exception):
    """This broker does not lead ``__diskless-metadata-0`` (any more)."""


class CoordinatorUnavailable(Exception):
    """No coordinator answered before the deadline."""


class StateBehindLog(Exception):
    """This broker's state ends below its log's start and no checkpoint could be restored."""


@dataclasses.dataclass(frozen=True)
class CheckpointTimes:
    """The latest checkpoint this broker took or restored: the offset it reflects, its size
    and how long taking it (copy, upload, record) or restoring it (download, check, swap)
    took."""

    offset: int = -1
    size_bytes: int = 0
    seconds: float = 0.0


class BatchCoordinator(RecordControlPlane):
    """This broker's part of the coordinator, as a ControlPlane: state changes go to the
    writable coordinator wherever it runs; queries read the local materialised state."""

    def __init__(self, node_id: int, state_path: Path, image: MetadataImage,
                 metadata_log: Callable[[], MetadataLogReplica | None], call_node: CallNode,
                 create_topic: Callable[..., Awaitable[ErrorCode]],
                 committed_offset_at: CommittedOffsetAt, catch_up_timeout_s: float,
                 checkpoints: CheckpointStore | None = None,
                 checkpoint_settings: CheckpointSettings = CheckpointSettings()) -> None:
        """``checkpoints``: where checkpoints go (None: none are taken, the log is kept)."""
        self.node_id = node_id
        self.state = BatchCoordinatorState(state_path)
        self.image = image
        self._metadata_log = metadata_log
        self._call_node = call_node
        self.create_topic = create_topic
        # Called with the (topic id, partition) pairs a newly applied record changed.
        self.on_change: list[Callable[[set[tuple[str, int]]], None]] = []
        self._applied = _AppliedState(self.state, self.on_change)
        self.applier = Applier(self._applied)
        self._apply_task: asyncio.Task | None = None
        self._checkpoint_task: asyncio.Task | None = None
        self._checkpoints = checkpoints
        self.checkpoint_settings = checkpoint_settings
        # A state starting empty is restored from a checkpoint once, if there is one.
        self._restore_tried = False
        self.checkpoint_taken = CheckpointTimes()
        self.checkpoints_taken = 0
        self.checkpoint_restored = CheckpointTimes()
        self.commit_latencies_ms: deque[float] = deque(maxlen=10_000)
        self.commit_requests = 0
        self.appends = 0
        self._committed_offset_at = committed_offset_at
        self.catch_up_timeout_s = catch_up_timeout_s
        self._committed_offsets = _CommittedOffsetQuestions(self._ask_committed_offset)
        self.catch_up_failures = 0
        self._last_question_error: Exception | None = None  # for the NotCaughtUp message
        # The latest catch-up: its ``since`` and the committed offset it waited for. A Fetch
        # catches up once for each of its partitions with the same ``since``.
        self._caught_up: tuple[float, int] = (-math.inf, 0)

    def start(self) -> None:
        self._apply_task = asyncio.create_task(self._apply_loop())
        if self._checkpoints is not None:
            self._checkpoint_task = asyncio.create_task(self._checkpoint_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._apply_task, self._checkpoint_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.state.close()

    @property
    def is_writable(self) -> bool:
        """True while this broker leads the coordinator's log."""
        partition = self._metadata_log()
        return partition is not None and partition.is_leader

    # --- queries, from this broker's materialised state ----------------------------------

    def log_info(self, topic_id: str, partition: int) -> LogInfo:
        return self.state.log_info(topic_id, partition)

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]:
        return self.state.find_batches(topic_id, partition, offset, max_bytes)

    def offset_for_timestamp(self, topic_id: str, partition: int,
                             timestamp_ms: int) -> BatchCoordinate | None:
        return self.state.offset_for_timestamp(topic_id, partition, timestamp_ms)

    def max_timestamp_batch(self, topic_id: str, partition: int) -> BatchCoordinate | None:
        return self.state.max_timestamp_batch(topic_id, partition)

    def files_to_delete(self, now_ms: int, delay_ms: int) -> list[str]:
        return self.state.files_to_delete(now_ms, delay_ms)

    def is_known_object(self, key: str) -> bool:
        return self.state.is_known_object(key)

    def merge_candidates(self, max_object_size: int, limit: int,
                         skip_prefixes: tuple[str, ...] = (),
                         created_before_ms: int | None = None) -> list[str]:
        return self.state.merge_candidates(max_object_size, limit, skip_prefixes,
                                           created_before_ms)

    def object_batches(self, key: str) -> list[BatchCoordinate]:
        return self.state.object_batches(key)

    def last_stable_offset(self, topic_id: str, partition: int) -> int:
        return self.state.last_stable_offset(topic_id, partition)

    def aborted_transactions(self, topic_id: str, partition: int, start: int,
                             end: int) -> list[AbortedTransaction]:
        return self.state.aborted_transactions(topic_id, partition, start, end)

    def active_producers(self, topic_id: str, partition: int) -> list[ProducerEntry]:
        return self.state.active_producers(topic_id, partition)

    def logs(self) -> list[tuple[str, int]]:
        return self.state.logs()

    def stats(self) -> StateStats:
        return self.state.stats()

    # --- state changes --------------------------------------------------------------------

    async def submit(self, request: Request) -> Any:
        """Have the coordinator, wherever it runs, append and apply ``request``; retried
        (same request, so harmlessly) until COMMIT_TIMEOUT_S while leadership moves."""
        started = time.monotonic()
        deadline = started + COMMIT_TIMEOUT_S
        attempt = 0
        while True:
            try:
                result = await self._submit_once(request, deadline - time.monotonic())
                self.commit_requests += 1
                self.commit_latencies_ms.append((time.monotonic() - started) * 1000)
                return result
            except (TimeoutError, NotCoordinator, ConnectionError, OSError) as e:
                backoff = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                attempt += 1
                if time.monotonic() + backoff >= deadline:
                    raise CoordinatorUnavailable(f"no batch coordinator answered: {e!r}") from e
                log.debug("coordinator call failed (%r), retrying", e)
                await asyncio.sleep(backoff)

    async def _submit_once(self, request: Request, timeout_s: float) -> Any:
        if timeout_s <= 0:
            raise TimeoutError()
        await self._ensure_topic()
        coordinator = self._remote_coordinator()
        if coordinator is None:
            return await self.append(request, timeout_s)
        response = await self._call_coordinator(
            coordinator, JsonBody({"record": request.to_wire()}), timeout_s)
        error = response.value["error_code"]
        if error == ErrorCode.invalid_request:
            raise RecordRejected(response.value.get("error_message", "record rejected"))
        if error != ErrorCode.none:
            raise NotCoordinator(response.value.get("error_message", "not the coordinator"))
        return request.RESULT.from_wire(response.value["result"])

    async def _call_coordinator(self, coordinator: tuple[str, int], body: JsonBody,
                                timeout_s: float) -> Any:
        """The call, abandoned (NotCoordinator) once the metadata no longer names that
        coordinator: cut off by a network partition, its connection stays open and the
        answer never comes, so without this the commit would wait out COMMIT_TIMEOUT_S
        while another broker already leads (tests/system/test_netns_partitions.py)."""
        call = asyncio.ensure_future(self._call_node(*coordinator, body, timeout_s))
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=LEADERSHIP_CHECK_S)
                if done:
                    return call.result()
                if self._remote_coordinator() != coordinator:
                    raise NotCoordinator(f"{DISKLESS_METADATA_TOPIC}-0 moved")
        finally:
            call.cancel()

    def _remote_coordinator(self) -> tuple[str, int] | None:
        """The address of the writable coordinator, None if it is this broker; raises
        NotCoordinator while it has no live leader."""
        topic = self.image.topics.get(DISKLESS_METADATA_TOPIC)
        leader = topic.partitions[0].leader if topic and 0 in topic.partitions else -1
        if leader == self.node_id:
            return None
        broker = self.image.brokers.get(leader)
        if broker is None or broker.fenced:
            raise NotCoordinator(f"{DISKLESS_METADATA_TOPIC}-0 has no live leader")
        return broker.host, broker.port

    async def _ensure_topic(self) -> None:
        if DISKLESS_METADATA_TOPIC in self.image.topics:
            return
        replication_factor = min(3, len(self.image.live_brokers()))
        # max.message.bytes set, not inherited from the broker's message.max.bytes: every
        # writer of requests cuts them to fit this limit (control_plane.MAX_REQUEST_BYTES).
        error = await self.create_topic(DISKLESS_METADATA_TOPIC, 1, replication_factor, {
            "kipper.storage.mode": "classic", "retention.ms": "-1", "retention.bytes": "-1",
            "max.message.bytes": str(COORDINATOR_MAX_MESSAGE_BYTES)})
        if error not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise NotCoordinator(f"cannot create {DISKLESS_METADATA_TOPIC}: {error.name}")
        log.info("created %s with replication factor %d", DISKLESS_METADATA_TOPIC,
                 replication_factor)

    async def append(self, request: Request, timeout_s: float) -> Any:
        """As the writable coordinator: append with acks=all, answer once applied here.
        Raises NotCoordinator, RequestTooLarge if the log refuses the record as too large
        (a broker calling through DISKLESS_COORDINATOR_APPEND then gets RecordRejected, and
        does not retry it), or RecordRejected if the record could not be applied."""
        partition = self._metadata_log()
        if partition is None or not partition.is_leader:
            raise NotCoordinator("this broker does not lead the coordinator's log")
        records = encode_json_records([request.to_wire()])
        try:
            appended = await partition.append_as_leader(records, list(iter_batches(records)),
                                                        -1, timeout_s)
        except PartitionError as e:
            raise NotCoordinator(f"append to {DISKLESS_METADATA_TOPIC} failed: {e}") from e
        except RecordTooLarge as e:
            raise RequestTooLarge(f"{request.TYPE} request refused: {e}") from e
        self.appends += 1
        return _outcome(await self.applier.result_of(appended.base_offset, timeout_s))

    # --- reading one's writes ---------------------------------------------------------------

    async def catch_up(self, since: float) -> None:
        """Return once this broker's state includes everything the coordinator had committed
        at some moment after ``since`` (time.monotonic()). A change is acknowledged only
        after it is committed, so the state then includes every change acknowledged before
        ``since``, through whichever broker: ListOffsets, Fetch and DeleteRecords read their
        own writes (Raft's ReadIndex). The writable coordinator asks nobody; another broker
        asks it, and one question answers every caller that arrived before it was sent.
        Raises NotCaughtUp after ``catch_up_timeout_s``."""
        caught_up_since, committed = self._caught_up
        if since <= caught_up_since and self.applier.next_offset >= committed:
            # An answer about a moment after a later ``since`` holds for this one too.
            return
        try:
            async with asyncio.timeout(self.catch_up_timeout_s):
                committed = await self._committed_offset(since)
                await self.applier.wait_until_applied(committed, math.inf)
                if since > self._caught_up[0]:
                    self._caught_up = (since, committed)
        except TimeoutError as e:
            self.catch_up_failures += 1
            raise NotCaughtUp(
                f"this broker's copy of the batch coordinator's state did not catch up "
                f"within {self.catch_up_timeout_s:g} s (applied up to "
                f"{self.applier.next_offset}; coordinator: {self._last_question_error!r})") from e

    async def _committed_offset(self, since: float) -> int:
        """The coordinator's committed offset as of some moment after ``since``; retried
        (until the caller's deadline) while the coordinator cannot be asked."""
        if DISKLESS_METADATA_TOPIC not in self.image.topics:
            return 0  # no diskless change was ever committed
        partition = self._metadata_log()
        if partition is not None and partition.is_leader:
            # Records of earlier leaders below our epoch's start may have been acknowledged
            # while our high watermark still lags them (KIP-207).
            return max(partition.high_watermark, partition.leader_epoch_start_offset)
        attempt = 0
        while True:
            try:
                return await self._committed_offsets.asked_after(since)
            except (TimeoutError, NotCoordinator, PartitionError, ConnectionError, OSError) as e:
                self._last_question_error = e
                log.debug("asking the batch coordinator for its committed offset failed: %r", e)
            await asyncio.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
            attempt += 1

    async def _ask_committed_offset(self) -> int:
        coordinator = self._remote_coordinator()
        if coordinator is None:
            raise NotCoordinator("the coordinator's log is moving to this broker")
        return await self._committed_offset_at(*coordinator, self.catch_up_timeout_s)

    # --- applying the log -----------------------------------------------------------------

    async def _apply_loop(self) -> None:
        while True:
            partition = self._metadata_log()
            if partition is None:
                await asyncio.sleep(0.2)
                continue
            try:
                applied_any = await self._apply_committed(partition)
            except StateBehindLog as e:
                log.warning("%s; retrying", e)
                await asyncio.sleep(1)
                continue
            except Exception:
                log.exception("applying %s failed; retrying", DISKLESS_METADATA_TOPIC)
                await asyncio.sleep(1)
                continue
            if not applied_any:
                await partition.wait_for_change(1.0)

    async def _apply_committed(self, partition: MetadataLogReplica) -> bool:
        """Apply records below the high watermark not applied yet; False if there were none."""
        log_ = partition.log
        if self.state.applied_offset >= log_.log_end_offset:
            # The log was truncated below what we applied (unclean election): start over.
            log.warning("%s was truncated below the applied offset %d; rebuilding the state",
                        DISKLESS_METADATA_TOPIC, self.state.applied_offset)
            self.state.reset()
            self.applier.forget_results()
        if self._checkpoints is not None and (
                self.state.applied_offset + 1 < log_.log_start_offset
                or (self.state.applied_offset < 0 and not self._restore_tried)):
            await self._restore(log_)
        next_offset = max(self.state.applied_offset + 1, log_.log_start_offset)
        high_watermark = partition.high_watermark
        if next_offset >= high_watermark:
            return False
        read = await log_.read(next_offset, 1 << 20, max_offset=high_watermark)
        # A record at a time, the event loop's turn between them (Applier.apply_in_turns):
        # a commit of 2,352 batches took 70-125 ms to apply in a cluster under load (41 ms
        # alone since its rows are written a table at a time), and a read brings several;
        # in one go they held every broker for all of them.
        await self.applier.apply_in_turns(
            [(offset, record) for offset, record in chunk if offset < high_watermark]
            for chunk in json_record_chunks(read.records, 1))
        # The log below the oldest checkpoint kept is not needed any more, here as on
        # every replica (each applies the CheckpointTaken record that says so).
        trim_to = min(self._applied.log_start, self.state.applied_offset + 1)
        if trim_to > log_.log_start_offset:
            await log_.delete_records_before(trim_to)
            log.info("%s now starts at %d (checkpointed below)", DISKLESS_METADATA_TOPIC,
                     log_.log_start_offset)
        return True

    # --- checkpoints ----------------------------------------------------------------------

    async def _restore(self, log_: PartitionLog) -> None:
        """Replace the state with the newest readable checkpoint that the log continues (at
        or past its start less one) and is ahead of the state. Raises StateBehindLog when
        the state needs one (it ends below the log start) and none could be restored."""
        self._restore_tried = True
        applied, log_start = self.state.applied_offset, log_.log_start_offset
        started = time.monotonic()
        try:
            offsets = [o for o in await self._checkpoints.offsets()
                       if o > applied and o + 1 >= log_start]
        except ObjectStoreError as e:
            offsets = []
            log.warning("cannot list the batch coordinator's checkpoints: %s", e)
        download = self.state.path.with_name(self.state.path.name + ".restore")
        for offset in reversed(offsets):
            try:
                data = await self._checkpoints.get(offset)
                found = await asyncio.to_thread(write_checkpoint, data, download)
            except (ObjectStoreError, ValueError) as e:
                log.warning("checkpoint %d of the batch coordinator is unusable: %s", offset, e)
                continue
            if found != offset:
                log.warning("checkpoint %d holds the state at %d: skipped", offset, found)
                download.unlink(missing_ok=True)
                continue
            self.state.replace_with(download)
            self.checkpoint_restored = CheckpointTimes(offset, len(data),
                                                       time.monotonic() - started)
            log.info("restored the batch coordinator's state from checkpoint %d (%d bytes, "
                     "%.2f s); applying %s from %d", offset, len(data),
                     self.checkpoint_restored.seconds, DISKLESS_METADATA_TOPIC, offset + 1)
            return
        if applied + 1 < log_start:
            raise StateBehindLog(
                f"the batch coordinator's state ends at {applied}, below the start of "
                f"{DISKLESS_METADATA_TOPIC} ({log_start}), and no checkpoint was restored")

    async def _checkpoint_loop(self) -> None:
        last_taken = time.monotonic()
        while True:
            await asyncio.sleep(CHECKPOINT_POLL_S)
            # The record of a checkpoint alone does not make the next one due.
            since = self.state.records_since_checkpoint()
            due = since >= self.checkpoint_settings.interval_records or (
                since > 1 and time.monotonic() - last_taken
                >= self.checkpoint_settings.interval_ms / 1000)
            if not due or not self.is_writable:
                continue
            try:
                await self.take_checkpoint()
            except (NotCoordinator, RecordRejected, ObjectStoreError, TimeoutError, OSError,
                    sqlite3.Error) as e:
                log.warning("checkpoint of the batch coordinator's state failed: %r", e)
            last_taken = time.monotonic()

    async def take_checkpoint(self) -> int:
        """As the writable coordinator: copy the state, upload the copy and record it in the
        log; the offset it reflects. Raises NotCoordinator, ObjectStoreError, OSError."""
        started = time.monotonic()
        copy = self.state.path.with_name(self.state.path.name + ".checkpoint")
        try:
            offset = await asyncio.to_thread(copy_state, self.state.path, copy)
            data = await asyncio.to_thread(copy.read_bytes)
        finally:
            copy.unlink(missing_ok=True)
        key = await self._checkpoints.put(offset, data)
        result: CheckpointTakenResult = await self.append(
            CheckpointTaken(offset, key, CHECKPOINTS_KEPT), COMMIT_TIMEOUT_S)
        if result.log_start > 0:
            await self._checkpoints.delete_below(result.log_start - 1)
        self.checkpoints_taken += 1
        self.checkpoint_taken = CheckpointTimes(offset, len(data), time.monotonic() - started)
        log.info("checkpointed the batch coordinator's state at %d (%d bytes, %.2f s)", offset,
                 len(data), self.checkpoint_taken.seconds)
        return offset

    def metrics(self) -> dict:
        partition = self._metadata_log()
        latencies = sorted(self.commit_latencies_ms)
        return {
            **dataclasses.asdict(self.state.stats()),
            "db_bytes": self.state.database_bytes(),
            "applied_offset": self.state.applied_offset,
            "is_coordinator": self.is_writable,
            "metadata_log_bytes": partition.log.size_bytes if partition else 0,
            "metadata_log_start_offset": partition.log.log_start_offset if partition else 0,
            "latest_checkpoint_offset": self.state.latest_checkpoint(),
            "checkpoints_taken": self.checkpoints_taken,
            "checkpoint_offset": self.checkpoint_taken.offset,
            "checkpoint_bytes": self.checkpoint_taken.size_bytes,
            "checkpoint_seconds": self.checkpoint_taken.seconds,
            "restored_checkpoint_offset": self.checkpoint_restored.offset,
            "restore_seconds": self.checkpoint_restored.seconds,
            "appends": self.appends,
            "commit_requests": self.commit_requests,
            "commit_latency_p50_ms": _percentile(latencies, 0.5),
            "commit_latency_p99_ms": _percentile(latencies, 0.99),
            "committed_offset_questions": self._committed_offsets.asked,
            "catch_up_failures": self.catch_up_failures,
        }


class _CommittedOffsetQuestions:
    """Questions to the writable coordinator for its committed offset, one in flight at a
    time. A caller may use an answer only if the question was sent after it arrived, so
    callers that arrived before the question in flight share it, later ones share the next,
    and an answered question serves every caller that arrived before it was sent."""

    def __init__(self, ask: Callable[[], Awaitable[int]]) -> None:
        self._ask = ask
        self._answered_at = -math.inf  # when the latest answered question was sent
        self._answer = 0
        self._in_flight: tuple[float, asyncio.Future[int]] | None = None
        self.asked = 0

    async def asked_after(self, since: float) -> int:
        """The committed offset, as a question sent at or after ``since`` was answered.
        Raises what asking raised."""
        while True:
            if self._answered_at >= since:
                return self._answer
            if self._in_flight is None:
                self._send()
            sent_at, answer = self._in_flight
            if sent_at >= since:
                return await asyncio.shield(answer)
            await asyncio.wait([answer])  # sent before we arrived: its answer may be too old

    def _send(self) -> None:
        sent_at = time.monotonic()
        answer = asyncio.ensure_future(self._ask())
        self._in_flight = (sent_at, answer)
        self.asked += 1

        def answered(done: asyncio.Future[int]) -> None:
            self._in_flight = None
            if not done.cancelled() and done.exception() is None and sent_at > self._answered_at:
                self._answered_at, self._answer = sent_at, done.result()
        answer.add_done_callback(answered)


class _AppliedState:
    """The SQLite state as the StateMachine (coordinator.state_machine) of the log's
    records; tells ``on_change`` which diskless logs each record changed."""

    def __init__(self, state: BatchCoordinatorState,
                 on_change: list[Callable[[set[tuple[str, int]]], None]]) -> None:
        self.state = state
        self.on_change = on_change
        # Where the log may start, as the latest CheckpointTaken record applied said.
        self.log_start = 0

    @property
    def next_offset(self) -> int:
        return self.state.applied_offset + 1

    def apply(self, offset: int, record: dict) -> Any:
        try:
            request = decode_request(record)
            result = self.state.apply(offset, request)
        except (KeyError, TypeError, ValueError) as e:
            # A malformed record fails identically on every broker: skip it rather than
            # stall the coordinator behind it.
            log.error("skipping %s record at offset %d: %r", DISKLESS_METADATA_TOPIC, offset, e)
            self.state.skip(offset)
            return RecordRejected(repr(e))
        if isinstance(result, CheckpointTakenResult):
            self.log_start = max(self.log_start, result.log_start)
        changed = _changed_logs(request)
        if changed:
            for listener in self.on_change:
                listener(changed)
        return result


def _outcome(result: Any) -> Any:
    if isinstance(result, RecordRejected):
        raise result
    return result


def _changed_logs(request: Request) -> set[tuple[str, int]]:
    if isinstance(request, CommitFile):
        return {(b.topic_id, b.partition) for b in request.batches}
    if isinstance(request, DeleteRecords):
        return {(request.topic_id, request.partition)}
    return set()


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0
