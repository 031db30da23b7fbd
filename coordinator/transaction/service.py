"""The transaction coordinator as the request handlers see it (Kafka's TransactionCoordinator
over its TransactionStateManager), transaction protocol versions 1 and 2 (KIP-890: EndTxn v5
bumps the epoch of every transaction; partition leaders add partitions for the client).

The coordinator of a transactional id is the leader of its partition of
``__transaction_state``. Each change of a transaction is written there (acks=all) before it
takes effect; a transaction is ended in two steps, as in Kafka: PrepareCommit/PrepareAbort is
written and the client answered, then the markers are written to every partition of the
transaction (``markers``) and CompleteCommit/CompleteAbort is written. A coordinator that
takes a partition over finishes the prepared transactions it finds in it. Two periodic tasks
abort transactions open longer than their timeout and forget ids idle longer than
``transactional.id.expiration.ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..coordinator_log import (
    CoordinatorLog,
    CoordinatorLogError,
    LoggedRecord,
    LogRecord,
)
from ..group.timer import AsyncioTimer, Scheduled, Timer, sleep
from ..internal_topic import TRANSACTION_STATE_TOPIC
from ..partition_loader import PartitionLoader, replay_into
from ..transaction_config import TransactionConfig
from . import state
from .markers import TxnMarkers
from .records import (
    MalformedTransactionRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    log_value,
    snapshot_of,
)
from .state import (
    PREPARED,
    EpochFence,
    ProducerIdAndEpoch,
    TopicPartition,
    TransactionMetadata,
    TransactionSnapshot,
    TransactionState,
)

log = logging.getLogger(__name__)


class MarkerWriting(Protocol):
    """What writes a transaction's markers (``markers.MarkerWriter``)."""

    async def write(self, markers: TxnMarkers, still_current: Callable[[], bool]) -> bool: ...


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """EndTxn's answer; under version 2 the producer id and epoch of the client's next
    transaction (-1 otherwise, and with an error)."""
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(slots=True)
class LoadedTransactions:
    """The latest record of each transactional id in a partition, a tombstone deleting: the
    state machine (coordinator.state_machine) loading replays the partition into."""

    partition: int
    values: dict[str, TransactionSnapshot] = field(default_factory=dict)
    next_offset: int = 0

    def apply(self, offset: int, record: LoggedRecord) -> None:
        self.next_offset = offset + 1
        try:
            transactional_id = decode_key(record.key or b"")
            if record.value is None:
                self.values.pop(transactional_id, None)
            else:
                self.values[transactional_id] = snapshot_of(decode_value(record.value))
        except MalformedTransactionRecord as e:
            log.warning("%s-%d offset %d: skipping record: %s", TRANSACTION_STATE_TOPIC,
                        self.partition, offset, e)


@dataclass(slots=True)
class _Partition:
    """A loaded partition: its transactions, and the coordinator epoch they were loaded at
    (the markers carry it, so a later coordinator's fence those of an earlier one)."""
    coordinator_epoch: int
    transactions: dict[str, TransactionMetadata]


def _append_error(error: ErrorCode) -> ErrorCode:
    # Kafka answers a transaction record too large to append with UNKNOWN_SERVER_ERROR; the
    # shared log maps it to the group clients' INVALID_COMMIT_OFFSET_SIZE.
    return ErrorCode.unknown_server_error if error == ErrorCode.invalid_commit_offset_size \
        else error


class TransactionCoordinator:
    def __init__(self, config: TransactionConfig, store: CoordinatorLog, markers: MarkerWriting,
                 allocate_producer_id: Callable[[], int], timer: Timer | None = None) -> None:
        self.config = config
        self.store = store
        self.markers = markers
        self.allocate_producer_id = allocate_producer_id
        self.timer = timer or AsyncioTimer()
        self._active = False
        self._partitions: dict[int, _Partition] = {}
        self._background: set[asyncio.Task] = set()
        self._periodic: list[Scheduled] = []
        self.loader: PartitionLoader[LoadedTransactions] = PartitionLoader(
            TRANSACTION_STATE_TOPIC, store, self._spawn,
            lambda partition: replay_into(store, partition, LoadedTransactions(partition)),
            self._on_loaded, self._on_unloaded)

    # -- lifecycle and partition ownership -------------------------------------------------

    async def start(self) -> None:
        self._active = True
        self.loader.sync()
        self._every(self.config.abort_timed_out_transaction_cleanup_interval_ms,
                    self._abort_timed_out)
        self._every(self.config.remove_expired_transaction_cleanup_interval_ms,
                    self._expire_idle)

    async def stop(self) -> None:
        """Stop at once: a transaction being ended is finished by the next coordinator of its
        partition, which finds it prepared in the log."""
        self._active = False
        for scheduled in self._periodic:
            scheduled.cancel()
        self.loader.unload_all()
        for task in self._background:
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def on_metadata_change(self) -> None:
        """Call after every metadata change has reached the replica manager: leadership of
        __transaction_state partitions may have moved."""
        if self._active:
            self.loader.sync()

    def _on_loaded(self, partition: int, loaded: LoadedTransactions) -> None:
        coordinated = _Partition(self.store.coordinator_epoch(partition), {
            transactional_id: TransactionMetadata(transactional_id, snapshot)
            for transactional_id, snapshot in loaded.values.items()})
        self._partitions[partition] = coordinated
        prepared = [m for m in coordinated.transactions.values() if m.current.state in PREPARED]
        if coordinated.transactions:
            log.info("loaded %d transactional ids of %s-%d (coordinator epoch %d), resuming %d "
                     "prepared transactions", len(coordinated.transactions),
                     TRANSACTION_STATE_TOPIC, partition, coordinated.coordinator_epoch,
                     len(prepared))
        for metadata in prepared:
            self._spawn(self._complete(partition, coordinated, metadata, metadata.current))

    def _on_unloaded(self, partition: int) -> None:
        self._partitions.pop(partition, None)

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _every(self, interval_ms: int, run: Callable[[], None]) -> None:
        def tick() -> None:
            if self._active:
                run()
                self._periodic.append(self.timer.schedule(interval_ms, tick))
        self._periodic.append(self.timer.schedule(interval_ms, tick))

    def _locate(self, transactional_id: str) -> tuple[ErrorCode | None, int, _Partition | None]:
        """The partition of ``transactional_id``, or why this broker cannot serve it now."""
        partition = self.store.partition_for(transactional_id)
        if not self._active:
            return ErrorCode.coordinator_not_available, partition, None
        error = self.loader.serving_error(partition)
        coordinated = self._partitions.get(partition)
        if error is None and coordinated is None:
            error = ErrorCode.coordinator_load_in_progress
        return error, partition, coordinated

    def _known(self, transactional_id: str) -> tuple[
            ErrorCode | None, int, _Partition | None, TransactionMetadata | None]:
        """The transaction of an id that has had its InitProducerId, or the error for a
        request about it."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1, None, None
        error, partition, coordinated = self._locate(transactional_id)
        metadata = coordinated.transactions.get(transactional_id) if error is None else None
        if error is None and metadata is None:
            error = ErrorCode.invalid_producer_id_mapping
        return error, partition, coordinated, metadata

    # -- writes ------------------------------------------------------------------------------

    async def _write(self, partition: int, coordinated: _Partition, metadata: TransactionMetadata,
                     target: TransactionSnapshot) -> ErrorCode:
        metadata.begin(target)
        return await self._write_pending(partition, coordinated, metadata)

    async def _write_pending(self, partition: int, coordinated: _Partition,
                             metadata: TransactionMetadata) -> ErrorCode:
        """Write the transition ``metadata`` has pending; it takes effect once written."""
        target = metadata.pending
        value = None if target.state == TransactionState.DEAD else encode_value(log_value(target))
        try:
            await self.store.append(partition, [
                LogRecord(encode_key(metadata.transactional_id), value)], self.timer.now_ms())
        except CoordinatorLogError as e:
            metadata.abandon()
            log.info("transaction %s: cannot write %s: %s", metadata.transactional_id,
                     target.state.display_name, e)
            return _append_error(e.error_code)
        if (self._partitions.get(partition) is not coordinated
                or coordinated.transactions.get(metadata.transactional_id) is not metadata):
            return ErrorCode.not_coordinator  # the partition moved away while writing
        metadata.complete()
        if target.state == TransactionState.DEAD:
            del coordinated.transactions[metadata.transactional_id]
        return ErrorCode.none

    async def _prepare_end(self, partition: int, coordinated: _Partition,
                           metadata: TransactionMetadata) -> ErrorCode:
        """Write the PrepareCommit/PrepareAbort ``metadata`` has pending, then finish the
        transaction in the background."""
        error = await self._write_pending(partition, coordinated, metadata)
        if error == ErrorCode.none:
            self._spawn(self._complete(partition, coordinated, metadata, metadata.current))
        return error

    async def _complete(self, partition: int, coordinated: _Partition,
                        metadata: TransactionMetadata, prepared: TransactionSnapshot) -> None:
        """Write the markers of a prepared transaction, then CompleteCommit/CompleteAbort."""
        def still_current() -> bool:
            return (self._active and self._partitions.get(partition) is coordinated
                    and metadata.current is prepared)

        markers = TxnMarkers(prepared.producer_id, prepared.producer_epoch,
                             prepared.state == TransactionState.PREPARE_COMMIT,
                             coordinated.coordinator_epoch, prepared.partitions)
        if not await self.markers.write(markers, still_current):
            return
        while still_current():
            error = await self._write(partition, coordinated, metadata,
                                      state.complete_transaction(prepared, self.timer.now_ms()))
            if error in (ErrorCode.none, ErrorCode.not_coordinator):
                return
            await sleep(self.timer, self.config.retry_backoff_ms)

    # -- the client's requests -------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               expected: ProducerIdAndEpoch | None) -> InitProducerIdResult:
        """InitProducerId with a transactional id; ``expected`` is the producer's current id
        and epoch when it has one (v3+, KIP-360). Raises what ``allocate_producer_id`` raises when
        it has no id to give."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        error, partition, coordinated = self._locate(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        now_ms = self.timer.now_ms()
        metadata = coordinated.transactions.get(transactional_id)
        if metadata is None:
            metadata = coordinated.transactions[transactional_id] = TransactionMetadata(
                transactional_id, state.new_transaction(self.allocate_producer_id(),
                                                        transaction_timeout_ms, now_ms))
        decision = state.init_producer_id(metadata, expected, transaction_timeout_ms, now_ms,
                                          self.allocate_producer_id)
        if isinstance(decision, ErrorCode):
            return InitProducerIdResult(decision)
        if isinstance(decision, EpochFence):
            log.info("transaction %s: a new producer instance fences producer %d, aborting its "
                     "open transaction", transactional_id, decision.abort.producer_id)
            metadata.begin(decision.abort)
            error = await self._prepare_end(partition, coordinated, metadata)
            # The client retries, and then gets an epoch bumped once more.
            return InitProducerIdResult(error if error != ErrorCode.none
                                        else ErrorCode.concurrent_transactions)
        error = await self._write(partition, coordinated, metadata, decision)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        return InitProducerIdResult(ErrorCode.none, decision.producer_id, decision.producer_epoch)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Collection[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn, and AddOffsetsToTxn with the group's __consumer_offsets
        partition: one error for all of ``partitions``."""
        error, partition, coordinated, metadata = self._known(transactional_id)
        if error is not None:
            return error
        decision = state.add_partitions(metadata, producer_id, producer_epoch, partitions,
                                        self.timer.now_ms())
        if isinstance(decision, ErrorCode):
            return decision
        return await self._write(partition, coordinated, metadata, decision)

    async def verify_partitions(self, transactional_id: str, producer_id: int,
                                producer_epoch: int, partitions: Collection[TopicPartition]
                                ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with verify_only: which of ``partitions`` are not in the open
        transaction (TRANSACTION_ABORTABLE), or why none can be checked."""
        error, _, _, metadata = self._known(transactional_id)
        if error is None:
            verdict = state.verify_partitions(metadata, producer_id, producer_epoch, partitions)
            if isinstance(verdict, dict):
                return verdict
            error = verdict
        return dict.fromkeys(partitions, error)

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool, *,
                              bump_epoch: bool = False) -> EndTxnResult:
        """EndTxn: answered once the transaction is prepared; its markers follow.
        ``bump_epoch``: the client speaks transaction protocol version 2 (EndTxn v5+)."""
        error, partition, coordinated, metadata = self._known(transactional_id)
        if error is not None:
            return EndTxnResult(error)
        now_ms = self.timer.now_ms()
        if bump_epoch:
            decision = state.end_transaction_v2(metadata, producer_id, producer_epoch, commit,
                                                now_ms, self.allocate_producer_id)
        else:
            decision = state.end_transaction(metadata, producer_id, producer_epoch, commit,
                                             now_ms)
        if decision == ErrorCode.none and bump_epoch:
            current = metadata.current  # a retry of an end already done
            return EndTxnResult(ErrorCode.none, current.producer_id, current.producer_epoch)
        if isinstance(decision, ErrorCode):
            return EndTxnResult(decision)
        metadata.begin(decision)
        error = await self._prepare_end(partition, coordinated, metadata)
        if error != ErrorCode.none or not bump_epoch:
            return EndTxnResult(error)
        client = state.client_producer(decision)
        return EndTxnResult(ErrorCode.none, client.producer_id, client.producer_epoch)

    # -- periodic tasks ----------------------------------------------------------------------

    def _abort_timed_out(self) -> None:
        now_ms = self.timer.now_ms()
        for partition, coordinated in self._partitions.items():
            for metadata in coordinated.transactions.values():
                if state.timed_out(metadata, now_ms):
                    log.info("transaction %s (producer %d) is open longer than its timeout of "
                             "%d ms: aborting it", metadata.transactional_id,
                             metadata.current.producer_id, metadata.current.timeout_ms)
                    metadata.begin(state.fence_epoch(metadata.current, now_ms))
                    self._spawn(self._prepare_end(partition, coordinated, metadata))

    def _expire_idle(self) -> None:
        now_ms = self.timer.now_ms()
        for partition, coordinated in self._partitions.items():
            for metadata in coordinated.transactions.values():
                if state.expired(metadata, now_ms, self.config.transactional_id_expiration_ms):
                    metadata.begin(metadata.current.to(TransactionState.DEAD, now_ms))
                    self._spawn(self._write_pending(partition, coordinated, metadata))

    # -- administration ----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionSnapshot | None]:
        error, _, coordinated = self._locate(transactional_id)
        if error is not None:
            return error, None
        metadata = coordinated.transactions.get(transactional_id)
        if metadata is None:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, metadata.current

    def list_transactions(self, states: Collection[TransactionState],
                          producer_ids: Collection[int], min_duration_ms: int = -1
                          ) -> tuple[ErrorCode, list[tuple[str, TransactionSnapshot]]]:
        """The transactions of every loaded partition; empty filters match everything,
        ``min_duration_ms`` (when >= 0) keeps the transactions open at least that long."""
        if not self._active:
            return ErrorCode.coordinator_not_available, []
        error = (ErrorCode.coordinator_load_in_progress if self.loader.is_loading
                 else ErrorCode.none)
        now_ms = self.timer.now_ms()
        listed = [
            (metadata.transactional_id, metadata.current)
            for coordinated in self._partitions.values()
            for metadata in coordinated.transactions.values()
            if (not states or metadata.current.state in states)
            and (not producer_ids or metadata.current.producer_id in producer_ids)
            and (min_duration_ms < 0 or (metadata.current.state == TransactionState.ONGOING
                                         and now_ms - metadata.current.start_timestamp_ms
                                         >= min_duration_ms))]
        return error, listed
