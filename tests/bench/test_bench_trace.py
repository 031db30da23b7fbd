"""The trace format: a written trace reads back unchanged; bad traces get clear errors."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.trace import (
    SCHEMA,
    TraceError,
    read_trace,
    validate_trace,
    value_bytes,
    wire_bytes,
    write_trace,
)


def rows(n: int = 5, **overrides) -> dict[str, list]:
    columns = {
        "timestamp_us": [1_000_000 + i * 1000 for i in range(n)],
        "client_id": [f"p{i % 2}" for i in range(n)],
        "client_az": [f"az{i % 3 + 1}" for i in range(n)],
        "topic": ["orders"] * n,
        "partition": [i % 3 for i in range(n)],
        "record_count": [i + 1 for i in range(n)],
        "bytes": [100 * (i + 1) for i in range(n)],
        "acks": [-1] * n,
        "compression": ["none", "lz4", "zstd", "snappy", "gzip"][:n],
    }
    columns.update(overrides)
    return columns


def test_round_trip(tmp_path):
    table = pa.table(rows(), schema=SCHEMA)
    path = write_trace(table, tmp_path / "t.parquet")
    assert read_trace(path).equals(table)
    summary = validate_trace(path)
    assert (summary.rows, summary.records, summary.bytes, summary.producers) == (5, 15, 1500, 2)
    assert summary.topics == {"orders": 3}
    assert summary.duration_s == pytest.approx(0.004)


def test_directory_of_files_is_one_trace(tmp_path):
    # Like a cluster capture: files sorted each, not among themselves.
    write_trace(pa.table(rows(), schema=SCHEMA), tmp_path / "broker-1" / "trace-00000.parquet")
    write_trace(pa.table(rows(timestamp_us=[10 + i for i in range(5)]), schema=SCHEMA),
                tmp_path / "broker-0" / "trace-00000.parquet")
    table = read_trace(tmp_path)
    assert table.num_rows == 10
    assert table["timestamp_us"].to_pylist() == sorted(table["timestamp_us"].to_pylist())


def write_raw(tmp_path, columns: dict, metadata=SCHEMA.metadata):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns).replace_schema_metadata(metadata), path)
    return path


def problems_of(path) -> str:
    with pytest.raises(TraceError) as error:
        validate_trace(path)
    return str(error.value)


def test_missing_columns(tmp_path):
    columns = rows()
    del columns["bytes"], columns["acks"]
    assert "missing columns: bytes, acks" in problems_of(write_raw(tmp_path, columns))


def test_negative_sizes_and_empty_requests(tmp_path):
    message = problems_of(write_raw(tmp_path, rows(bytes=[100, -1, 5, -7, 1],
                                                    record_count=[1, 1, 0, 1, 1])))
    assert "2 rows with bytes < 0 (first: row 1, bytes=-1)" in message
    assert "1 rows with record_count < 1 (first: row 2, record_count=0)" in message


def test_unsorted_timestamps(tmp_path):
    message = problems_of(write_raw(tmp_path, rows(timestamp_us=[5, 6, 9, 7, 10])))
    assert "timestamps are not sorted: row 3 (7 µs) is earlier than row 2 (9 µs)" in message


def test_unknown_codec_and_acks(tmp_path):
    message = problems_of(write_raw(tmp_path, rows(compression=["none", "brotli", "lz4",
                                                                "none", "none"],
                                                   acks=[1, 1, 2, 1, 1])))
    assert "compression not in" in message and "'brotli'" in message
    assert "acks not in [-1, 0, 1]" in message


def test_wrong_types_and_nulls(tmp_path):
    message = problems_of(write_raw(tmp_path, rows(bytes=["1"] * 5,
                                                   topic=["a", None, "b", "c", "d"])))
    assert "column bytes is string, expected int64" in message
    assert "column topic has 1 nulls" in message


def test_version(tmp_path):
    assert "no kipper.trace.version" in problems_of(write_raw(tmp_path, rows(), metadata=None))
    assert "schema version 9 is not supported" in problems_of(
        write_raw(tmp_path, rows(), metadata={b"kipper.trace.version": b"9"}))


def test_no_files(tmp_path):
    assert "no Parquet files found" in problems_of(tmp_path)


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_value_size_inverts_wire_size(compression):
    assert value_bytes(wire_bytes(1000, 7, compression), 7, compression) in (999, 1000)
