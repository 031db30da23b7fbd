"""`--capture-trace`: what a broker receives from a real client becomes a valid trace."""

from confluent_kafka import Producer

from bench.trace import read_trace, trace_files, validate_trace
from broker.capture import TraceCapture
from protocol.records import BatchHeader
from support.topics import create_topic


def header(record_count: int, codec: int) -> BatchHeader:
    return BatchHeader(position=0, size=0, base_offset=0, partition_leader_epoch=0, crc=0,
                       attributes=codec, last_offset_delta=record_count - 1, base_timestamp=0,
                       max_timestamp=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       record_count=record_count)


def test_capture_rotates_by_size_and_flushes_on_close(tmp_path):
    capture = TraceCapture(tmp_path, max_file_bytes=1)  # every row group closes its file
    for i in range(3):
        for _ in range(8192):
            capture.record("app az=az2", "t", i, [header(2, 3)], 500, 1)
        assert len(trace_files(tmp_path)) == i + 1
    capture.record("app", "t", 0, [header(1, 0)], 100, -1)
    capture.close()
    summary = validate_trace(tmp_path)
    assert (summary.files, summary.rows, summary.records) == (4, 3 * 8192 + 1, 3 * 8192 * 2 + 1)
    last = read_trace(tmp_path).slice(3 * 8192).to_pylist()[0]
    assert {k: last[k] for k in ("client_id", "client_az", "compression", "acks")} == {
        "client_id": "app", "client_az": None, "compression": "none", "acks": -1}


def test_broker_captures_produce_traffic(broker_factory, tmp_path, topic_name):
    capture_dir = tmp_path / "capture"
    broker = broker_factory("--capture-trace", str(capture_dir))
    create_topic(broker.bootstrap, topic_name, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "capture-test az=az2",
                         "compression.type": "lz4", "acks": "all", "linger.ms": 2})
    delivered = []
    for i in range(500):
        producer.produce(topic_name, b"v" * 100, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 500
    assert broker.stop() == 0  # the capture's last file is completed on shutdown

    trace = read_trace(capture_dir)
    mine = trace.filter(trace["topic"].to_numpy(zero_copy_only=False) == topic_name).to_pylist()
    assert sum(row["record_count"] for row in mine) == 500
    assert {row["partition"] for row in mine} == {0, 1}
    assert {(row["client_id"], row["client_az"], row["compression"], row["acks"])
            for row in mine} == {("capture-test az=az2", "az2", "lz4", -1)}
    assert all(row["bytes"] > 0 for row in mine)
