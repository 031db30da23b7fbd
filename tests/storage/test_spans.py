"""SpanChainLog (storage/spans.py): a partition switched live between storage modes, read
through its chain of spans. The chain knows no engine: two classic logs stand in for
"classic -> another engine -> classic" (the engines' own seal/start_span are tested with
them: tests/coordinator/test_control_plane_contract.py for diskless)."""

from __future__ import annotations

import pytest

from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.log import EpochEndOffset, OffsetOutOfRange
from storage.spans import Span, SpanChainLog, SpanElsewhere


async def _round_trip(make_log, produce):
    """``a`` holds 0-2, ``b`` 3-5 (epoch 1), ``a`` again 6-7 (epoch 2)."""
    a, b = make_log("a"), make_log("b")
    await produce(a, [b"a0", b"a1", b"a2"], epoch=0)
    await b.start_span(await a.seal())
    await produce(b, [b"b3", b"b4", b"b5"], epoch=1)
    await a.start_span(await b.seal())
    await produce(a, [b"a6", b"a7"], epoch=2)
    return a, b


async def test_reads_follow_the_spans_and_a_shared_log_skips_the_others_offsets(
        tmp_path, make_log, produce, read_all):
    a, b = await _round_trip(make_log, produce)
    chain = SpanChainLog("t", 0, LogConfig(), [Span("classic", 0, a), Span("other", 3, b),
                                                Span("classic", 6, a)])
    assert [(offset, value) for offset, _, value in await read_all(chain)] == [
        (0, b"a0"), (1, b"a1"), (2, b"a2"), (3, b"b3"), (4, b"b4"), (5, b"b5"),
        (6, b"a6"), (7, b"a7")]
    assert (chain.log_start_offset, chain.log_end_offset) == (0, 8)
    # The gap survives a restart: the log reopens at its end, past the other's offsets.
    await a.close()
    reopened = ClassicLog("t", 0, LogConfig(), tmp_path / "a")
    assert reopened.log_end_offset == 8
    assert [value for _, _, value in await read_all(reopened, 6)] == [b"a6", b"a7"]


async def test_a_span_this_broker_does_not_hold_is_read_elsewhere(make_log, produce):
    _, b = await _round_trip(make_log, produce)
    chain = SpanChainLog("t", 0, LogConfig(), [Span("classic", 0, None), Span("other", 3, b)])
    with pytest.raises(SpanElsewhere):
        await chain.read(1, 1 << 20)
    assert (await chain.read(3, 1 << 20)).records


async def test_a_new_span_without_epochs_answers_from_the_span_before(make_log, produce):
    """A consumer validates its position with the epoch it fetched at (KIP-320); "unknown"
    from the new span's empty epoch cache would read as a truncation."""
    a, b = make_log("a"), make_log("b")
    await produce(a, [b"a0", b"a1", b"a2"], epoch=0)
    await b.start_span(await a.seal())
    chain = SpanChainLog("t", 0, LogConfig(), [Span("classic", 0, a), Span("other", 3, b)])
    assert chain.end_offset_for_epoch(0) == EpochEndOffset(0, 3)
    await produce(b, [b"b3"], epoch=1)
    assert chain.end_offset_for_epoch(1) == EpochEndOffset(1, 4)
    assert chain.end_offset_for_epoch(0) == EpochEndOffset(0, 3)


async def test_replicas_of_a_span_skip_to_its_base(make_log, produce):
    """A replica that holds all of its earlier span (or nothing) continues at the new base."""
    follower_a, follower_b = make_log("fa"), make_log("fb")
    await produce(follower_a, [b"a0", b"a1", b"a2"], epoch=0)
    chain = SpanChainLog("t", 0, LogConfig(), [Span("classic", 0, follower_a),
                                                Span("other", 3, None),
                                                Span("classic", 6, follower_a)])
    chain.skip_gaps()
    assert follower_a.log_end_offset == 6
    empty = SpanChainLog("t", 0, LogConfig(), [Span("other", 0, None), Span("classic", 3, follower_b)])
    empty.skip_gaps()
    assert (follower_b.log_start_offset, follower_b.log_end_offset) == (3, 3)


async def test_deleting_records_moves_every_span_start(make_log, produce):
    a, b = await _round_trip(make_log, produce)
    chain = SpanChainLog("t", 0, LogConfig(), [Span("classic", 0, a), Span("other", 3, b),
                                                Span("classic", 6, a)])
    assert await chain.delete_records_before(5) == 5
    assert (await chain.read(5, 1 << 20)).records
    with pytest.raises(OffsetOutOfRange):
        await chain.read(4, 1 << 20)
