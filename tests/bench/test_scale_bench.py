"""bench.scale_bench's arithmetic: the event-loop lag P99 between two scrapes, and its
command line."""

from __future__ import annotations

import pytest

from bench.scale_bench import SECTIONS, p99, parse_args


def test_p99_is_the_bucket_bound_reached_by_99_percent_of_the_new_samples():
    before = {0.001: 10, 0.01: 10, 0.05: 10, 0.1: 10, float("inf"): 10}
    after = {0.001: 60, 0.01: 108, 0.05: 109, 0.1: 110, float("inf"): 110}
    assert p99(before, after) == 0.05  # 99 of the 100 new samples are at most 50 ms
    assert p99(before, before) is None  # nothing observed in between


def test_sections_and_sizes_come_from_the_command_line():
    args = parse_args(["--sections", "cluster,churn", "--partitions", "1000"])
    assert args.sections == ["cluster", "churn"] and args.partitions == 1000
    assert parse_args([]).sections == list(SECTIONS)
    with pytest.raises(SystemExit):
        parse_args(["--sections", "bogus"])
