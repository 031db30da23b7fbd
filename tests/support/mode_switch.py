"""Live storage-mode switches (docs/mode-switch.md) driven and watched by real clients: the
switch by confluent-kafka's IncrementalAlterConfigs, a consumer-group member reading
continuously, and whole-partition reads by kafka-python."""

from __future__ import annotations

import threading
import time

from confluent_kafka.admin import AlterConfigOpType, ResourceType

from .configs import alter, describe
from .wait import wait_until

STORAGE_MODE = "kipper.storage.mode"


def storage_mode(bootstrap: str, topic: str) -> str:
    return describe(bootstrap, ResourceType.TOPIC, topic)[STORAGE_MODE].value


def start_switch(bootstrap: str, topic: str, mode: str, legacy: bool = False) -> None:
    """Ask for the switch, by confluent-kafka's IncrementalAlterConfigs (``legacy``:
    kafka-python's AlterConfigs, which sets every config of the topic); it goes on after
    the answer."""
    if not legacy:
        alter(bootstrap, ResourceType.TOPIC, topic,
              kipper_storage_mode=(AlterConfigOpType.SET, mode))
        return
    from kafka.admin import ConfigResource as PythonConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        # incremental=False: AlterConfigs; kafka-python knows no kipper config.
        result = admin.alter_configs([PythonConfigResource(
            ConfigResourceType.TOPIC, topic, configs={STORAGE_MODE: mode})],
            raise_on_unknown=False, incremental=False)
        assert result == {"topic": {topic: "OK"}}, result
    finally:
        admin.close()


def wait_switched(bootstrap: str, topic: str, mode: str, timeout: float = 60) -> None:
    """Until every partition has switched: the topic's mode is then ``mode``."""
    wait_until(lambda: storage_mode(bootstrap, topic) == mode, timeout, interval=0.1)


def switch(bootstrap: str, topic: str, mode: str, timeout: float = 60,
           legacy: bool = False) -> float:
    """Switch ``topic`` to ``mode`` and wait until it has; the seconds it took."""
    started = time.monotonic()
    start_switch(bootstrap, topic, mode, legacy)
    wait_switched(bootstrap, topic, mode, timeout)
    return time.monotonic() - started


class GroupReader(threading.Thread):
    """A confluent-kafka consumer-group member reading the topic continuously from its
    start, committing as it goes; keeps (offset, value) of every record it was given."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "auto.commit.interval.ms": 200,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.consumer.subscribe([topic])
        self.read: list[tuple[int, bytes]] = []
        self.errors: list = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                message = self.consumer.poll(0.2)
                if message is None:
                    continue
                if message.error():
                    self.errors.append(message.error())
                else:
                    self.read.append((message.offset(), message.value()))
        finally:
            self.consumer.close()

    def read_up_to(self, count: int, timeout: float = 60) -> None:
        wait_until(lambda: len(self.read) >= count, timeout, interval=0.1)

    def finish(self) -> None:
        self.stopping.set()
        self.join(30)


def read_all_kafka_python(bootstrap: str, topic: str, expected: int,
                          timeout: float = 60) -> list[tuple[int, bytes]]:
    """(offset, value) of partition 0 from its log start, by kafka-python."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=2000)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    read: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(read) < expected and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                read += [(record.offset, record.value) for record in records]
    finally:
        consumer.close()
    return read


def redelivered_once(read: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """What a consumer-group member read, each offset once: a member may be given records
    again after a rebalance (from its group's committed offset: Kafka's at-least-once), but
    never other values at an offset, nor a gap."""
    seen: dict[int, bytes] = {}
    for offset, value in read:
        assert offset <= len(seen), f"a gap: offset {offset} read after {len(seen) - 1}"
        assert seen.setdefault(offset, value) == value, f"offset {offset} read with two values"
    return sorted(seen.items())


def assert_contiguous_once_in_order(acked: list[tuple[float, int, bytes]],
                                    read: list[tuple[int, bytes]]) -> None:
    """Every acknowledged record read exactly once, at the offset it was acknowledged with,
    the offsets contiguous from 0 and the values (v<i> of one idempotent producer) in the
    order they were sent."""
    offsets = [offset for offset, _ in read]
    if offsets != list(range(len(read))):
        at = next(i for i, o in enumerate(offsets) if o != i)
        raise AssertionError(f"offsets not contiguous from 0: at {at} of {len(read)}: "
                             f"{read[max(at - 3, 0):at + 3]}")
    stored = dict(read)
    for _, offset, value in acked:
        assert stored.get(offset) == value, f"acked {value!r} at {offset}, read {stored.get(offset)!r}"
    sent_order = [int(value[1:]) for _, value in read]
    assert sent_order == sorted(sent_order), "records out of the order they were sent in"
    assert len(set(sent_order)) == len(sent_order), "a record stored twice"
