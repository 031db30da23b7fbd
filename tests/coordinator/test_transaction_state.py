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
