"""`--capture-trace DIR`: the broker writes the produce traffic it receives as a bench trace.

Metadata only (who sent how many records and bytes to which partition, with which acks and
codec), one row per partition of a produce request, in the format of ``bench/trace.py``.
Rows are buffered and written as Parquet row groups; a file is closed and the next one
started once it reaches ``max_file_bytes``, and the last one is completed when the broker
stops (a Parquet file is readable only once closed).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from protocol.records import BatchHeader

from .client_az import az_from_client_id

# The trace format, schema v1 (bench.trace reads it; bench/README.md documents the columns).
VERSION = 1
VERSION_KEY = b"kipper.trace.version"
SCHEMA = pa.schema([
    pa.field("timestamp_us", pa.int64(), nullable=False),
    pa.field("client_id", pa.string(), nullable=False),
    pa.field("client_az", pa.string()),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("record_count", pa.int32(), nullable=False),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("acks", pa.int8(), nullable=False),
    pa.field("compression", pa.string(), nullable=False),
], metadata={VERSION_KEY: str(VERSION).encode()})

log = logging.getLogger(__name__)

# Record-batch attribute bits 0-2 (Kafka's CompressionType ids).
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
MAX_FILE_BYTES = 64 << 20
ROW_GROUP_ROWS = 8192


class TraceCapture:
    def __init__(self, directory: Path | str, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_file_bytes = max_file_bytes
        self._columns: dict[str, list] = {name: [] for name in SCHEMA.names}
        self._file = None
        self._writer: pq.ParquetWriter | None = None
        # Continue numbering after files a previous run left, never overwrite them.
        self._sequence = len(list(self.directory.glob("trace-*.parquet")))

    def record(self, client_id: str | None, topic: str, partition: int,
               batches: list[BatchHeader], nbytes: int, acks: int) -> None:
        codec = batches[0].compression
        if codec >= len(CODECS):
            return  # not a Kafka codec: nothing a client could replay
        row = (time.time_ns() // 1000, client_id or "", az_from_client_id(client_id), topic,
               partition, sum(b.record_count for b in batches), nbytes, acks, CODECS[codec])
        for name, value in zip(SCHEMA.names, row):
            self._columns[name].append(value)
        if len(self._columns["timestamp_us"]) >= ROW_GROUP_ROWS:
            self._write_row_group()

    def close(self) -> None:
        self._write_row_group()
        self._close_file()

    def _write_row_group(self) -> None:
        if not self._columns["timestamp_us"]:
            return
        table = pa.table(self._columns, schema=SCHEMA)
        self._columns = {name: [] for name in SCHEMA.names}
        if self._writer is None:
            path = self.directory / f"trace-{self._sequence:05d}.parquet"
            self._sequence += 1
            self._file = open(path, "wb")
            self._writer = pq.ParquetWriter(self._file, SCHEMA, compression="zstd")
            log.info("capturing produce trace to %s", path)
        self._writer.write_table(table)
        if self._file.tell() >= self.max_file_bytes:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._file.close()
            self._writer = self._file = None
