"""Synthesis on Spark: deterministic for a seed, and shaped as asked."""

from collections import Counter

import pyarrow.parquet as pq
import pytest

from bench.synth import SynthParams, synthesize, synthesize_at_rate
from bench.trace import read_trace, validate_trace

PARAMS = SynthParams(producers=6, topics=2, partitions=8, duration_s=10, rate=10, seed=7)


def test_same_seed_same_trace_other_seed_other_trace(spark, tmp_path):
    first = synthesize(spark, PARAMS, tmp_path / "a.parquet")
    synthesize(spark, PARAMS, tmp_path / "b.parquet")
    synthesize(spark, SynthParams(**{**PARAMS.__dict__, "seed": 8}), tmp_path / "c.parquet")
    a, b, c = (read_trace(tmp_path / f"{n}.parquet") for n in "abc")
    assert a.equals(b)
    assert not a.equals(c)
    assert first.producers == 6 and first.topics == {"bench-0": 8, "bench-1": 8}
    # About rate x duration x producers requests (diurnal and bursts move it around).
    assert 300 < first.rows < 1200

    rows = a.to_pylist()
    # Producers spread over the AZs, each with one AZ.
    assert Counter(row["client_az"] for row in {r["client_id"]: r for r in rows}.values()) == {
        "az1": 2, "az2": 2, "az3": 2}
    # Zipf: the first partition is the busiest, the last the quietest.
    per_partition = Counter(row["partition"] for row in rows)
    assert per_partition[0] == max(per_partition.values())
    assert per_partition[0] > 3 * per_partition[7]
    assert pq.read_metadata(tmp_path / "a.parquet").metadata[b"kipper.trace.version"] == b"1"


@pytest.mark.parametrize("target_mb_s", [5.0])
def test_a_trace_synthesized_at_a_rate_produces_about_that_rate(spark, tmp_path, target_mb_s):
    """What `bench compare --rate/--rates/--full` replays: the same producers, topics and
    record shapes, the request rate scaled to the MB/s asked for."""
    params, summary = synthesize_at_rate(spark, PARAMS, tmp_path / "t.parquet", target_mb_s)
    assert summary.bytes / 1e6 / summary.duration_s == pytest.approx(target_mb_s, rel=0.2)
    assert (params.producers, params.partitions) == (PARAMS.producers, PARAMS.partitions)
    assert summary == validate_trace(tmp_path / "t.parquet")
