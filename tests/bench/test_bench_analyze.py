"""The analysis job on a hand-built run: known percentiles, throughput and errors."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.analyze import analyze
from bench.replay import E2E, E2E_SCHEMA, REQUEST_FIELDS, REQUESTS

N = 1000


def test_known_percentiles_throughput_and_errors(spark, tmp_path):
    # Request i (1..1000) is sent at i ms and acknowledged i ms later, so produce latencies
    # are 1..1000 ms; 10 more requests failed. End-to-end latencies are 2, 4, ..., 2000 ms.
    ok = [("p", "t", 0, 2, 1000, 492, "none", -1, i * 1000, i * 1000, 2 * i * 1000, 2, 0, None)
          for i in range(1, N + 1)]
    failed = [("p", "t", 1, 3, 500, 150, "none", -1, 0, 0, 5000, 0, 3, "MSG_TIMED_OUT")] * 10
    columns = list(zip(*(ok + failed)))
    pq.write_table(pa.table({name: pa.array(values, kind) for (name, kind), values
                             in zip(REQUEST_FIELDS, columns)}), tmp_path / REQUESTS)
    pq.write_table(pa.table({"topic": ["t"] * N, "partition": [0] * N, "offset": list(range(N)),
                             "send_us": [0] * N,
                             "receive_us": [i * 2000 for i in range(1, N + 1)]},
                            schema=E2E_SCHEMA), tmp_path / E2E)

    figures = analyze(spark, tmp_path)

    produce = figures["produce_latency"]
    assert (produce["count"], produce["p50_ms"], produce["p90_ms"], produce["p99_ms"],
            produce["p99_9_ms"]) == (N, 500, 900, 990, 999)
    e2e = figures["e2e_latency"]
    assert (e2e["count"], e2e["p50_ms"], e2e["p90_ms"], e2e["p99_ms"], e2e["p99_9_ms"]) == (
        N, 1000, 1800, 1980, 1998)
    assert e2e["cdf"]["ms"][-1] == 2000
    assert (figures["requests"], figures["records_sent"], figures["records_acked"],
            figures["records_failed"], figures["requests_failed"]) == (
        N + 10, 2 * N + 30, 2 * N, 30, 10)
    assert figures["errors"] == {"MSG_TIMED_OUT": 30}
    # 1,000,000 bytes acknowledged between the first send (0 µs) and the last ack (2 s).
    assert figures["span_s"] == 2.0
    assert figures["throughput"]["mb_per_s"] == pytest.approx(0.5)
    assert figures["throughput"]["records_per_s"] == pytest.approx(1000)
    assert sum(figures["series"]["mb_per_s"]) == pytest.approx(1.0)
    assert figures["send_lateness"]["p99_9_ms"] == 0
