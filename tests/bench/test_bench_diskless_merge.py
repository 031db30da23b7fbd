"""bench/diskless_merge_bench.py's arithmetic (Jun's formula, the growth fit) and claims 9
and 10 of docs/findings.md computed from a fixture run of it."""

from __future__ import annotations

import re

import pytest

from bench.diskless_merge_bench import growth_per_s, jun_formula_bytes
from bench.findings import Runs, render


def test_jun_formula_is_his_720_gb_at_250_ms():
    # Digest §3: 100 B per partition every 250 ms, 100,000 partitions, 5 hours.
    assert jun_formula_bytes(100_000, 5 * 3600, 0.25) == pytest.approx(720e9)
    # The 1/0.2 his formula prints would be 900 GB.
    assert jun_formula_bytes(100_000, 5 * 3600, 0.2) == pytest.approx(900e9)
    # Scaled to a short run: 100 partitions, 2 minutes, 100 ms commits.
    assert jun_formula_bytes(100, 120, 0.1) == pytest.approx(12e6)


def test_growth_is_the_least_squares_slope_of_the_samples():
    samples = [{"t": t, "db_bytes": 4096 + 1000 * t + (50 if t % 2 else -50)}
               for t in range(0, 21)]
    assert growth_per_s(samples, "db_bytes") == pytest.approx(1000, rel=0.01)
    assert growth_per_s(samples[:1], "db_bytes") == 0.0


def merge_run(db_growth_merged: float) -> dict:
    def case(merging, db_growth, objects, gets, seconds):
        return {
            "merging": merging, "name": "merging" if merging else "no merging",
            "partitions": 100, "commit_interval_ms": 100, "produce_s": 120.0,
            "wal_files": 1200, "batches": 30_000, "merges": 20 if merging else 0,
            "merged_objects": 1190 if merging else 0,
            "samples": [{"t": 0, "objects": 0}, {"t": 120, "objects": objects}],
            "growth_per_s": {"db_bytes": db_growth, "metadata_log_bytes": 20_000.0,
                             "objects": objects / 120, "batches": 250.0},
            "db_bytes_per_batch": db_growth / 250, "jun_scaled_bytes": 12e6,
            "jun_scaled_entries": 120_000,
            "jun_extrapolated_bytes": db_growth / 250 * 7.2e9,
            "table_bytes": {"requests": 3e6, "batches": 2e6, "batches_by_object": 1e6},
            "cold_reads": [{"partition": p} for p in range(3)],
            "cold_read": {"records": 1800, "get_requests": gets, "seconds": seconds,
                          "gets_per_partition": gets / 3},
            "wrong_records": 0, "merge_max_objects": 64}
    return {"settings": {"partitions": 100, "rate": 500, "sample_s": 5.0,
                         "profile": "s3-standard"},
            "cases": [case(False, 100_000.0, 1200, 1800, 60.0),
                      case(True, db_growth_merged, 30, 90, 6.0)]}


def section(text: str, number: int) -> str:
    return re.search(rf"^## {number}\. .*?(?=^## )", text, re.S | re.M).group(0)


def test_claims_9_and_10_are_computed_from_the_merge_run():
    text = render(Runs({"merge": merge_run(102_000.0)}, {"merge": "`merge.json`"}))
    growth = section(text, 9)
    assert "Not in kipper: merging does not slow" in growth
    assert "(database bytes per batch produced 1.02x of those without merging)" in growth
    assert "50% of the database is the `requests` table" in growth
    assert "make the coordinator log grow faster" not in growth  # it grew alike
    assert "400 database bytes per batch" in growth and "about 2,880 GB here" in growth
    assert ("Jun's formula scaled to this run (100 B per partition per commit, 120,000 "
            "entries): 12.00 MB, measured without merging 30,000 batches and 12.00 MB") in growth
    assert "computed from `merge.json`" in growth
    cold = section(text, 10)
    assert "600.0 GETs and 20.0 s from the small WAL objects, 30.0 GETs and 2.0 s" in cold
    assert "(20.0x fewer GETs). kipper merges at most 64 WAL objects" in cold and "matched what was acknowledged" in cold
    # Had merging slowed the growth, the answer would say so.
    slowed = section(render(Runs({"merge": merge_run(40_000.0)})), 9)
    assert "Merging slows the coordinator's database growth to 0.40x" in slowed


def test_claims_9_and_10_without_the_run_say_how_to_make_it():
    text = render(Runs())
    for number in (9, 10):
        assert "python -m bench.diskless_merge_bench --json docs/findings/diskless-merge.json" \
            in section(text, number)
