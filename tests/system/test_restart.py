"""Restart durability: every record a real producer (confluent-kafka) saw acknowledged is there,
exactly once and in order, after the broker is killed with SIGKILL (or stopped with SIGTERM)
and restarted on the same data dir and port.

kipper writes appends to the page cache before acknowledging them; kill -9 ends the process,
not the kernel, so page-cache data survives and nothing acknowledged may be lost here (power
loss is a different promise and is not tested).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from support.processes import BrokerProcess
from support.topics import create_topic
from support.wait import wait_until

pytestmark = pytest.mark.system

PARTITIONS = 3


class AckLog:
    """Delivery reports of one producer: (partition, offset, value) of every acked record."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed[err.name()] += 1

    def snapshot(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.acked)


def producer(broker: BrokerProcess, acks: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": 5,
                     "enable.idempotence": False, "message.timeout.ms": 30000, **extra})


def produce_all(broker: BrokerProcess, topic: str, acks: str, count: int, start: int = 0,
                **extra) -> list:
    """Values are zero-padded counters from ``start``: unique, and ordered like the produce
    calls. ``extra``: more producer settings."""
    acks_log = AckLog()
    p = producer(broker, acks, **extra)
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=b"%08d" % i, key=b"%d" % (i % 17), on_delivery=acks_log)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(60) == 0, "records still undelivered after 60 s"
    assert not acks_log.failed, f"delivery failures: {dict(acks_log.failed)}"
    acked = acks_log.snapshot()
    assert len(acked) == count
    return acked


def consume_all(broker: BrokerProcess, topic: str,
                partitions: int = PARTITIONS) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from the log start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap,
                         "group.id": f"restart-check-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {}
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            ends[p] = high
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        deadline = time.monotonic() + 60
        position = {p: 0 for p in range(partitions)}
        while any(position[p] < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, (
                f"consumed only {position} of high watermarks {ends}")
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                got[msg.partition()].append((msg.offset(), msg.value()))
                position[msg.partition()] = msg.offset() + 1
        return got
    finally:
        consumer.close()


def assert_all_acked_present(acked: list[tuple[int, int, bytes]],
                             stored: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every acked record is stored once, at the offset it was acked with, in produce order."""
    for partition, records in stored.items():
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), f"partition {partition}: offsets not increasing"
    by_offset = {(p, o): v for p, records in stored.items() for o, v in records}
    missing = [(p, o, v) for p, o, v in acked if by_offset.get((p, o)) != v]
    assert not missing, (f"{len(missing)} of {len(acked)} acknowledged records lost or changed, "
                         f"first: {missing[:5]} (stored there: "
                         f"{[by_offset.get((p, o)) for p, o, _ in missing[:5]]})")
    counts = Counter(v for records in stored.values() for _, v in records)
    duplicated = [v for _, _, v in acked if counts[v] != 1]
    assert not duplicated, f"acknowledged records stored more than once: {duplicated[:5]}"
    for partition in stored:
        in_partition = [v for p, _, v in sorted(acked) if p == partition]
        assert in_partition == sorted(in_partition), (
            f"partition {partition}: acknowledged records out of produce order")


def restart(broker: BrokerProcess) -> BrokerProcess:
    port = broker.port
    broker.start()
    assert broker.port == port
    return broker


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill9_after_acks_keeps_every_acknowledged_record(broker_factory, topic_name, acks):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    acked = produce_all(broker, topic_name, acks, 3000)
    before = consume_all(broker, topic_name)
    assert_all_acked_present(acked, before)

    broker.kill()
    assert not broker.alive()
    restart(broker)

    after = consume_all(broker, topic_name)
    assert_all_acked_present(acked, after)
    assert after == before, "the log after restart differs from the log before the kill"

    # The restarted broker takes new writes after the recovered tail.
    more = produce_all(broker, topic_name, acks, 300, start=3000)
    final = consume_all(broker, topic_name)
    assert_all_acked_present(acked + more, final)
    assert "Traceback" not in broker.log_path.read_text(errors="replace"), broker.log_tail()


def test_graceful_stop_and_restart_keeps_data(broker_factory, topic_name):
    broker = broker_factory()
    # Small segments (and batches that fit them): after a clean stop the sealed ones are
    # opened lazily, their indexes read when the consumer first reaches them.
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS,
                 config={"segment.bytes": "8192"})
    acked = produce_all(broker, topic_name, "all", 3000, **{"batch.size": 2048})

    assert broker.stop() == 0, f"graceful stop failed; log:\n{broker.log_tail()}"
    segments = list(broker.data_dir.glob(f"{topic_name}-0/*.log"))
    assert len(segments) >= 2
    restart(broker)
    assert_all_acked_present(acked, consume_all(broker, topic_name))

    # Twice in a row, with writes in between: the second clean shutdown also keeps everything.
    more = produce_all(broker, topic_name, "1", 500, start=3000)
    assert broker.stop() == 0
    restart(broker)
    assert_all_acked_present(acked + more, consume_all(broker, topic_name))
    assert "Traceback" not in broker.log_path.read_text(errors="replace"), broker.log_tail()


def test_topics_survive_restart(broker_factory, topic_name):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, partitions=5)
    broker.kill()
    restart(broker)
    topic = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
        topic_name, timeout=10).topics[topic_name]
    assert topic.error is None and len(topic.partitions) == 5


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill9_during_produce_loses_nothing_acknowledged(broker_factory, topic_name, acks):
    broker = broker_factory()
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    acks_log = AckLog()
    p = producer(broker, acks, **{"message.timeout.ms": 5000, "retries": 0})
    stop = threading.Event()
    sent = 0

    def loop() -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                p.produce(topic_name, value=b"%08d" % sent, key=b"%d" % (sent % 17),
                          on_delivery=acks_log)
                sent += 1
            except BufferError:
                p.poll(0.01)
                continue
            if sent % 64 == 0:
                p.poll(0)  # serve delivery reports while producing
                time.sleep(0.001)  # a steady stream, not one giant burst
        p.poll(0)

    producing = threading.Thread(target=loop, daemon=True)
    producing.start()
    wait_until(lambda: len(acks_log.snapshot()) >= 5000, timeout=60)
    broker.kill()  # mid-stream: requests in flight, batches half-written
    time.sleep(0.5)
    stop.set()
    producing.join(30)
    # Let every response already in the socket buffer be seen, then give up on the rest.
    p.flush(10)
    p.purge()
    p.flush(5)
    acked = acks_log.snapshot()
    assert len(acked) >= 5000
    assert sent > len(acked), "the kill did not interrupt the producer; the test proves little"

    restart(broker)
    stored = consume_all(broker, topic_name)
    assert_all_acked_present(acked, stored)
    total = sum(len(r) for r in stored.values())
    assert total <= sent, "more records stored than were ever sent"
    # Unacknowledged records may or may not be there; none may be invented or duplicated.
    sent_values = {b"%08d" % i for i in range(sent)}
    values = [v for records in stored.values() for _, v in records]
    assert set(values) <= sent_values
    assert len(values) == len(set(values)), "a record is stored twice"
