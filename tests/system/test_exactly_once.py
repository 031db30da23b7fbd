"""Exactly-once under kill -9: a consume-transform-produce loop (confluent-kafka; read_committed
input, transactional output, the input offsets committed in each transaction with
send_offsets_to_transaction) runs over a topic of records while the transaction coordinator's
broker, partition leaders and (diskless) the batch coordinator's broker are killed with SIGKILL
and restarted, in turn; afterwards every input record is in the output exactly once, in input
order per partition. In each storage mode and in a mixed-mode pipeline (input of one mode,
output of another), on one 3-broker cluster of this module's own.

CI size: KIPPER_EOS_RECORDS (default 3,000) records and KIPPER_EOS_ROUNDS (default 1) rounds of
kills per pipeline (a round kills each target once). The issue's full run:

    KIPPER_EOS_RECORDS=100000 KIPPER_EOS_ROUNDS=3 pytest tests/system/test_exactly_once.py -s
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from support.diskless import DisklessCluster
from support.processes import BrokerProcess
from support.topics import create_topic
from support.transactions import READ_COMMITTED, transaction_coordinator
from support.wait import wait_until

from replication.cluster_metadata import DISKLESS_METADATA_TOPIC

RECORDS = int(os.environ.get("KIPPER_EOS_RECORDS", "3000"))
ROUNDS = int(os.environ.get("KIPPER_EOS_ROUNDS", "1"))
PARTITIONS = 2
TXN_RECORDS = 200  # input records per transaction, at most
DOWN_S = 1.0  # how long a killed broker stays down
PIPELINE_TIMEOUT_S = 240 + RECORDS / 50
# The suite's per-test timeout is too short for the full run: the pipeline's own bound, plus
# setting up and reading the output.
pytestmark = [pytest.mark.system, pytest.mark.timeout(PIPELINE_TIMEOUT_S + 300)]
REPLICATION = {"classic": 3, "active-tiered": 3, "diskless": 1}
# name: (input mode, output mode)
PIPELINES = {"classic": ("classic", "classic"), "active-tiered": ("active-tiered", "active-tiered"),
             "diskless": ("diskless", "diskless"), "mixed": ("diskless", "active-tiered")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, s3_endpoint):
    cluster = DisklessCluster(tmp_path_factory.mktemp("exactly-once"), s3_endpoint).start()
    yield cluster
    cluster.stop()


def in_value(i: int) -> bytes:
    return b"in-%07d" % i


def transform(value: bytes) -> bytes:
    return b"out-" + value


def write_input(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, in_value(i), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(120) == 0


# librdkafka's send_offsets_to_transaction() can block past its timeout, forever, when the
# group coordinator's broker was dropped from Metadata while it was down (librdkafka issues
# #5456 and #5511, open in 2.16; Apache Kafka's Metadata leaves out fenced brokers too). The
# processor bounds the call itself and, like an application's watchdog, starts over.
CLIENT_CALL_S = 30
HUNG_AFTER_S = 45
COMMIT_ATTEMPTS = 3


class ClientHung(Exception):
    """A client call did not return within HUNG_AFTER_S, whatever its own timeout."""


def bounded(what: str, call: Callable[[], object]) -> object:
    """``call()`` (``what``) in a thread of its own, given up (left running) after
    HUNG_AFTER_S."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as e:  # re-raised in the caller
            outcome["error"] = e
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HUNG_AFTER_S)
    if thread.is_alive():
        raise ClientHung(f"{what} did not return in {HUNG_AFTER_S} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class Processor:
    """The consume-transform-produce loop of one transactional id. On an error that needs an
    abort it aborts and rewinds the consumer to the committed offsets; on a fatal one
    (fenced, or anything it cannot retry) or a client call that hangs, it starts over with a
    new producer and consumer, as an application restarted in its place would (the new
    producer fences the old one)."""

    def __init__(self, bootstrap: str, source: str, sink: str, txn_id: str) -> None:
        self.bootstrap, self.source, self.sink, self.txn_id = bootstrap, source, sink, txn_id
        self.group = f"eos-{txn_id}"
        self.committed = 0  # input records whose transaction committed
        # The next input offset to process, per partition: the committed offsets, moved on by
        # each transaction. (Not the consumer's position(): librdkafka answers -1001 for a
        # partition assigned at an offset until it hands out a message of it, so a partition
        # already at its end would count as -1001 records.)
        self.next_offsets: dict[int, int] = {}
        self.transactions = 0
        self.aborts = 0
        self.restarts = 0
        self.hung_calls = 0
        # What happened besides plain transactions (aborts, restarts, rewinds, consumer
        # errors), with the time since start: the failure message of a stuck pipeline.
        self.history: list[str] = []
        self._started = time.monotonic()
        self._open()

    def _note(self, event: str) -> None:
        self.history.append(f"{time.monotonic() - self._started:6.1f}s {event}")

    def _open(self) -> None:
        self.producer = Producer({"bootstrap.servers": self.bootstrap,
                                  "transactional.id": self.txn_id, "linger.ms": 5,
                                  "transaction.timeout.ms": 30_000,
                                  "metadata.max.age.ms": 2000,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.producer.init_transactions(60)
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                  "isolation.level": READ_COMMITTED,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "topic.metadata.refresh.interval.ms": 1000})
        self._rewind()

    def _rewind(self) -> None:
        """Assign every input partition at its committed offset (the beginning if none)."""
        partitions = [TopicPartition(self.source, p) for p in range(PARTITIONS)]
        committed = self.consumer.committed(partitions, timeout=60)
        self.next_offsets = {tp.partition: max(tp.offset, 0) for tp in committed}
        self.consumer.assign([TopicPartition(self.source, p, offset)
                              for p, offset in self.next_offsets.items()])
        self.committed = sum(self.next_offsets.values())
        self._note(f"rewound to {self.next_offsets}")

    def _restart(self) -> None:
        self.restarts += 1
        self.consumer.close()
        self._open()  # the old producer is dropped: a fenced one refuses even a flush

    def run(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.committed < RECORDS:
            assert time.monotonic() < deadline, (
                f"{self.committed}/{RECORDS} records after {timeout:.0f} s, "
                f"{self.transactions} transactions; " + "; ".join(self.history[-30:]))
            messages = []
            for message in self.consumer.consume(TXN_RECORDS, 0.5):
                if message.error():
                    self._note(f"consumer error {message.error()}")
                else:
                    messages.append(message)
            if not messages:
                continue
            try:
                self._transaction(messages)
            except ClientHung as e:
                self.hung_calls += 1
                self._note(f"restart: {e}")
                self._restart()
            except KafkaException as e:
                error = e.args[0]
                if error.txn_requires_abort():
                    self._note(f"abort: {error}")
                    self._abort()
                else:
                    self._note(f"restart: {error}")
                    self._restart()

    def _transaction(self, messages) -> None:
        self.producer.begin_transaction()
        next_offsets = dict(self.next_offsets)
        for message in messages:
            self.producer.produce(self.sink, transform(message.value()),
                                  partition=message.partition())
            next_offsets[message.partition()] = message.offset() + 1
        positions = [TopicPartition(self.source, p, offset) for p, offset in next_offsets.items()]
        group = self.consumer.consumer_group_metadata()
        bounded("send_offsets_to_transaction",
                lambda: self.producer.send_offsets_to_transaction(positions, group, CLIENT_CALL_S))
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                bounded("commit_transaction",
                        lambda: self.producer.commit_transaction(CLIENT_CALL_S))
                break
            except KafkaException as e:
                if not e.args[0].retriable() or attempt == COMMIT_ATTEMPTS - 1:
                    raise
                self._note(f"commit retried: {e.args[0]}")
        self.transactions += 1
        self.next_offsets = next_offsets
        self.committed = sum(next_offsets.values())

    def _abort(self) -> None:
        self.aborts += 1
        try:
            bounded("abort_transaction", lambda: self.producer.abort_transaction(CLIENT_CALL_S))
        except (KafkaException, ClientHung) as e:
            self._note(f"abort failed, restart: {e}")
            self._restart()
            return
        self._rewind()

    def close(self) -> None:
        self.consumer.close()


@dataclass(eq=False)  # a Thread must stay hashable
class Killer(threading.Thread):
    """Kills the targets in turn, each when the processor has committed its share of the
    input: target ``i`` of ``n`` at ``(i + 1) / (n + 1)`` of the records."""

    cluster: DisklessCluster
    targets: list[tuple[str, Callable[[], int]]]  # (what, its node id now)
    processor: Processor
    replication: dict[str, int]  # the pipeline's topics and their replication factors
    kills: list[tuple[str, int]] = field(default_factory=list)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        try:
            for i, (what, node_of) in enumerate(self.targets):
                threshold = RECORDS * (i + 1) / (len(self.targets) + 1)
                while self.processor.committed < threshold:
                    time.sleep(0.05)
                node = node_of()
                broker = self.broker(node)
                broker.kill()
                self.kills.append((what, node))
                time.sleep(DOWN_S)
                broker.start()
                self.wait_in_sync()
        except BaseException as e:  # reported by the test
            self.error = e

    def broker(self, node_id: int) -> BrokerProcess:
        return next(b for b in self.cluster.brokers if b.node_id == node_id)

    def wait_in_sync(self) -> None:
        """Before the next kill, every replica of the pipeline's topics is back in the ISR
        (so one kill never takes the last in-sync copy)."""
        def in_sync() -> bool:
            # (a diskless partition's ISR lists every broker that may serve it)
            return all(len(self.cluster.isr_of(topic, p)) >= factor
                       for topic, factor in self.replication.items() for p in range(PARTITIONS))
        wait_until(in_sync, 60, interval=0.5)


def read_output(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every committed record of every partition (read_committed), and anything that arrives
    within a further two seconds."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "isolation.level": READ_COMMITTED, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            messages = [m for m in consumer.consume(1000, 0.5) if not m.error()]
            for message in messages:
                found[message.partition()].append(message.value())
            if messages:
                quiet_since = time.monotonic()
            elif (sum(map(len, found.values())) >= RECORDS
                  and time.monotonic() - quiet_since > 2):
                break
    finally:
        consumer.close()
    return found


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_every_record_exactly_once_under_kill_9(pipeline, cluster, topic_name):
    source_mode, sink_mode = PIPELINES[pipeline]
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    replication = {source: REPLICATION[source_mode], sink: REPLICATION[sink_mode]}
    for topic, mode in ((source, source_mode), (sink, sink_mode)):
        create_topic(cluster.bootstrap, topic, PARTITIONS, replication[topic],
                     config={"kipper.storage.mode": mode}, in_sync=replication[topic] > 1)
    write_input(cluster.bootstrap, source)

    txn_id = f"eos-{topic_name}"

    def live_broker() -> BrokerProcess:
        return next(b for b in cluster.brokers if b.alive())

    def coordinator_node() -> int:
        return wait_until(lambda: (node := transaction_coordinator(live_broker(), txn_id)) >= 0
                          and node, 30)
    targets: list[tuple[str, Callable[[], int]]] = [
        ("transaction coordinator", coordinator_node),
        (f"leader of {sink}-0", lambda: cluster.leader_of(sink, 0)),
        (f"leader of {source}-1", lambda: cluster.leader_of(source, 1))]
    if "diskless" in (source_mode, sink_mode):
        targets.append(("batch coordinator", lambda: cluster.leader_of(DISKLESS_METADATA_TOPIC)))
    targets *= ROUNDS

    started = time.monotonic()
    processor = Processor(cluster.bootstrap, source, sink, txn_id)
    killer = Killer(cluster, targets, processor, replication)
    killer.start()
    try:
        processor.run(PIPELINE_TIMEOUT_S)
    finally:
        processor.close()
    killer.join(120)
    duration = time.monotonic() - started
    assert killer.error is None, killer.error
    assert len(killer.kills) == len(targets)

    output = read_output(cluster.bootstrap, sink)
    print(f"exactly-once {pipeline} ({source_mode} -> {sink_mode}): {RECORDS} records, "
          f"{len(killer.kills)} kills {killer.kills}, {processor.transactions} transactions "
          f"committed, {processor.aborts} aborted, {processor.restarts} restarts "
          f"({processor.hung_calls} after a client call hung), "
          f"{duration:.1f} s")
    counts = Counter(value for values in output.values() for value in values)
    duplicated = [value for value, n in counts.items() if n > 1]
    assert not duplicated, f"{len(duplicated)} records twice, e.g. {duplicated[:5]}"
    missing = [i for i in range(RECORDS) if transform(in_value(i)) not in counts]
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:5]}"
    for partition, values in output.items():
        assert values == [transform(in_value(i)) for i in range(partition, RECORDS, PARTITIONS)]
