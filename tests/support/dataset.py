"""The records every real-client test produces, and the checks applied to what comes back.

Each client test produces N records (distinct keys and values, 1-2 headers, explicit CreateTime
timestamps base + i * TS_STEP where the client allows it) into a fresh one-partition topic, reads
them back and hands them to ``check_consumed`` as ``Consumed`` tuples. tests/js/client.mjs builds
the same records in JavaScript: keep ``make_records`` and ``makeRecord`` in step.

``assert_stored_codec`` reads the batches the broker stored, to prove the client really used the
codec under test (librdkafka, for one, silently falls back to no compression when it believes
the broker cannot take the codec).
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
N_RECORDS = int(os.environ.get("KIPPER_CLIENT_TEST_RECORDS", "10000"))
TS_STEP = 10  # ms between consecutive records' timestamps
CREATE_TIME = "create"
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass(frozen=True)
class Record:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass(frozen=True)
class Consumed:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int
    timestamp_type: str  # "create" | "append" | whatever the client said, normalised by the test


def base_timestamp() -> int:
    """A CreateTime base well inside the default retention and clearly not 'now'."""
    return (int(time.time() * 1000) - 3_600_000) // 1000 * 1000


def make_records(n: int = N_RECORDS, base_ts: int | None = None) -> list[Record]:
    base_ts = base_timestamp() if base_ts is None else base_ts
    records = []
    for i in range(n):
        headers = [("h1", f"h1-{i}".encode())]
        if i % 2 == 0:
            headers.append(("trace", f"t-{i * 7}".encode()))
        records.append(Record(
            key=f"key-{i:05d}".encode(),
            value=(f"value-{i:05d}-" + "abcdefghij" * (i % 7 + 3)).encode(),
            headers=tuple(headers),
            timestamp=base_ts + i * TS_STEP,
        ))
    return records


def check_consumed(expected: list[Record], got: list[Consumed], *, check_timestamps: bool = True,
                   first_offset: int = 0) -> None:
    """Every record exactly once, in order, contiguous offsets, equal contents and timestamps."""
    offsets = [c.offset for c in got]
    assert len(got) == len(expected), (
        f"consumed {len(got)} records, produced {len(expected)}; "
        f"first offsets {offsets[:5]}, last offsets {offsets[-5:]}")
    for i, (want, have) in enumerate(zip(expected, got)):
        where = f"record #{i} (offset {have.offset})"
        assert have.offset == first_offset + i, (
            f"{where}: expected offset {first_offset + i}; offsets near it: "
            f"{offsets[max(0, i - 3):i + 4]}")
        assert have.key == want.key, f"{where}: key {have.key!r} != {want.key!r}"
        assert have.value == want.value, f"{where}: value {have.value!r} != {want.value!r}"
        assert tuple(have.headers) == want.headers, (
            f"{where}: headers {have.headers!r} != {want.headers!r}")
        assert have.timestamp_type == CREATE_TIME, (
            f"{where}: timestamp type {have.timestamp_type!r}, expected CreateTime")
        if check_timestamps:
            assert have.timestamp == want.timestamp, (
                f"{where}: timestamp {have.timestamp} != {want.timestamp}")


@dataclass(frozen=True)
class TimestampQuery:
    timestamp: int
    offset: int | None  # None: no record at or after the timestamp
    record_timestamp: int | None


def timestamp_queries(timestamps: list[int]) -> list[TimestampQuery]:
    """ListOffsets-by-timestamp probes with their expected answers, for records whose timestamps
    (in offset order, non-decreasing) are ``timestamps``: just before a record in the middle,
    exactly on a record three quarters in, before the first record, after the last one."""
    n = len(timestamps)

    def first_at_or_after(ts: int) -> TimestampQuery:
        for offset, record_ts in enumerate(timestamps):
            if record_ts >= ts:
                return TimestampQuery(ts, offset, record_ts)
        return TimestampQuery(ts, None, None)

    probes = [timestamps[n // 2] - 1, timestamps[(3 * n) // 4], timestamps[0] - 60_000,
              timestamps[-1] + 60_000]
    return [first_at_or_after(ts) for ts in probes]


def segment_batches(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[int, int, str]]:
    """(base offset, record count, codec) of every record batch in the partition's segment files.

    Reads the classic engine's ``%020d.log`` files (whole v2 record batches) under the broker's
    data dir: it shows which codec the client really used, since the broker stores batches as
    the producer sent them."""
    dirs = [d for d in Path(data_dir).rglob(f"{topic}-{partition}") if d.is_dir()]
    assert len(dirs) == 1, f"expected one log dir for {topic}-{partition} under {data_dir}: {dirs}"
    batches = []
    for segment in sorted(dirs[0].glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base_offset, batch_length = struct.unpack_from(">qi", data, pos)
            magic = data[pos + 16]
            attributes, = struct.unpack_from(">h", data, pos + 21)
            records, = struct.unpack_from(">i", data, pos + 57)
            assert magic == 2, f"{segment}@{pos}: magic {magic}"
            batches.append((base_offset, records, CODEC_NAMES.get(attributes & 0x7, "?")))
            pos += 12 + batch_length
    return batches


def assert_stored_codec(batches: list[tuple[int, int, str]], codec: str, n_records: int) -> None:
    """``batches``: one copy of a partition as (base offset, record count, codec) per batch,
    e.g. ``segment_batches`` of one replica (support.storage_modes gives each mode's copies)."""
    assert sum(count for _, count, _ in batches) == n_records, f"stored batches: {batches[:10]}"
    codecs = {c for _, _, c in batches}
    assert codecs == {codec}, f"stored batch codecs {codecs}, expected {codec!r}: {batches[:10]}"


def check_timestamp_answer(query: TimestampQuery, answer) -> None:
    """A client's offsets_for_times answer (an object with offset/timestamp, or None)."""
    if query.offset is None:
        assert answer is None, f"offsets_for_times({query.timestamp}) = {answer}, expected none"
        return
    assert answer is not None, f"offsets_for_times({query.timestamp}) gave no offset"
    assert (answer.offset, answer.timestamp) == (query.offset, query.record_timestamp), (
        f"offsets_for_times({query.timestamp}) = {answer}, expected offset {query.offset} "
        f"with timestamp {query.record_timestamp}")
