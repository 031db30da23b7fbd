"""storage.producer_state: Kafka's idempotent-producer rules, without any I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader, InvalidRecordBatch
from storage.producer_state import (
    MAX_SEQUENCE,
    CorruptSnapshot,
    InvalidProducerEpoch,
    InvalidSequence,
    OutOfOrderSequence,
    ProducerState,
)

PID = 1000


def batch(seq: int, count: int = 1, *, epoch: int = 0, pid: int = PID,
          timestamp: int = 5_000) -> BatchHeader:
    return BatchHeader(position=0, size=61, base_offset=0, partition_leader_epoch=0, crc=0,
                       attributes=0, last_offset_delta=count - 1, base_timestamp=timestamp,
                       max_timestamp=timestamp, producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, record_count=count)


class Log:
    """A log end offset plus producer state, appending the way an engine would."""

    def __init__(self, state: ProducerState | None = None, end: int = 0) -> None:
        self.state = state or ProducerState()
        self.end = end

    def append(self, *batches: BatchHeader) -> tuple[int, int]:
        plan = self.state.check_append(batches, self.end)
        if plan.duplicate is not None:
            return plan.duplicate.first_offset, plan.duplicate.last_offset
        first = self.end
        self.end += sum(b.last_offset_delta + 1 for b in batches)
        self.state.apply(plan)
        return first, self.end - 1


def test_batches_without_producer_id_are_not_tracked():
    log = Log()
    assert log.append(batch(-1, 3, pid=-1, epoch=-1)) == (0, 2)
    assert log.state.producers == {}


def test_in_sequence_batches_are_appended():
    log = Log()
    assert log.append(batch(0, 3)) == (0, 2)
    assert log.append(batch(3, 2)) == (3, 4)
    entry = log.state.producers[PID]
    assert (entry.epoch, entry.last_sequence, entry.last_offset) == (0, 4, 4)


def test_unknown_producer_may_start_at_any_sequence():
    log = Log(end=10)
    assert log.append(batch(42, 2)) == (10, 11)
    assert log.append(batch(44)) == (12, 12)


@pytest.mark.parametrize("seq", [5, 4, 2, 1, 0])
def test_gap_or_overlap_is_out_of_order(seq):
    log = Log()
    log.append(batch(0, 3))  # sequences 0..2: only 3 may follow
    with pytest.raises(OutOfOrderSequence) as raised:
        log.append(batch(seq, 2))
    assert raised.value.error_code == ErrorCode.out_of_order_sequence_number


def test_retry_of_any_of_the_last_five_batches_returns_its_original_offsets():
    log = Log()
    ranges = [log.append(batch(seq, 2)) for seq in range(0, 12, 2)]  # six batches
    end = log.end
    for seq, original in zip(range(2, 12, 2), ranges[1:]):
        assert log.append(batch(seq, 2)) == original
    assert log.end == end  # nothing written for the retries
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(0, 2))  # the sixth-last batch is no longer retained


def test_retry_must_match_the_exact_sequence_range():
    log = Log()
    log.append(batch(0, 3))
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(0, 2))


def test_stale_epoch_is_fenced():
    log = Log()
    log.append(batch(0, epoch=3))
    with pytest.raises(InvalidProducerEpoch) as raised:
        log.append(batch(1, epoch=2))
    assert raised.value.error_code == ErrorCode.invalid_producer_epoch


def test_new_epoch_starts_at_sequence_zero():
    log = Log()
    log.append(batch(0, 5, epoch=0))
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(5, epoch=1))
    assert log.append(batch(0, epoch=1)) == (5, 5)
    entry = log.state.producers[PID]
    assert entry.epoch == 1 and len(entry.batches) == 1
    # The old epoch's batches are gone: a late retry of one of them is now fenced.
    with pytest.raises(InvalidProducerEpoch):
        log.append(batch(0, 5, epoch=0))


def test_retry_in_an_older_epoch_is_not_a_duplicate():
    log = Log()
    log.append(batch(0, epoch=1))
    with pytest.raises(InvalidProducerEpoch):
        log.append(batch(0, epoch=0))


def test_sequence_wraps_after_int32_max():
    log = Log()
    log.append(batch(MAX_SEQUENCE - 1, 2))
    assert log.state.producers[PID].last_sequence == MAX_SEQUENCE
    assert log.append(batch(0)) == (2, 2)


def test_batch_spanning_the_wrap_is_detected_as_duplicate():
    log = Log()
    log.append(batch(MAX_SEQUENCE - 1, 3))
    assert log.state.producers[PID].last_sequence == 0
    assert log.append(batch(MAX_SEQUENCE - 1, 3)) == (0, 2)
    assert log.append(batch(1)) == (3, 3)


def test_several_batches_of_one_producer_in_one_request_must_chain():
    log = Log()
    log.append(batch(0))
    assert log.append(batch(1, 2), batch(3, 2)) == (1, 4)
    assert [b.first_offset for b in log.state.producers[PID].batches] == [0, 1, 3]
    with pytest.raises(OutOfOrderSequence):
        log.append(batch(5), batch(7))


def test_a_duplicate_anywhere_in_a_request_answers_for_the_whole_request():
    log = Log()
    log.append(batch(0, 2))
    end = log.end
    assert log.append(batch(2), batch(0, 2)) == (0, 1)
    assert log.end == end


def test_producers_are_independent():
    log = Log()
    log.append(batch(0, pid=1))
    log.append(batch(7, pid=2))
    assert log.append(batch(1, pid=1)) == (2, 2)
    assert log.append(batch(8, pid=2)) == (3, 3)


def test_check_append_changes_nothing_until_apply():
    state = ProducerState()
    plan = state.check_append([batch(0)], 0)
    assert state.producers == {}
    state.apply(plan)
    assert state.producers[PID].last_sequence == 0


def test_producer_id_without_sequence_is_an_invalid_record():
    with pytest.raises(InvalidSequence) as raised:
        ProducerState().check_append([batch(-1)], 0)
    assert isinstance(raised.value, InvalidRecordBatch)


def test_log_append_time_is_remembered_for_duplicates():
    state = ProducerState()
    state.apply(state.check_append([batch(0, timestamp=1)], 0, log_append_time_ms=99))
    assert state.check_append([batch(0, timestamp=1)], 1).duplicate.timestamp == 99


def test_snapshot_round_trip_keeps_duplicates_and_sequences():
    log = Log()
    for seq in range(0, 14, 2):
        log.append(batch(seq, 2, epoch=4))
    log.append(batch(3, pid=77, epoch=0))
    restored = Log(ProducerState.restore(log.state.snapshot()), log.end)
    assert restored.state.producers == log.state.producers
    assert restored.append(batch(12, 2, epoch=4)) == (12, 13)
    assert restored.append(batch(14, epoch=4)) == (15, 15)
    with pytest.raises(OutOfOrderSequence):
        restored.append(batch(9, pid=77))


def test_empty_snapshot_round_trip():
    assert ProducerState.restore(ProducerState().snapshot()).producers == {}


@pytest.mark.parametrize("damage", ["flip", "truncate", "version", "extra"])
def test_damaged_snapshot_is_rejected(damage):
    state = ProducerState()
    state.apply(state.check_append([batch(0)], 0))
    data = bytearray(state.snapshot())
    if damage == "flip":
        data[-1] ^= 0xFF
    elif damage == "truncate":
        data = data[:-3]
    elif damage == "version":
        data[1] = 9
    else:
        data += b"\0"
    with pytest.raises(CorruptSnapshot):
        ProducerState.restore(bytes(data))


def test_load_batch_rebuilds_state_without_checks():
    state = ProducerState()
    state.load_batch(batch(0, 2, epoch=2), base_offset=10)
    state.load_batch(batch(9, epoch=1), base_offset=12)  # replicated: not validated
    entry = state.producers[PID]
    assert (entry.epoch, entry.last_sequence, entry.last_offset) == (1, 9, 12)
    state.load_batch(batch(-1, pid=-1, epoch=-1), base_offset=13)
    assert list(state.producers) == [PID]


def test_idle_producers_expire_and_may_then_restart_anywhere():
    log = Log()
    log.append(batch(0, pid=1, timestamp=1_000))
    log.append(batch(0, pid=2, timestamp=9_000))
    log.state.remove_expired(now_ms=11_000, expiration_ms=10_000)
    assert list(log.state.producers) == [2]
    assert log.append(batch(500, pid=1)) == (2, 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 6)), min_size=1, max_size=40))
def test_retries_never_duplicate_or_lose_records(steps):
    """A producer sends batches and re-sends any of its last five at random: every batch
    lands exactly once, and every retry gets its batch's original offsets."""
    log = Log()
    sent: list[tuple[BatchHeader, tuple[int, int]]] = []
    next_seq = 0
    for count, retry_back in steps:
        if 0 < retry_back <= min(len(sent), 5):
            header, original = sent[-retry_back]
            assert log.append(header) == original
            continue
        header = batch(next_seq, count)
        sent.append((header, log.append(header)))
        next_seq += count
    assert log.end == next_seq
    assert [r for _, r in sent] == sorted(r for _, r in sent)
