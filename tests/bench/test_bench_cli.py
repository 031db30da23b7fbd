"""`kipper bench validate` as users run it."""

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from bench.trace import SCHEMA, write_trace


def kipper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", "bench", *args],
                          capture_output=True, text=True, timeout=120)


def test_validate_good_and_bad_traces(tmp_path):
    good = {"timestamp_us": [1, 2], "client_id": ["a", "b"], "client_az": ["az1", None],
            "topic": ["t", "t"], "partition": [0, 1], "record_count": [1, 2],
            "bytes": [10, 20], "acks": [1, 1], "compression": ["none", "zstd"]}
    write_trace(pa.table(good, schema=SCHEMA), tmp_path / "good.parquet")
    result = kipper("validate", str(tmp_path / "good.parquet"))
    assert result.returncode == 0, result.stderr
    assert "valid trace (schema v1): 2 requests, 3 records, 30 bytes, 2 producers" in result.stdout

    bad = {**good, "bytes": [10, -20], "timestamp_us": [2, 1]}
    pq.write_table(pa.table(bad, schema=SCHEMA), tmp_path / "bad.parquet")
    result = kipper("validate", str(tmp_path / "bad.parquet"))
    assert result.returncode == 1
    assert "invalid trace" in result.stderr
    assert "1 rows with bytes < 0 (first: row 1, bytes=-20)" in result.stderr
    assert "timestamps are not sorted" in result.stderr
