"""The produce-trace format: one Parquet row per produce request (per partition), schema v1.

A trace is a Parquet file, or a directory of them (a capture rotates files; a cluster capture
has one subdirectory per broker). Every file carries its schema version in the Parquet
key-value metadata (``kipper.trace.version``) and is sorted by ``timestamp_us``; files are not
ordered among themselves, so readers that need one timeline sort (the replay does).
``bench/README.md`` documents the columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker.capture import SCHEMA, VERSION, VERSION_KEY

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = (-1, 0, 1)


class TraceError(ValueError):
    """A trace that cannot be replayed; ``problems`` lists every reason found."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: invalid trace:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass
class TraceSummary:
    files: int
    rows: int
    records: int
    bytes: int
    producers: int
    # topic -> partitions the trace needs (highest partition index + 1)
    topics: dict[str, int] = field(default_factory=dict)
    start_us: int = 0
    end_us: int = 0

    @property
    def duration_s(self) -> float:
        return (self.end_us - self.start_us) / 1e6


def trace_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*.parquet") if p.is_file())
    return [path] if path.exists() else []


def write_trace(table: pa.Table, path: Path) -> Path:
    """Write rows (any column order, castable types) as one sorted v1 trace file."""
    table = table.select(SCHEMA.names).cast(SCHEMA).sort_by("timestamp_us")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return path


def read_trace(path: Path) -> pa.Table:
    """Every file of a valid trace as one table sorted by timestamp (raises TraceError)."""
    validate_trace(path)
    tables = [pq.read_table(file).select(SCHEMA.names).cast(SCHEMA) for file in trace_files(path)]
    return pa.concat_tables(tables).sort_by("timestamp_us")


def validate_trace(path: Path) -> TraceSummary:
    """Check every file of a trace; raise TraceError listing all problems found."""
    path = Path(path)
    files = trace_files(path)
    if not files:
        raise TraceError(path, ["no Parquet files found"])
    problems: list[str] = []
    tables: list[pa.Table] = []
    for file in files:
        name = file.relative_to(path) if path.is_dir() else file.name
        file_problems = []
        try:
            table = pq.read_table(file)
        except (pa.ArrowInvalid, OSError) as e:
            problems.append(f"{name}: not readable as Parquet: {e}")
            continue
        file_problems += _check_version(table.schema)
        missing = [n for n in SCHEMA.names if n not in table.schema.names]
        if missing:
            file_problems.append(f"missing columns: {', '.join(missing)}")
        else:
            file_problems += _check_columns(table)
        problems += [f"{name}: {p}" for p in file_problems]
        if not file_problems:
            tables.append(table.select(SCHEMA.names).cast(SCHEMA))
    if problems:
        raise TraceError(path, problems)
    table = pa.concat_tables(tables)
    topics = table.group_by("topic").aggregate([("partition", "max")])
    return TraceSummary(
        files=len(files), rows=table.num_rows,
        records=pc.sum(table["record_count"]).as_py() or 0,
        bytes=pc.sum(table["bytes"]).as_py() or 0,
        producers=pc.count_distinct(table["client_id"]).as_py(),
        topics={t: p + 1 for t, p in zip(topics["topic"].to_pylist(),
                                         topics["partition_max"].to_pylist())},
        start_us=pc.min(table["timestamp_us"]).as_py() or 0,
        end_us=pc.max(table["timestamp_us"]).as_py() or 0)


def _check_version(schema: pa.Schema) -> list[str]:
    raw = (schema.metadata or {}).get(VERSION_KEY)
    if raw is None:
        return [f"no {VERSION_KEY.decode()} in the Parquet metadata (write traces with "
                "bench.trace.write_trace, or add the key)"]
    if raw != str(VERSION).encode():
        return [f"schema version {raw.decode(errors='replace')} is not supported "
                f"(this kipper reads version {VERSION})"]
    return []


def _check_columns(table: pa.Table) -> list[str]:
    problems = []
    for column in SCHEMA:
        actual = table.schema.field(column.name).type
        kind_ok = (pa.types.is_integer(actual) if pa.types.is_integer(column.type)
                   else pa.types.is_string(actual) or pa.types.is_large_string(actual))
        if not kind_ok:
            problems.append(f"column {column.name} is {actual}, expected {column.type}")
        elif not column.nullable and table[column.name].null_count:
            problems.append(f"column {column.name} has {table[column.name].null_count} nulls")
    if problems:
        return problems

    def first_row(mask: pa.ChunkedArray) -> int:
        return pc.index(mask, True).as_py()

    for name, minimum in (("bytes", 0), ("partition", 0), ("record_count", 1)):
        bad = pc.less(table[name], minimum)
        if pc.any(bad).as_py():
            row = first_row(bad)
            problems.append(f"{pc.sum(bad).as_py()} rows with {name} < {minimum} "
                            f"(first: row {row}, {name}={table[name][row].as_py()})")
    checks = (("acks", ACKS), ("compression", COMPRESSIONS))
    for name, allowed in checks:
        bad = pc.invert(pc.is_in(table[name], pa.array(allowed, table[name].type)))
        if pc.any(bad).as_py():
            row = first_row(bad)
            problems.append(f"{pc.sum(bad).as_py()} rows with {name} not in {list(allowed)} "
                            f"(first: row {row}, {name}={table[name][row].as_py()!r})")
    times = table["timestamp_us"].combine_chunks()
    if len(times) > 1:
        backwards = pc.less(times[1:], times[:-1])
        if pc.any(backwards).as_py():
            row = pc.index(backwards, True).as_py() + 1
            problems.append(f"timestamps are not sorted: row {row} ({times[row].as_py()} µs) is "
                            f"earlier than row {row - 1} ({times[row - 1].as_py()} µs)")
    return problems


# How bytes relate to record values, so that a synthetic row, its replay and a capture of that
# replay agree on ``bytes`` (the record-batch bytes on the wire, after compression):
# a v2 batch header is 61 bytes, each record adds ~8 bytes of varints (length, attributes,
# timestamp and offset deltas, key and value lengths, header count), and the replay's
# payload for compressed rows is half random, half zeros, which every codec halves.
BATCH_OVERHEAD = 61
RECORD_OVERHEAD = 8
COMPRESSED_PAYLOAD_RATIO = 2
# The replay stamps each value with its send time (8 bytes, for end-to-end latency).
MIN_VALUE_BYTES = 8


def wire_bytes(value_bytes: int, record_count: int, compression: str) -> int:
    """Batch bytes of ``record_count`` values of ``value_bytes`` each."""
    raw = BATCH_OVERHEAD + record_count * (value_bytes + RECORD_OVERHEAD)
    return raw if compression == "none" else raw // COMPRESSED_PAYLOAD_RATIO


def value_bytes(wire: int, record_count: int, compression: str) -> int:
    """The value size that makes ``record_count`` records come to ``wire`` batch bytes."""
    raw = wire if compression == "none" else wire * COMPRESSED_PAYLOAD_RATIO
    return max(MIN_VALUE_BYTES, (raw - BATCH_OVERHEAD) // record_count - RECORD_OVERHEAD)
