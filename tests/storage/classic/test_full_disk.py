"""A broker whose data directory fills up (issue #14, "Full disk"), on a tmpfs of its own.

One broker, its data directory on a 64 MB tmpfs the test mounts (CI runs as root; elsewhere
the test is skipped, saying why). Real clients drive the sequence an operator meets:

1. an idempotent acks=all producer (confluent-kafka) writes until the broker refuses;
2. a plain producer (kafka-python) sees what the broker answers: KAFKA_STORAGE_ERROR;
3. a consumer group (aiokafka) finds its coordinator and commits on the full disk;
4. DeleteRecords (kafka-python's admin client) frees space;
5. the idempotent producer writes again, until the disk is full once more;
6. kill -9 and restart on the full disk: the broker is ready, and serves every acknowledged
   record that was not deleted (confluent-kafka), while produce is still refused.

Run with ``-s`` to see the figures of each step.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.clients import consume_all
from support.disks import free_bytes, tmpfs
from support.processes import BrokerProcess
from support.topics import create_topic, partition_metadata
from support.wait import wait_until

DISK_MB = 64
VALUE_BYTES = 8 << 10
SEGMENT_BYTES = 2 << 20
CHUNK = 64  # records produced between two flushes of the filling producer


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 MB tmpfs, unmounted at teardown."""
    with tmpfs(tmp_path / "disk", DISK_MB) as mount_point:
        yield mount_point


@dataclass
class Filled:
    acked: dict[int, bytes] = field(default_factory=dict)  # offset -> value
    refused: int = 0
    seconds: float = 0.0

    @property
    def acked_bytes(self) -> int:
        return sum(len(v) for v in self.acked.values())


def fill(bootstrap: str, topic: str, first: int) -> Filled:
    """Produce records "<first + i>" of VALUE_BYTES with an idempotent acks=all producer
    until a chunk of them is refused (the broker answers KAFKA_STORAGE_ERROR, which the
    client retries until message.timeout.ms)."""
    from confluent_kafka import Producer
    filled = Filled()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 3000})

    def delivered(error, message) -> None:
        if error is None:
            filled.acked[message.offset()] = message.value()
        else:
            filled.refused += 1

    started = time.monotonic()
    number = first
    while not filled.refused:
        for _ in range(CHUNK):
            value = f"{number:010d}".encode().ljust(VALUE_BYTES, b".")
            producer.produce(topic, value, partition=0, on_delivery=delivered)
            number += 1
        assert producer.flush(60) == 0
        assert time.monotonic() - started < 300, "the disk never filled"
    filled.seconds = time.monotonic() - started
    return filled


def produce_once(bootstrap: str, topic: str) -> str:
    """What the broker answers one record: "ok" or kafka-python's error name."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0,
                             enable_idempotence=False, max_block_ms=10_000)
    try:
        producer.send(topic, b"probe", partition=0).get(timeout=15)
        return "ok"
    except KafkaError as e:
        return type(e).__name__
    finally:
        producer.close(timeout=5)


def commit_offset(bootstrap: str, topic: str, group: str, offset: int) -> str:
    """FindCoordinator, OffsetCommit and OffsetFetch by aiokafka: the offset read back, or
    what failed."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def commit() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.commit({partition: offset})
            return await consumer.committed(partition)
        finally:
            await consumer.stop()

    try:
        return f"committed {asyncio.run(asyncio.wait_for(commit(), 30))}"
    except Exception as e:  # noqa: BLE001 - the answer is what this step reports
        return f"{type(e).__name__}: {e}"


def delete_records(bootstrap: str, topic: str, offset: int) -> str:
    """DeleteRecords by kafka-python's admin client: the new low watermark, or the error."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        result = admin.delete_records({TopicPartition(topic, 0): offset}, timeout_ms=15_000)
        return f"low watermark {result[TopicPartition(topic, 0)]['low_watermark']}"
    except Exception as e:  # noqa: BLE001 - the answer is what this step reports
        return f"{type(e).__name__}: {e}"
    finally:
        admin.close()


def test_full_disk_fill_free_refill_restart(small_disk: Path, topic_name: str) -> None:
    broker = BrokerProcess(small_disk)  # its log goes next to the mount point, not on it
    broker.start()
    steps: list[str] = []
    try:
        create_topic(broker.bootstrap, topic_name, config={"segment.bytes": str(SEGMENT_BYTES)})

        first = fill(broker.bootstrap, topic_name, 0)
        free_when_full = free_bytes(small_disk)
        steps.append(f"fill: {first.acked_bytes} bytes acknowledged ({len(first.acked)} "
                     f"records) in {first.seconds:.1f} s, then refused; {free_when_full} "
                     f"bytes left free")
        probe = produce_once(broker.bootstrap, topic_name)
        steps.append(f"produce on the full disk: {probe}")
        committed = commit_offset(broker.bootstrap, topic_name, f"g-{topic_name}", 7)
        steps.append(f"FindCoordinator + OffsetCommit on the full disk: {committed}")

        deleted_to = max(first.acked) // 2
        started = time.monotonic()
        deleted = delete_records(broker.bootstrap, topic_name, deleted_to)
        steps.append(f"DeleteRecords before {deleted_to}: {deleted} in "
                     f"{time.monotonic() - started:.2f} s; {free_bytes(small_disk)} bytes free")

        second = fill(broker.bootstrap, topic_name, len(first.acked) + 1_000_000)
        steps.append(f"produce again: {second.acked_bytes} bytes acknowledged "
                     f"({len(second.acked)} records) until full again")

        broker.kill()
        started = time.monotonic()
        try:
            broker.start(timeout=60)
            ready = time.monotonic() - started
            steps.append(f"kill -9, restart on the full disk: ready in {ready:.1f} s")
        except RuntimeError as e:
            steps.append(f"kill -9, restart on the full disk: not ready in 60 s ({e})")
            raise
        wait_until(lambda: (info := partition_metadata(broker.bootstrap, topic_name))
                   is not None and info.leader == 0, timeout=30, interval=0.2)
        expected = sorted(value for offset, value in {**first.acked, **second.acked}.items()
                          if offset >= deleted_to)
        read = consume_all(broker.bootstrap, topic_name, len(expected))
        steps.append(f"reads after the restart: {len(read)} of {len(expected)} acknowledged "
                     f"records, {time.monotonic() - started:.1f} s after the kill")
        probe_after = produce_once(broker.bootstrap, topic_name)
        steps.append(f"produce after the restart, still full: {probe_after}")
    finally:
        print("\nfull disk sequence:\n  " + "\n  ".join(steps))
        broker.stop()
        if broker.log_path is not None:
            floods = [line for line in broker.log_path.read_text(errors="replace").splitlines()
                      if "No space left" in line or "space is freed" in line]
            print(f"  broker log: {len(floods)} lines about the full disk")

    assert probe == "KafkaStorageError"
    assert committed == "committed 7"
    assert deleted == f"low watermark {deleted_to}"
    assert second.acked, "nothing could be produced after DeleteRecords"
    assert sorted(read) == expected
    assert probe_after == "KafkaStorageError"
    assert len(floods) <= 4, floods
