"""Transactions as real clients run them: a transactional-producer driver and read_committed /
read_uncommitted consumers per client (confluent-kafka, kafka-python, aiokafka, kafkajs), the
last stable offset as ListOffsets answers it, the transaction coordinator's node, and a
producer process that can be killed with its transaction open.

A scenario describes what to write as a list of ``Txn`` (values to partition 0 of topics, then
commit or abort); every driver runs such a plan the same way: init, then for each transaction
begin, send, wait for the acknowledgements (so an aborted transaction's records are in the log
for read_uncommitted consumers), commit or abort.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .js import JS_DIR
from .raw import call, connect, entity

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATIONS = (READ_COMMITTED, READ_UNCOMMITTED)
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kafkajs")

FIND_COORDINATOR = 10
TRANSACTION_KEY_TYPE = 1
# Once the expected records are in, how long a reader keeps polling for records that should
# not be there (an aborted one, a duplicate).
SETTLE_S = 1.0


@dataclass(frozen=True)
class Txn:
    """One transaction: values appended to partition 0 of each topic, then commit or abort."""

    writes: tuple[tuple[str, bytes], ...]
    commit: bool


def commit_abort_commit(topics: list[str], per_topic: int = 5, tag: str = "") -> list[Txn]:
    """Three transactions over ``topics``: committed, aborted, committed; values name their
    transaction and position (``c0-3``, ``a1-0``, ...), so an aborted one is recognisable."""
    plan = []
    for n, commit in enumerate((True, False, True)):
        kind = "c" if commit else "a"
        plan.append(Txn(tuple((topic, f"{tag}{kind}{n}-{i}".encode())
                              for i in range(per_topic) for topic in topics), commit))
    return plan


def values_of(plan: list[Txn], topic: str, committed_only: bool) -> list[bytes]:
    """What a consumer of ``topic`` must read, in order: the committed transactions' values
    (read_committed) or every value (read_uncommitted)."""
    return [value for txn in plan if txn.commit or not committed_only
            for written_topic, value in txn.writes if written_topic == topic]


def expected_reads(plan: list[Txn], topic: str) -> dict[str, list[bytes]]:
    return {READ_COMMITTED: values_of(plan, topic, True),
            READ_UNCOMMITTED: values_of(plan, topic, False)}


# --------------------------------------------------------------------------- confluent-kafka


def produce_confluent_kafka(bootstrap: str, transactional_id: str, plan: list[Txn]) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 2})
    producer.init_transactions(60)
    for txn in plan:
        producer.begin_transaction()
        for topic, value in txn.writes:
            producer.produce(topic, value, partition=0)
        assert producer.flush(60) == 0
        if txn.commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    producer.flush(10)


def read_confluent_kafka(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from .clients import consume_all
    return consume_all(bootstrap, topic, expected, config={"isolation.level": isolation})


# --------------------------------------------------------------------------- kafka-python


def produce_kafka_python(bootstrap: str, transactional_id: str, plan: list[Txn]) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                             linger_ms=2)
    try:
        producer.init_transactions()
        for txn in plan:
            producer.begin_transaction()
            for future in [producer.send(topic, value, partition=0) for topic, value in txn.writes]:
                future.get(60)
            if txn.commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(10)


def read_kafka_python(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values: list[bytes] = []
    try:
        _poll_until(lambda timeout: [record.value for records in consumer.poll(
            int(timeout * 1000)).values() for record in records], values, expected)
    finally:
        consumer.close()
    return values


def _poll_until(poll: Callable[[float], list[bytes]], values: list[bytes], expected: int,
                timeout: float = 60) -> None:
    """Poll into ``values`` until ``expected`` arrived, then for SETTLE_S more."""
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        values.extend(poll(0.5))
    settle_until = time.monotonic() + SETTLE_S
    while time.monotonic() < settle_until:
        values.extend(poll(0.2))


# --------------------------------------------------------------------------- aiokafka


def produce_aiokafka(bootstrap: str, transactional_id: str, plan: list[Txn]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    transactional_id=transactional_id, linger_ms=2)
        await producer.start()
        try:
            for txn in plan:
                await producer.begin_transaction()
                sends = [await producer.send(topic, value, partition=0)
                         for topic, value in txn.writes]
                await asyncio.gather(*sends)
                if txn.commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())


def read_aiokafka(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        values: list[bytes] = []
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)

            async def poll(timeout: float) -> list[bytes]:
                batches = await consumer.getmany(timeout_ms=int(timeout * 1000))
                return [record.value for records in batches.values() for record in records]
            deadline = time.monotonic() + 60
            while len(values) < expected and time.monotonic() < deadline:
                values.extend(await poll(0.5))
            settle_until = time.monotonic() + SETTLE_S
            while time.monotonic() < settle_until:
                values.extend(await poll(0.2))
        finally:
            await consumer.stop()
        return values

    return asyncio.run(run())


# --------------------------------------------------------------------------- kafkajs


def _run_kafkajs(args: list[str], timeout: float = 120) -> dict:
    """tests/js/transactions.mjs with ``args``; its JSON result (needs the ``kafkajs``
    fixture's npm install)."""
    proc = subprocess.run([shutil.which("node"), str(JS_DIR / "transactions.mjs"), *args],
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=timeout)
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, f"kafkajs exited {proc.returncode}:\n{stderr[-4000:]}"
    return json.loads(proc.stdout)


def produce_kafkajs(bootstrap: str, transactional_id: str, plan: list[Txn]) -> None:
    document = [{"commit": txn.commit,
                 "writes": [[topic, value.decode()] for topic, value in txn.writes]}
                for txn in plan]
    _run_kafkajs(["produce", "--bootstrap", bootstrap, "--transactional-id", transactional_id,
                  "--plan", json.dumps(document)])


def read_kafkajs(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    result = _run_kafkajs(["consume", "--bootstrap", bootstrap, "--topic", topic,
                           "--isolation", isolation, "--count", str(expected),
                           "--settle-ms", str(int(SETTLE_S * 1000))])
    return [value.encode() for value in result["values"]]


# --------------------------------------------------------------------------- per client


@dataclass(frozen=True)
class TransactionalClient:
    name: str
    produce: Callable[[str, str, list[Txn]], None]
    read: Callable[[str, str, str, int], list[bytes]]

    def read_both(self, bootstrap: str, topic: str,
                  expected: dict[str, list[bytes]]) -> dict[str, list[bytes]]:
        """What this client's consumers read of ``topic`` at each isolation level (both
        consumers at once: each waits for its records, then a settling time)."""
        with ThreadPoolExecutor(len(ISOLATIONS)) as readers:
            reads = {isolation: readers.submit(self.read, bootstrap, topic, isolation,
                                               len(expected[isolation]))
                     for isolation in ISOLATIONS}
            return {isolation: read.result() for isolation, read in reads.items()}


TRANSACTIONAL_CLIENTS = {
    "confluent-kafka": TransactionalClient("confluent-kafka", produce_confluent_kafka,
                                           read_confluent_kafka),
    "kafka-python": TransactionalClient("kafka-python", produce_kafka_python, read_kafka_python),
    "aiokafka": TransactionalClient("aiokafka", produce_aiokafka, read_aiokafka),
    "kafkajs": TransactionalClient("kafkajs", produce_kafkajs, read_kafkajs),
}


def transactional_client(name: str, request) -> TransactionalClient:
    """The client's driver; for kafkajs, after the ``kafkajs`` fixture installed its npm
    packages."""
    if name == "kafkajs":
        request.getfixturevalue("kafkajs")
    return TRANSACTIONAL_CLIENTS[name]


# --------------------------------------------------------------------------- offsets, nodes


def list_offset(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> int:
    """ListOffsets(latest) at ``isolation`` through confluent-kafka's admin client: the last
    stable offset for read_committed, the high watermark for read_uncommitted."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    level = (IsolationLevel.READ_COMMITTED if isolation == READ_COMMITTED
             else IsolationLevel.READ_UNCOMMITTED)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    key = TopicPartition(topic, partition)
    futures = admin.list_offsets({key: OffsetSpec.latest()}, isolation_level=level,
                                 request_timeout=30)
    return futures[key].result(30).offset


def end_offset_kafka_python(bootstrap: str, topic: str, isolation: str) -> int:
    """The same question through kafka-python's ``end_offsets`` of a consumer at
    ``isolation``."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    try:
        partition = TopicPartition(topic, 0)
        return consumer.end_offsets([partition])[partition]
    finally:
        consumer.close()


def transaction_coordinator(broker, transactional_id: str) -> int:
    """The node id FindCoordinator (key type transaction) names for ``transactional_id``,
    asked of ``broker`` (anything with a ``port``); -1 while none is available."""
    with connect(broker) as sock:
        response = call(sock, FIND_COORDINATOR, 4, entity(
            FIND_COORDINATOR, 4, "FindCoordinatorRequest", key_type=TRANSACTION_KEY_TYPE,
            coordinator_keys=(transactional_id,)))
    (coordinator,) = response.coordinators
    return coordinator.node_id if coordinator.error_code == 0 else -1


# --------------------------------------------------------------------------- hanging


class OpenTransactionProcess:
    """A confluent-kafka producer in a process of its own that opens a transaction, writes
    ``values`` to partition 0 of ``topic``, waits for their acknowledgements and then idles
    with the transaction open, until ``kill`` (kill -9: the coordinator must abort it once
    ``transaction_timeout_ms`` has passed)."""

    def __init__(self, bootstrap: str, transactional_id: str, topic: str, values: list[bytes],
                 transaction_timeout_ms: int) -> None:
        spec = json.dumps({"bootstrap": bootstrap, "transactional_id": transactional_id,
                           "topic": topic, "values": [v.decode() for v in values],
                           "transaction_timeout_ms": transaction_timeout_ms})
        tests_dir = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [tests_dir,
                                                            os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "support.transactions", spec],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True, env=env)
        line = self.proc.stdout.readline()
        assert line.strip() == "open", f"producer process said {line!r}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _hold_transaction_open(spec: dict) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": spec["bootstrap"],
                         "transactional.id": spec["transactional_id"],
                         "transaction.timeout.ms": spec["transaction_timeout_ms"]})
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in spec["values"]:
        producer.produce(spec["topic"], value.encode(), partition=0)
    assert producer.flush(60) == 0
    print("open", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    _hold_transaction_open(json.loads(sys.argv[1]))
