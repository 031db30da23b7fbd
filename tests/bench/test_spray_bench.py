"""bench/spray_bench.py's pure parts: where a send goes, and the check of the log read back."""

from __future__ import annotations

from bench.spray_bench import LogCheck, broker_for, check_log


def test_sticky_sends_everything_to_one_broker_and_spray_moves_every_batch_and_resend():
    assert {broker_for(batch, attempt, 3, "sticky") for batch in range(6)
            for attempt in range(3)} == {0}
    assert [broker_for(batch, 0, 3, "spray") for batch in range(4)] == [0, 1, 2, 0]
    assert [broker_for(1, attempt, 3, "spray") for attempt in range(3)] == [1, 2, 0]


def test_the_log_check_counts_duplicates_gaps_and_reordering():
    assert check_log([0, 1, 2, 3], 4) == LogCheck(4, 0, 0, 0)
    assert check_log([0, 1, 1, 3], 4) == LogCheck(4, 1, 1, 0)
    assert check_log([0, 2, 1, 3, 2], 4) == LogCheck(5, 1, 0, 1)
