"""OpenMessaging Benchmark workload files read into synthetic-trace parameters."""

import subprocess
import sys
from collections import Counter

import pytest

from bench.omb import OmbWorkloadError, parse_workload, read_workload
from bench.synth import producer_rows

# Published workloads of github.com/openmessaging/benchmark (workloads/), as written there.
ONE_TOPIC_100_PARTITIONS_1KB = """
name: 1 topic / 100 partitions / 1Kb

topics: 1
partitionsPerTopic: 100
keyDistributor: "NO_KEY"
messageSize: 1024
payloadFile: "payload/payload-1Kb.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 50000
consumerBacklogSizeGB: 0
testDurationMinutes: 15
"""
SIMPLE_WORKLOAD = """
name: Simple Workload 1 producer on 1 topic

topics: 1
partitionsPerTopic: 10
messageSize: 1024
payloadFile: "payload/payload-1Kb.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producersPerTopic: 1
producerRate: 10000
consumerBacklogSizeGB: 0
testDurationMinutes: 5
"""
# A vendor-style run: several topics and producers, keyed round robin, a backlog phase.
KEYED_BACKLOG = """
name: 4 topics / 16 partitions / 100b / keys / backlog

topics: 4
partitionsPerTopic: 16
keyDistributor: "KEY_ROUND_ROBIN"
messageSize: 100
payloadFile: "payload/payload-100b.data"
subscriptionsPerTopic: 2
consumerPerSubscription: 2
producersPerTopic: 2
producerRate: 4000000
consumerBacklogSizeGB: 10
testDurationMinutes: 10
warmupDurationMinutes: 1
"""


def trace_rows(text: str, duration_s: float) -> list[tuple]:
    params = parse_workload(text).synth_params(duration_s)
    return [row for index in range(params.producers) for row in producer_rows(index, params)]


def test_one_topic_100_partitions_1kb():
    workload = parse_workload(ONE_TOPIC_100_PARTITIONS_1KB)
    assert (workload.name, workload.topics, workload.partitions_per_topic, workload.producers,
            workload.message_size, workload.producer_rate, workload.key_distributor) == (
        "1 topic / 100 partitions / 1Kb", 1, 100, 1, 1024, 50000, "NO_KEY")
    assert workload.mb_per_s == pytest.approx(51.2)
    params = workload.synth_params()
    assert params.duration_s == 15 * 60
    # 50 messages per 1 ms linger over 100 partitions: one record per request.
    assert (params.mean_records, params.rate) == (1.0, 50000)
    assert dict(workload.unmapped)["payloadFile"] == "payload/payload-1Kb.data"

    rows = trace_rows(ONE_TOPIC_100_PARTITIONS_1KB, 0.2)
    # Constant Poisson rate: 10,000 requests expected in 0.2 s (4 sigma is 400).
    assert 9600 < len(rows) < 10400
    assert {row[3] for row in rows} == {"omb-0"}
    partitions = Counter(row[4] for row in rows)
    assert len(partitions) == 100 and max(partitions.values()) < 3 * min(partitions.values())
    # Fixed 1 KiB values, uncompressed, acks=all: 61 B header + 1,032 B per record.
    assert {(row[5], row[6], row[7], row[8]) for row in rows} == {(1, 61 + 1032, -1, "none")}


def test_simple_workload_keeps_its_duration_and_rate():
    params = parse_workload(SIMPLE_WORKLOAD).synth_params()
    assert (params.producers, params.topics, params.partitions, params.duration_s) == (
        1, 1, 10, 300)
    assert params.rate * params.mean_records == 10000
    assert (params.value_bytes, params.codec, params.acks, params.diurnal_amplitude,
            params.burst_probability) == (1024, "none", -1, 0.0, 0.0)


def test_keyed_workload_with_many_producers_batches_per_linger():
    workload = parse_workload(KEYED_BACKLOG)
    assert workload.key_distributor == "KEY_ROUND_ROBIN"
    assert (workload.producers, workload.consumer_backlog_size_gb) == (8, 10)
    params = workload.synth_params(0.05)
    # 500,000 msg/s per producer: 500 per 1 ms linger over 16 partitions = 31.25 per request.
    assert params.mean_records == 31.25 and params.rate == 16000
    rows = trace_rows(KEYED_BACKLOG, 0.05)
    topics = Counter(row[3] for row in rows)
    assert set(topics) == {"omb-0", "omb-1", "omb-2", "omb-3"}
    assert {row[1] for row in rows} == {f"synth-p{i}" for i in range(8)}
    # Records per 0.05 s: 4,000,000 x 0.05 = 200,000 expected (geometric batches: within 5 %).
    assert 190_000 < sum(row[5] for row in rows) < 210_000
    assert {name for name, _ in workload.unmapped} == {
        "payloadFile", "subscriptionsPerTopic", "consumerPerSubscription",
        "consumerBacklogSizeGB", "warmupDurationMinutes"}


@pytest.mark.parametrize("text, message", [
    ("topics: [1\n", "invalid YAML at line 2"),
    ("- 1\n", "expected a mapping of workload fields"),
    (SIMPLE_WORKLOAD.replace("topics: 1", "topicz: 1"), "unknown field(s) topicz"),
    (SIMPLE_WORKLOAD.replace("messageSize: 1024\n", ""), "missing field(s) messageSize"),
    (SIMPLE_WORKLOAD.replace("partitionsPerTopic: 10", "partitionsPerTopic: ten"),
     "partitionsPerTopic must be an integer, got 'ten'"),
    (SIMPLE_WORKLOAD.replace("topics: 1", "topics: 0"), "topics must be at least 1, got 0"),
    (SIMPLE_WORKLOAD.replace("producerRate: 10000", "producerRate: 0"), "has no rate to replay"),
    (ONE_TOPIC_100_PARTITIONS_1KB.replace('"NO_KEY"', "ZIPF"),
     "keyDistributor 'ZIPF' is not one of NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO"),
])
def test_bad_workloads_get_one_line_errors(text, message):
    with pytest.raises(OmbWorkloadError) as error:
        parse_workload(text, "w.yaml")
    assert str(error.value).startswith("w.yaml: not an OMB workload: ")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unreadable_file(tmp_path):
    with pytest.raises(OmbWorkloadError, match="missing.yaml: cannot read"):
        read_workload(tmp_path / "missing.yaml")


def test_synth_command_rejects_a_bad_workload_in_one_line(tmp_path):
    (tmp_path / "w.yaml").write_text(SIMPLE_WORKLOAD.replace("topics: 1", "topics: -1"))
    result = subprocess.run([sys.executable, "-m", "broker.cli", "bench", "synth", "--omb",
                             str(tmp_path / "w.yaml"), "--out", str(tmp_path / "t.parquet")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr == f"{tmp_path / 'w.yaml'}: not an OMB workload: topics must be at least 1, got -1\n"
    assert not (tmp_path / "t.parquet").exists()
