"""storage.producer_state's transactions: open transactions, markers, the last stable offset
and the aborted-transaction index, without any I/O (Kafka's ProducerAppendInfo rules)."""

from __future__ import annotations

import pytest

from protocol.records import TRANSACTIONAL_FLAG, BatchHeader, TxnMarker
from storage.producer_state import (
    AbortedTransaction,
    CoordinatorFenced,
    InvalidProducerEpoch,
    InvalidTxnState,
    ProducerState,
)

PID, OTHER = 1000, 2000


def batch(seq: int, count: int = 1, *, pid: int = PID, epoch: int = 0,
          transactional: bool = True) -> BatchHeader:
    return BatchHeader(position=0, size=61, base_offset=0, partition_leader_epoch=0, crc=0,
                       attributes=TRANSACTIONAL_FLAG if transactional else 0,
                       last_offset_delta=count - 1, base_timestamp=5, max_timestamp=5,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       record_count=count)


class Log:
    """A log end offset plus producer state, appending the way an engine would."""

    def __init__(self) -> None:
        self.state = ProducerState()
        self.end = 0

    def append(self, header: BatchHeader, marker: TxnMarker | None = None) -> int:
        plan = self.state.check_append([header], self.end, marker=marker)
        first = self.end
        self.end += header.last_offset_delta + 1
        self.state.apply(plan)
        return first

    def end_transaction(self, commit: bool, *, pid: int = PID, epoch: int = 0,
                        coordinator_epoch: int = 0) -> int:
        marker = TxnMarker(pid, epoch, commit, coordinator_epoch)
        return self.append(batch(-1, pid=pid, epoch=epoch), marker)


def test_an_open_transaction_holds_the_last_stable_offset_until_its_marker():
    log = Log()
    log.append(batch(0, 3))
    log.append(batch(0, 2, pid=OTHER, transactional=False))
    assert log.state.last_stable_offset(log.end) == 0
    marker = log.end_transaction(commit=True)
    # Decided, but the marker is not below the high watermark yet.
    assert log.state.last_stable_offset(marker) == 0
    assert log.state.last_stable_offset(log.end) == log.end
    assert log.state.aborted == []


def test_an_abort_is_indexed_until_retention_passes_it():
    log = Log()
    log.append(batch(0, 2, pid=OTHER))
    first = log.append(batch(0, 3))
    marker = log.end_transaction(commit=False)
    assert log.state.aborted == [AbortedTransaction(PID, first, marker)]
    # OTHER's transaction is still open: it bounds the LSO, not PID's.
    assert log.state.last_stable_offset(log.end) == 0
    assert log.state.aborted_between(0, 2) == []
    assert log.state.aborted_between(marker, log.end) == [AbortedTransaction(PID, first, marker)]
    log.state.trim(marker)
    assert log.state.aborted != []
    log.state.trim(marker + 1)
    assert log.state.aborted == []


def test_a_plain_batch_inside_a_transaction_is_invalid_txn_state():
    log = Log()
    log.append(batch(0))
    with pytest.raises(InvalidTxnState):
        log.append(batch(1, transactional=False))


def test_a_fencing_marker_bumps_the_epoch_and_restarts_sequences():
    log = Log()
    log.append(batch(0, 2))
    log.end_transaction(commit=False, epoch=1)  # the coordinator fenced epoch 0
    with pytest.raises(InvalidProducerEpoch):
        log.append(batch(2, epoch=0))
    assert log.append(batch(0, epoch=1)) == 3


def test_markers_of_older_epochs_are_refused():
    log = Log()
    log.append(batch(0, epoch=2))
    with pytest.raises(InvalidProducerEpoch):
        log.end_transaction(commit=True, epoch=1)
    log.end_transaction(commit=True, epoch=2, coordinator_epoch=5)
    log.append(batch(1, epoch=2))
    with pytest.raises(CoordinatorFenced):
        log.end_transaction(commit=True, epoch=2, coordinator_epoch=4)


def test_replayed_batches_give_the_same_state_as_appends():
    log = Log()
    log.append(batch(0, 2))
    log.end_transaction(commit=False)
    log.append(batch(2, 1))
    replayed = ProducerState()
    offset = 0
    for header, marker in [(batch(0, 2), None),
                           (batch(-1), TxnMarker(PID, 0, False, 0)),
                           (batch(2, 1), None)]:
        replayed.load_batch(header, offset, marker)
        offset += header.last_offset_delta + 1
    assert replayed.aborted == log.state.aborted
    assert replayed.last_stable_offset(offset) == log.state.last_stable_offset(log.end) == 3


def test_a_snapshot_keeps_open_transactions_and_aborts():
    log = Log()
    log.append(batch(0, 2))
    log.end_transaction(commit=False)
    log.append(batch(2, 1))
    restored = ProducerState.restore(log.state.snapshot())
    assert restored.aborted == log.state.aborted
    assert restored.producers[PID].txn_first_offset == 3
    assert restored.last_stable_offset(log.end) == 3


def test_producers_with_an_open_transaction_do_not_expire():
    log = Log()
    log.append(batch(0))
    log.append(batch(0, pid=OTHER, transactional=False))
    log.state.remove_expired(now_ms=10**12, expiration_ms=1)
    assert list(log.state.producers) == [PID]
