"""kafkajs 2.2.4 (npm), unmodified, with the npm codec packages kafkajs-snappy, @2l/kafkajs-lz4 and
@sensejs/kafkajs-zstd-support: tests/js/client.mjs creates the topic, produces 10,000 records per
codec, consumes them back with a consumer group and lists offsets by timestamp; this test checks
what it printed. In every storage mode (support.storage_modes)."""

from __future__ import annotations

import json
import shutil
import subprocess

from support.dataset import (CREATE_TIME, Consumed, base_timestamp, check_consumed, make_records,
                             timestamp_queries)

CLIENT = "kafkajs"

KAFKAJS_TIMESTAMP_TYPES = {0: CREATE_TIME, 1: "append"}


def test_kafkajs_round_trip(storage_mode, topic_name, compression, js_client, tmp_path):
    base_ts = base_timestamp()
    records = make_records(storage_mode.records, base_ts=base_ts)
    n = len(records)
    queries = timestamp_queries([r.timestamp for r in records])
    storage_mode.watch(topic_name)

    cmd = [shutil.which("node"), str(js_client), "--bootstrap", storage_mode.bootstrap,
           "--topic", topic_name, "--replication-factor", str(storage_mode.replication_factor),
           "--compression", compression, "--count", str(n),
           "--base-ts", str(base_ts), "--ts-step", str(records[1].timestamp - base_ts),
           "--query-ts", ",".join(str(q.timestamp) for q in queries)]
    stderr_path = tmp_path / "kafkajs.stderr"
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr,
                              stdin=subprocess.DEVNULL, timeout=180)
    log = stderr_path.read_text(errors="replace")
    assert proc.returncode == 0, f"kafkajs client exited {proc.returncode}:\n{log[-4000:]}"
    result = json.loads(proc.stdout)

    assert [a["errorCode"] for a in result["acks"]] == [0] * len(result["acks"])
    assert [int(a["baseOffset"]) for a in result["acks"]] == list(range(0, n, 1000)), result["acks"]

    got = []
    for partition, offset, key, value, headers, timestamp, ts_type in result["records"]:
        assert partition == 0
        got.append(Consumed(
            offset=int(offset), key=None if key is None else key.encode(),
            value=None if value is None else value.encode(),
            headers=tuple((k, v.encode()) for k, v in headers.items()),
            timestamp=int(timestamp),
            timestamp_type=KAFKAJS_TIMESTAMP_TYPES.get(ts_type, f"type {ts_type}")))
    check_consumed(records, got)

    # fetchTopicOffsetsByTimestamp answers the high watermark when no record is that late.
    assert len(result["byTimestamp"]) == len(queries)
    for q, answer in zip(queries, result["byTimestamp"]):
        assert answer["ts"] == q.timestamp
        expected = n if q.offset is None else q.offset
        assert [(p["partition"], int(p["offset"])) for p in answer["offsets"]] == [(0, expected)], (
            q, answer)
    [offsets] = result["topicOffsets"]
    assert (offsets["partition"], int(offsets["low"]), int(offsets["high"])) == (0, 0, n), offsets

    storage_mode.assert_stored(topic_name, compression, n)
