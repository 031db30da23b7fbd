"""kcat (Debian package), unmodified, driven through subprocess: produce 10,000 keyed records with
headers per codec, consume them back, list offsets by timestamp (-Q and -o s@<ts>).

kcat cannot create topics (another client does it) and cannot set per-record timestamps or
headers: librdkafka stamps CreateTime at produce time, and -H headers apply to a whole run, so the
records go out in three kcat runs with different header sets (one or two headers each).
In every storage mode (support.storage_modes)."""

from __future__ import annotations

import json
import re
import subprocess
import time

from support.dataset import (CREATE_TIME, Consumed, Record, check_consumed, make_records,
                             timestamp_queries)
from support.kcat import KCAT, kcat
from support.topics import create_topic

CLIENT = "kcat"

CHUNKS = 3  # not a divisor of the probes' positions: they land inside batches


def chunk_headers(j: int) -> tuple[tuple[str, bytes], ...]:
    headers = [("h1", f"chunk-{j}".encode())]
    if j % 2 == 1:
        headers.append(("trace", f"odd-{j}".encode()))
    return tuple(headers)


def test_kcat_supports_all_codecs():
    assert KCAT, "kcat is not installed (apt-get install -y kcat)"
    version = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10).stdout
    features = re.search(r"builtin\.features=(\S+)", version)
    assert features, version
    assert {"gzip", "snappy", "lz4", "zstd"} <= set(features.group(1).split(",")), version


def test_kcat_round_trip(storage_mode, topic_name, compression):
    bootstrap = storage_mode.bootstrap
    storage_mode.watch(topic_name)
    create_topic(bootstrap, topic_name, replication_factor=storage_mode.replication_factor)

    base = make_records(storage_mode.records)
    n = len(base)
    per_chunk = -(-n // CHUNKS)
    expected = [Record(r.key, r.value, chunk_headers(i // per_chunk), 0) for i, r in enumerate(base)]

    common = ["-b", bootstrap, "-X", "broker.address.family=v4", "-q"]
    compress = [] if compression == "none" else ["-z", compression]
    t_start = int(time.time() * 1000)
    for j in range(CHUNKS):
        chunk = expected[j * per_chunk:(j + 1) * per_chunk]
        lines = b"".join(r.key + b":" + r.value + b"\n" for r in chunk)
        headers = [arg for k, v in chunk_headers(j) for arg in ("-H", f"{k}={v.decode()}")]
        kcat(*common, "-P", "-t", topic_name, "-p", "0", "-K:", *compress, *headers,
             "-X", "linger.ms=20", "-X", "acks=all", stdin=lines)
    t_end = int(time.time() * 1000)

    out = kcat(*common, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-J")
    got = []
    for line in out.splitlines():
        m = json.loads(line)
        hdrs = m.get("headers") or []
        got.append(Consumed(
            offset=m["offset"], key=None if m["key"] is None else m["key"].encode(),
            value=None if m["payload"] is None else m["payload"].encode(),
            headers=tuple((hdrs[i], hdrs[i + 1].encode()) for i in range(0, len(hdrs), 2)),
            timestamp=m["ts"], timestamp_type=m["tstype"]))
    check_consumed(expected, got, check_timestamps=False)
    assert {c.timestamp_type for c in got} == {CREATE_TIME}
    stamps = [c.timestamp for c in got]
    assert t_start - 1000 <= stamps[0] and stamps[-1] <= t_end + 1000, (stamps[0], stamps[-1],
                                                                        t_start, t_end)
    assert stamps == sorted(stamps), "librdkafka's CreateTime went backwards: broker reordered?"

    # Query mode: ListOffsets by timestamp, and the logical -2 (earliest) / -1 (latest).
    def query(ts: int) -> int:
        out = kcat(*common, "-Q", "-t", f"{topic_name}:0:{ts}")
        found = re.search(rf"^{re.escape(topic_name)} \[0\] offset (-?\d+)$", out, re.M)
        assert found, f"kcat -Q {ts}: {out!r}"
        return int(found.group(1))

    assert query(-2) == 0
    assert query(-1) == n
    queries = timestamp_queries(stamps)
    for q in queries:
        assert query(q.timestamp) == (-1 if q.offset is None else q.offset), q

    # Consume starting at a timestamp (-o s@<ts>).
    q = queries[0]
    out = kcat(*common, "-C", "-t", topic_name, "-p", "0", "-o", f"s@{q.timestamp}", "-c", "1",
               "-e", "-J")
    first = json.loads(out.splitlines()[0])
    assert (first["offset"], first["ts"], first["key"]) == (
        q.offset, q.record_timestamp, expected[q.offset].key.decode())

    storage_mode.assert_stored(topic_name, compression, n)
