"""Replay through Spark local[2] against a real broker: every record accounted for."""

import pyarrow.parquet as pq

from bench.analyze import analyze
from bench.replay import E2E, REQUESTS, create_topics, replay
from bench.synth import SynthParams, synthesize


def test_replay_accounts_for_every_record(spark, shared_broker, tmp_path, topic_name):
    params = SynthParams(producers=3, topics=1, partitions=3, duration_s=5, rate=20,
                         topic_prefix=topic_name, seed=3)
    trace = synthesize(spark, params, tmp_path / "trace.parquet")
    assert 150 < trace.rows < 600
    create_topics(shared_broker.bootstrap, trace.topics)

    result = replay(spark, tmp_path / "trace.parquet", shared_broker.bootstrap, tmp_path / "run",
                    speedup=2.0, show_progress=False)

    assert (result.produced, result.acked, result.consumed, result.failed) == (
        trace.records, trace.records, trace.records, 0)
    requests = pq.read_table(tmp_path / "run" / REQUESTS)
    assert requests.num_rows == trace.rows
    e2e = pq.read_table(tmp_path / "run" / E2E)
    # Each record once: no offset consumed twice.
    assert len(set(zip(e2e["partition"].to_pylist(), e2e["offset"].to_pylist()))) == trace.records

    figures = analyze(spark, tmp_path / "run")
    assert (figures["requests"], figures["records_acked"], figures["records_consumed"],
            figures["records_failed"]) == (trace.rows, trace.records, trace.records, 0)
    assert figures["produce_latency"]["count"] == trace.rows
    assert figures["throughput"]["bytes_acked"] == trace.bytes
    assert 0 < figures["produce_latency"]["p50_ms"] <= figures["produce_latency"]["p99_9_ms"]
