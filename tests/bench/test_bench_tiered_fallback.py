"""bench/tiered_fallback_bench.py's counter arithmetic and claim 16 of docs/findings.md
computed from a fixture run of it."""

from __future__ import annotations

import re
from collections import Counter

from bench.findings import Runs, render
from bench.tiered_fallback_bench import per_bucket_total


def test_per_bucket_counters_are_summed_over_buckets_only():
    counters = Counter({("uploads", "kipper-fast-az1"): 3, ("uploads", "kipper-fast-az2"): 2,
                        ("uploads_failed", "kipper-fast-az1"): 7, "uploads": 100,
                        ("network", "replication", "cross"): 9})
    assert per_bucket_total(counters, "uploads") == 5
    assert per_bucket_total(counters, "deleted_objects") == 0


def fallback_run() -> dict:
    mib = 1 << 20

    def phase(name, missed, fallback, cross, to_follower, catch_up):
        return {"name": name, "produced_bytes": 32 * mib, "missed_bytes": missed,
                "fallback_bytes": fallback, "cross_az_replication_bytes": cross,
                "to_follower_az_bytes": to_follower, "uploads": 12, "deleted_objects": 12,
                "catch_up_s": catch_up,
                "fallback_per_missed": fallback / missed if missed else None,
                "to_follower_per_missed": to_follower / missed if missed else None,
                "cross_az_per_produced": cross / (32 * mib)}
    return {"phases": [phase("in sync", 0, 0, 4096, 4096, None),
                       phase("behind the objects", 32 * mib, 33 * mib, 34 * mib, 33.6 * mib,
                             14.2)]}


def test_claim_16_is_computed_from_the_fallback_run():
    text = render(Runs({"fallback": fallback_run()}, {"fallback": "`fallback.json`"}))
    claim = re.search(r"^## 16\. .*?(?=^## )", text, re.S | re.M).group(0)
    assert "caught up from raw leader records" in claim
    assert "1.03 bytes per byte it missed" in claim and "(1.05 per byte missed)" in claim
    assert "against 0.000 cross-AZ replication bytes per produced byte" in claim
    assert ("32.00 MiB missed by the stopped follower, fallback 33.00 MiB, cross-AZ "
            "replication 34.00 MiB") in claim
    assert "caught up 14.2 s after its restart" in claim
    assert "computed from `fallback.json`" in claim
    missing = re.search(r"^## 16\. .*?(?=^## )", render(Runs()), re.S | re.M).group(0)
    assert "python -m bench.tiered_fallback_bench --json docs/findings/tiered-fallback.json" \
        in missing
