"""One transactional id's transaction and its transitions (Kafka's TransactionMetadata and
the checks of its TransactionCoordinator), without I/O.

A transition is computed from the current ``TransactionSnapshot`` as the next snapshot; the
service writes it to ``__transaction_state`` and only then makes it current. While that
write is in flight the snapshot is ``pending`` and the id takes no other transition
(CONCURRENT_TRANSACTIONS), as Kafka's pendingState. Every decision returns either the next
snapshot or the error code the client gets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's Short.MaxValue: an epoch at MAX_EPOCH - 1 cannot be bumped for a client any more
# (the last value is kept for fencing), so the id gets a new producer id instead.
MAX_EPOCH = 32767
TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """Kafka's TransactionState, with its status codes in the log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return self.name.title().replace("_", "")

    @classmethod
    def from_display_name(cls, name: str) -> TransactionState | None:
        return next((state for state in cls if state.display_name == name), None)


PREPARED = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)
COMPLETED = (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)
# States in which no transaction is open: a new one may start, the id may expire.
IDLE = (TransactionState.EMPTY, *COMPLETED)


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TransactionSnapshot:
    producer_id: int
    producer_epoch: int
    # The id and epoch handed out before the last bump, so a retried InitProducerId whose
    # answer was lost is recognised (KIP-360); kept in memory only, as in Kafka.
    last_producer_id: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_timestamp_ms: int
    last_update_timestamp_ms: int

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def to(self, state: TransactionState, now_ms: int, **changes) -> TransactionSnapshot:
        return dataclasses.replace(self, state=state, last_update_timestamp_ms=now_ms,
                                   **changes)


def new_transaction(producer_id: int, timeout_ms: int, now_ms: int) -> TransactionSnapshot:
    """A transactional id seen for the first time: its epoch is bumped to 0 by its
    InitProducerId."""
    return TransactionSnapshot(producer_id, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                               NO_PRODUCER_EPOCH, timeout_ms, TransactionState.EMPTY,
                               frozenset(), -1, now_ms)


class TransactionMetadata:
    """A transactional id's committed snapshot and the one being written, if any."""

    def __init__(self, transactional_id: str, current: TransactionSnapshot) -> None:
        self.transactional_id = transactional_id
        self.current = current
        self.pending: TransactionSnapshot | None = None

    def begin(self, target: TransactionSnapshot) -> TransactionSnapshot:
        assert self.pending is None, f"{self.transactional_id}: a transition is in flight"
        self.pending = target
        return target

    def complete(self) -> None:
        self.current, self.pending = self.pending, None

    def abandon(self) -> None:
        self.pending = None


@dataclass(frozen=True, slots=True)
class EpochFence:
    """InitProducerId found a transaction open: it is aborted with the epoch bumped (so the
    old producer is fenced) and the client retries on CONCURRENT_TRANSACTIONS."""
    abort: TransactionSnapshot


Decision = TransactionSnapshot | ErrorCode


def init_producer_id(metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None,
                     timeout_ms: int, now_ms: int, allocate_producer_id: Callable[[], int]
                     ) -> Decision | EpochFence:
    current = metadata.current
    if metadata.pending is not None:
        return ErrorCode.concurrent_transactions
    if expected is not None and not _known_producer(current, expected):
        return ErrorCode.producer_fenced
    if current.state in PREPARED:
        return ErrorCode.concurrent_transactions
    if current.state == TransactionState.ONGOING:
        return EpochFence(fence_epoch(current, now_ms))
    if current.state not in IDLE:
        return ErrorCode.concurrent_transactions  # Dead, PrepareEpochFence: never current
    if current.epoch_exhausted and (expected is None
                                    or expected.producer_epoch == current.producer_epoch):
        return current.to(TransactionState.EMPTY, now_ms,
                          producer_id=allocate_producer_id(), producer_epoch=0,
                          last_producer_id=current.producer_id,
                          last_producer_epoch=(current.producer_epoch if expected is not None
                                               else NO_PRODUCER_EPOCH),
                          timeout_ms=timeout_ms, partitions=frozenset(),
                          start_timestamp_ms=-1)
    bumped = current.producer_epoch + 1
    if expected is None or current.producer_epoch == NO_PRODUCER_EPOCH \
            or expected.producer_epoch == current.producer_epoch:
        epoch, last_epoch = bumped, (current.producer_epoch if expected is not None
                                     else NO_PRODUCER_EPOCH)
    elif expected.producer_epoch == current.last_producer_epoch:
        # A retry of a bump whose answer was lost: answer the same epoch again.
        epoch, last_epoch = current.producer_epoch, current.last_producer_epoch
    else:
        return ErrorCode.producer_fenced
    return current.to(TransactionState.EMPTY, now_ms, producer_epoch=epoch,
                      last_producer_epoch=last_epoch, timeout_ms=timeout_ms,
                      partitions=frozenset(), start_timestamp_ms=-1)


def _known_producer(current: TransactionSnapshot, expected: ProducerIdAndEpoch) -> bool:
    """Kafka's isValidProducerId: a fresh id, the current producer id (its epoch is checked
    when bumped), or the previous one retrying after the rotation its epoch exhaustion
    caused."""
    return (current.producer_epoch == NO_PRODUCER_EPOCH
            or expected.producer_id == current.producer_id
            or (expected.producer_id == current.last_producer_id
                and expected.producer_epoch >= MAX_EPOCH - 1))


def fence_epoch(current: TransactionSnapshot, now_ms: int) -> TransactionSnapshot:
    """Abort the open transaction with the epoch bumped, so the producer that opened it is
    fenced (Kafka's prepareFenceProducerEpoch followed by the abort): for InitProducerId of
    a new instance and for a transaction past its timeout."""
    epoch = current.producer_epoch if current.producer_epoch >= MAX_EPOCH \
        else current.producer_epoch + 1
    return current.to(TransactionState.PREPARE_ABORT, now_ms, producer_epoch=epoch,
                      last_producer_epoch=NO_PRODUCER_EPOCH)


def _check_producer(current: TransactionSnapshot, pending: TransactionSnapshot | None,
                    producer_id: int, producer_epoch: int) -> ErrorCode | None:
    if current.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if current.producer_epoch != producer_epoch:
        return ErrorCode.producer_fenced
    if pending is not None:
        return ErrorCode.concurrent_transactions
    return None


def add_partitions(metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
                   partitions: Collection[TopicPartition], now_ms: int) -> Decision:
    """AddPartitionsToTxn and AddOffsetsToTxn; ErrorCode.none when every partition is
    already in the open transaction (nothing to write)."""
    current = metadata.current
    error = _check_producer(current, metadata.pending, producer_id, producer_epoch)
    if error is not None:
        return error
    if current.state in PREPARED:
        return ErrorCode.concurrent_transactions
    if current.state == TransactionState.ONGOING and current.partitions.issuperset(partitions):
        return ErrorCode.none
    if current.state not in (TransactionState.ONGOING, *IDLE):
        return ErrorCode.concurrent_transactions
    start = current.start_timestamp_ms if current.state == TransactionState.ONGOING else now_ms
    return current.to(TransactionState.ONGOING, now_ms,
                      partitions=current.partitions | frozenset(partitions),
                      start_timestamp_ms=start)


def end_transaction(metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
                    commit: bool, now_ms: int) -> Decision:
    """EndTxn from the client; ErrorCode.none for a retry of an EndTxn already done."""
    current = metadata.current
    error = _check_producer(current, metadata.pending, producer_id, producer_epoch)
    if error is not None:
        return error
    prepare, complete = ((TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
                         if commit else
                         (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT))
    if current.state == TransactionState.ONGOING:
        return current.to(prepare, now_ms)
    if current.state == complete:
        return ErrorCode.none
    if current.state == prepare:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state  # Empty, or the other outcome prepared or completed


def complete_transaction(prepared: TransactionSnapshot, now_ms: int) -> TransactionSnapshot:
    """Every marker of a prepared transaction is written: it is complete."""
    state = (TransactionState.COMPLETE_COMMIT
             if prepared.state == TransactionState.PREPARE_COMMIT
             else TransactionState.COMPLETE_ABORT)
    return prepared.to(state, now_ms, partitions=frozenset())


def timed_out(metadata: TransactionMetadata, now_ms: int) -> bool:
    current = metadata.current
    return (metadata.pending is None and current.state == TransactionState.ONGOING
            and current.start_timestamp_ms + current.timeout_ms < now_ms)


def expired(metadata: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's check for removing a transactional id idle longer than
    ``transactional.id.expiration.ms``."""
    current = metadata.current
    return (metadata.pending is None and current.state in IDLE
            and current.last_update_timestamp_ms + expiration_ms <= now_ms)
