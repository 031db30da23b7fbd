"""One transactional id's transitions (coordinator.transaction.state), without I/O."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from coordinator.transaction import state
from coordinator.transaction.state import (
    MAX_EPOCH,
    EpochFence,
    ProducerIdAndEpoch,
    TransactionMetadata,
    TransactionState,
)

NOW = 1_000
ids = itertools.count(500).__next__


def idle(epoch: int = 0, producer_id: int = 7) -> TransactionMetadata:
    snapshot = state.new_transaction(producer_id, 60_000, NOW)
    return TransactionMetadata("t", snapshot.to(TransactionState.EMPTY, NOW,
                                                producer_epoch=epoch))


def applied(metadata: TransactionMetadata, decision) -> TransactionMetadata:
    assert not isinstance(decision, ErrorCode), decision
    metadata.begin(decision.abort if isinstance(decision, EpochFence) else decision)
    metadata.complete()
    return metadata


def test_a_new_id_starts_at_epoch_0_and_each_init_bumps_it() -> None:
    metadata = TransactionMetadata("t", state.new_transaction(7, 60_000, NOW))
    first = state.init_producer_id(metadata, None, 60_000, NOW, ids)
    assert (first.producer_id, first.producer_epoch) == (7, 0)
    second = state.init_producer_id(applied(metadata, first), None, 60_000, NOW, ids)
    assert (second.producer_id, second.producer_epoch) == (7, 1)


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    metadata = idle(epoch=MAX_EPOCH - 1)
    rotated = state.init_producer_id(metadata, None, 60_000, NOW, lambda: 99)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.last_producer_id) == (99, 0, 7)


def test_kip_360_epochs() -> None:
    metadata = idle(epoch=3)
    bumped = state.init_producer_id(metadata, ProducerIdAndEpoch(7, 3), 60_000, NOW, ids)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (4, 3)
    applied(metadata, bumped)
    # The answer was lost and the producer asks again with its old epoch: the same epoch.
    retried = state.init_producer_id(metadata, ProducerIdAndEpoch(7, 3), 60_000, NOW, ids)
    assert retried.producer_epoch == 4
    assert state.init_producer_id(metadata, ProducerIdAndEpoch(7, 1), 60_000, NOW, ids) \
        == ErrorCode.producer_fenced
    assert state.init_producer_id(metadata, ProducerIdAndEpoch(8, 4), 60_000, NOW, ids) \
        == ErrorCode.producer_fenced


def test_an_open_transaction_is_fenced_with_a_bumped_epoch() -> None:
    metadata = applied(idle(epoch=2), state.add_partitions(idle(epoch=2), 7, 2, [("t", 0)], NOW))
    decision = state.init_producer_id(metadata, None, 60_000, NOW, ids)
    assert isinstance(decision, EpochFence)
    assert (decision.abort.state, decision.abort.producer_epoch) == (
        TransactionState.PREPARE_ABORT, 3)
    assert decision.abort.partitions == {("t", 0)}


def test_add_partitions_checks_the_producer_and_the_state() -> None:
    metadata = idle(epoch=1)
    assert state.add_partitions(metadata, 8, 1, [("t", 0)], NOW) \
        == ErrorCode.invalid_producer_id_mapping
    assert state.add_partitions(metadata, 7, 0, [("t", 0)], NOW) == ErrorCode.producer_fenced
    ongoing = state.add_partitions(metadata, 7, 1, [("t", 0)], NOW)
    assert (ongoing.state, ongoing.start_timestamp_ms) == (TransactionState.ONGOING, NOW)
    applied(metadata, ongoing)
    assert state.add_partitions(metadata, 7, 1, [("t", 0)], NOW + 5) == ErrorCode.none
    more = state.add_partitions(metadata, 7, 1, [("u", 1)], NOW + 5)
    assert (more.partitions, more.start_timestamp_ms) == ({("t", 0), ("u", 1)}, NOW)
    metadata.begin(more)
    assert state.add_partitions(metadata, 7, 1, [("v", 0)], NOW) \
        == ErrorCode.concurrent_transactions


def test_end_transaction_transitions() -> None:
    metadata = idle(epoch=1)
    assert state.end_transaction(metadata, 7, 1, True, NOW) == ErrorCode.invalid_txn_state
    applied(metadata, state.add_partitions(metadata, 7, 1, [("t", 0)], NOW))
    assert state.end_transaction(metadata, 7, 0, True, NOW) == ErrorCode.producer_fenced
    prepared = applied(metadata, state.end_transaction(metadata, 7, 1, True, NOW)).current
    assert prepared.state == TransactionState.PREPARE_COMMIT
    assert state.end_transaction(metadata, 7, 1, True, NOW) == ErrorCode.concurrent_transactions
    assert state.end_transaction(metadata, 7, 1, False, NOW) == ErrorCode.invalid_txn_state
    assert state.add_partitions(metadata, 7, 1, [("t", 0)], NOW) \
        == ErrorCode.concurrent_transactions
    done = applied(metadata, state.complete_transaction(prepared, NOW)).current
    assert (done.state, done.partitions) == (TransactionState.COMPLETE_COMMIT, frozenset())
    assert state.end_transaction(metadata, 7, 1, True, NOW) == ErrorCode.none
    assert state.end_transaction(metadata, 7, 1, False, NOW) == ErrorCode.invalid_txn_state


def test_timeouts_and_expiry() -> None:
    metadata = idle(epoch=1)
    applied(metadata, state.add_partitions(metadata, 7, 1, [("t", 0)], NOW))
    assert not state.timed_out(metadata, NOW + 60_000)
    assert state.timed_out(metadata, NOW + 60_001)
    assert not state.expired(metadata, NOW + 10**9, 1000)  # open transactions never expire
    assert state.expired(idle(), NOW + 1000, 1000)


def test_state_names_are_kafkas() -> None:
    assert TransactionState.PREPARE_EPOCH_FENCE.display_name == "PrepareEpochFence"
    assert TransactionState.from_display_name("CompleteCommit") \
        == TransactionState.COMPLETE_COMMIT
    assert TransactionState.from_display_name("Bogus") is None


# -- transaction protocol version 2 (KIP-890: EndTxn v5) ---------------------------------------

def ongoing(epoch: int = 0, partitions=(("t", 0),)) -> TransactionMetadata:
    metadata = idle(epoch)
    return applied(metadata, state.add_partitions(metadata, 7, epoch, partitions, NOW))


def end_v2(metadata: TransactionMetadata, epoch: int, commit: bool, producer_id: int = 7,
           allocate=ids):
    return state.end_transaction_v2(metadata, producer_id, epoch, commit, NOW, allocate)


def completed(metadata: TransactionMetadata, decision) -> TransactionMetadata:
    applied(metadata, decision)
    return applied(metadata, state.complete_transaction(metadata.current, NOW))


def test_v2_every_end_bumps_the_epoch_and_a_retry_after_it_succeeds() -> None:
    metadata = ongoing(epoch=3)
    prepared = end_v2(metadata, 3, True)
    assert (prepared.state, prepared.producer_epoch, prepared.last_producer_epoch) == (
        TransactionState.PREPARE_COMMIT, 4, 3)
    assert state.client_producer(prepared) == ProducerIdAndEpoch(7, 4)
    applied(metadata, prepared)
    # A retry with the epoch before the bump while the markers are written: retry later.
    assert end_v2(metadata, 3, True) == ErrorCode.concurrent_transactions
    assert end_v2(metadata, 3, False) == ErrorCode.invalid_txn_state
    assert end_v2(metadata, 4, True) == ErrorCode.producer_fenced
    applied(metadata, state.complete_transaction(metadata.current, NOW))
    assert metadata.current.producer_epoch == 4
    # Once complete the retry succeeds (answered with the current epoch); the other outcome
    # is refused; an epoch older than the retry's is fenced.
    assert end_v2(metadata, 3, True) == ErrorCode.none
    assert end_v2(metadata, 3, False) == ErrorCode.invalid_txn_state
    assert end_v2(metadata, 2, True) == ErrorCode.producer_fenced
    # The next transaction runs at the bumped epoch and bumps it again.
    applied(metadata, state.add_partitions(metadata, 7, 4, [("t", 1)], NOW))
    assert end_v2(metadata, 4, False).producer_epoch == 5


def test_v2_abort_without_partitions_bumps_the_epoch_and_commit_is_invalid() -> None:
    metadata = idle(epoch=2)
    assert end_v2(metadata, 2, True) == ErrorCode.invalid_txn_state
    aborted = end_v2(metadata, 2, False)
    assert (aborted.state, aborted.producer_epoch, aborted.partitions) == (
        TransactionState.PREPARE_ABORT, 3, frozenset())
    completed(metadata, aborted)
    # From CompleteAbort at the current epoch, another abort is a new (empty) one.
    assert end_v2(metadata, 3, False).producer_epoch == 4
    assert end_v2(metadata, 2, False) == ErrorCode.none  # the retry of the first
    assert end_v2(metadata, 3, True) == ErrorCode.invalid_txn_state


def test_v2_an_exhausted_epoch_continues_with_a_new_producer_id() -> None:
    metadata = ongoing(epoch=MAX_EPOCH - 1)
    prepared = end_v2(metadata, MAX_EPOCH - 1, True, allocate=lambda: 99)
    # The markers carry the last epoch of the old id; the client continues with the new one.
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (
        7, MAX_EPOCH, 99)
    assert state.client_producer(prepared) == ProducerIdAndEpoch(99, 0)
    completed(metadata, prepared)
    current = metadata.current
    assert (current.producer_id, current.producer_epoch, current.last_producer_id,
            current.next_producer_id) == (99, 0, 7, state.NO_PRODUCER_ID)
    # A retry with the old id and its last epoch succeeds; the new id's epoch 0 is current.
    assert end_v2(metadata, MAX_EPOCH - 1, True, producer_id=7) == ErrorCode.none
    assert end_v2(metadata, 5, True, producer_id=7) == ErrorCode.invalid_producer_id_mapping
    applied(metadata, state.add_partitions(metadata, 99, 0, [("t", 0)], NOW))
    assert end_v2(metadata, 0, True, producer_id=99).producer_epoch == 1


def test_v1_end_keeps_the_epoch() -> None:
    metadata = ongoing(epoch=3)
    prepared = state.end_transaction(metadata, 7, 3, True, NOW)
    assert (prepared.producer_epoch, prepared.next_producer_id) == (3, state.NO_PRODUCER_ID)


def test_verify_partitions() -> None:
    metadata = ongoing(epoch=1)
    assert state.verify_partitions(metadata, 7, 1, [("t", 0), ("t", 1)]) == {
        ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.transaction_abortable}
    assert state.verify_partitions(metadata, 7, 0, [("t", 0)]) == ErrorCode.producer_fenced
    assert state.verify_partitions(metadata, 8, 1, [("t", 0)]) \
        == ErrorCode.invalid_producer_id_mapping
