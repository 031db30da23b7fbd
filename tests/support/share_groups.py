"""Share group members (KIP-932) as confluent-kafka ``ShareConsumer`` threads, and the
cluster the share-group scenarios run on.

``ShareCluster`` is three brokers (az1..az3) with object storage, so a topic of any storage
mode can be created on it (``kipper.storage.mode``), and with short share settings: locks
of LOCK_MS, DELIVERY_LIMIT deliveries, members removed after a few seconds of silence.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient

from .processes import Cluster
from .s3 import S3Endpoint
from .topics import create_topic

LOCK_MS = 3000
DELIVERY_LIMIT = 3
SHARE_ENV = {
    "KIPPER_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(LOCK_MS),
    "KIPPER_GROUP_SHARE_DELIVERY_COUNT_LIMIT": str(DELIVERY_LIMIT),
    "KIPPER_GROUP_SHARE_SESSION_TIMEOUT_MS": "6000",
    "KIPPER_GROUP_SHARE_HEARTBEAT_INTERVAL_MS": "500",
    # The scenarios produce first, then start their members.
    "KIPPER_GROUP_SHARE_AUTO_OFFSET_RESET": "earliest",
}


class ShareCluster(Cluster):
    def __init__(self, root: Path, s3: S3Endpoint) -> None:
        super().__init__(root, s3=s3, broker_env=SHARE_ENV,
                         broker_args=["--metrics-listener", "127.0.0.1:0"])

    def create_topic(self, name: str, mode: str, partitions: int = 2) -> None:
        """A topic of storage ``mode``: replicated on all three brokers unless diskless
        (whose partitions every broker serves from object storage)."""
        replication = 1 if mode == "diskless" else 3
        # After a scenario's kill -9 the restarted broker may not be back in the metadata.
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        assert wait_for(lambda: len(admin.list_topics(timeout=5).brokers) == len(self.brokers),
                        60), "a broker did not come back"
        create_topic(self.bootstrap, name, partitions, replication,
                     {"kipper.storage.mode": mode}, in_sync=replication > 1)

    def produce(self, topic: str, values: list[bytes], partitions: int = 2) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "linger.ms": 5})
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % partitions)
        assert producer.flush(30) == 0


@dataclass
class Delivery:
    value: bytes
    partition: int
    offset: int
    delivery_count: int


@dataclass
class ShareMember:
    """A ShareConsumer polling in a thread. With ``explicit`` acknowledgement, ``decide``
    says what to do with each record (ACCEPT / RELEASE / REJECT; to leave records to their
    locks' expiry, an implicit member may ``hold``); acknowledgements are committed with commit_sync, and ``accepted`` lists the
    records whose ACCEPT the broker confirmed (implicit mode: every record polled, accepted
    by the next poll)."""

    bootstrap: str
    group: str
    topic: str
    name: str = "member"
    rack: str | None = None
    explicit: bool = False
    decide: object = None
    # Stop polling after the first records (then never acknowledged: their locks expire).
    hold: bool = False
    deliveries: list[Delivery] = field(default_factory=list)
    accepted: list[Delivery] = field(default_factory=list)
    # Records whose acknowledgement failed at the client (its broker died meanwhile): the
    # broker may or may not have applied it before.
    unconfirmed: list[Delivery] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        config = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                  "client.id": self.name + (f",az={self.rack}" if self.rack else ""),
                  "max.poll.records": "20"}
        if self.rack:
            config["client.rack"] = self.rack
        if self.explicit:
            config["share.acknowledgement.mode"] = "explicit"
        self.consumer = ShareConsumer(config)
        self.consumer.subscribe([self.topic])
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._holding = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=self.name)

    def start(self) -> ShareMember:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._holding.is_set():
                time.sleep(0.05)
                continue
            try:
                messages = self.consumer.poll(0.5)
            except KafkaException as e:
                self.errors[str(e.args[0].name())] += 1
                continue
            polled, accepting = [], []
            for message in messages:
                if message.error() is not None:
                    self.errors[message.error().name()] += 1
                    continue
                delivery = Delivery(message.value(), message.partition(), message.offset(),
                                    message.delivery_count())
                polled.append(delivery)
                if self.explicit:
                    decision = self.decide(delivery)
                    self.consumer.acknowledge(message, decision)
                    if decision == AcknowledgeType.ACCEPT:
                        accepting.append(delivery)
            with self.lock:
                self.deliveries.extend(polled)
            if self.hold and polled:
                self._holding.set()
                continue
            if not self.explicit:
                with self.lock:  # accepted with the next poll
                    self.accepted.extend(polled)
            elif polled:
                try:
                    results = self.consumer.commit_sync(30)
                except KafkaException as e:
                    self.errors[str(e.args[0].name())] += 1
                    with self.lock:
                        self.unconfirmed.extend(accepting)
                    continue
                failed = {tp.partition for tp, error in results.items() if error is not None}
                if failed:
                    self.errors["ack-failed"] += len(failed)
                with self.lock:
                    self.accepted.extend(d for d in accepting if d.partition not in failed)
                    self.unconfirmed.extend(d for d in accepting if d.partition in failed)

    def values(self) -> list[bytes]:
        with self.lock:
            return [d.value for d in self.deliveries]

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


def wait_for(condition, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()
