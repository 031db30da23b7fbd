"""`kipper bench replay`: replay a trace with real producers on Spark, consumers alongside.

The driver picks a wall-clock instant for the trace's first request, then runs one Spark
job: the trace is hash-partitioned by producer (client id), so each task owns whole
producers, and a task sends its rows at ``start + (timestamp - first timestamp) / speedup``
through one confluent-kafka Producer per (client id, acks, codec), with ``az=<zone>`` in its
client.id. Each row becomes one result row: when it was due, sent and acknowledged, how many
records were acknowledged or failed. Every record's value starts with its send time (µs,
big-endian), which the consumers, one per AZ in driver threads with ``client.rack`` set,
subtract from the receive time: that is the end-to-end latency.

Outputs in the run directory: ``requests.parquet/`` (Spark's output, one row per trace row)
and ``e2e.parquet`` (one row per consumed record).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.trace import TraceSummary, trace_files, validate_trace, value_bytes

REQUESTS = "requests.parquet"
E2E = "e2e.parquet"
# Values are slices of one random pool at random offsets, so that records of a batch do not
# repeat each other (a codec would otherwise find the repeats and shrink "random" data).
PAYLOAD_POOL_BYTES = 4 << 20
SEND_TIME = struct.Struct(">q")
T = TypeVar("T")

REQUEST_FIELDS = [
    ("client_id", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("record_count", pa.int32()), ("bytes", pa.int64()), ("value_bytes", pa.int32()),
    ("compression", pa.string()), ("acks", pa.int8()), ("scheduled_us", pa.int64()),
    ("send_us", pa.int64()), ("ack_us", pa.int64()), ("acked", pa.int32()),
    ("errors", pa.int32()), ("error", pa.string()),
]
E2E_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64()), ("send_us", pa.int64()),
                        ("receive_us", pa.int64())])


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class ReplayPlan:
    """What every task needs to know; shipped to the tasks by Spark."""

    bootstrap: str
    trace_start_us: int
    start_at_us: int
    speedup: float = 1.0
    producer_config: tuple[tuple[str, str], ...] = ()
    flush_timeout_s: float = 120.0
    # AZ -> network namespace (`cluster up --netns`): a producer of that AZ runs inside it.
    netns: tuple[tuple[str, str], ...] = ()

    def due_us(self, timestamp_us: int) -> int:
        return self.start_at_us + int((timestamp_us - self.trace_start_us) / self.speedup)


class _Payloads:
    def __init__(self) -> None:
        self.pool = os.urandom(PAYLOAD_POOL_BYTES)
        self.zeros = bytes(PAYLOAD_POOL_BYTES)

    def value(self, size: int, compressed: bool) -> bytes:
        """A value of ``size`` bytes whose first 8 are the send time."""
        body = size - SEND_TIME.size
        random_part = body // 2 if compressed else body
        start = random.randrange(0, PAYLOAD_POOL_BYTES - random_part + 1)
        return b"".join((SEND_TIME.pack(now_us()), self.pool[start:start + random_part],
                         self.zeros[:body - random_part]))


@dataclass
class _Request:
    row: dict
    value_bytes: int
    scheduled_us: int
    send_us: int = 0
    ack_us: int = 0
    acked: int = 0
    errors: int = 0
    error: str | None = None

    def delivered(self, err, _msg) -> None:
        self.ack_us = max(self.ack_us, now_us())
        if err is None:
            self.acked += 1
        else:
            self.errors += 1
            self.error = self.error or str(err)

    def result(self) -> tuple:
        r = self.row
        return (r["client_id"], r["topic"], r["partition"], r["record_count"], r["bytes"],
                self.value_bytes, r["compression"], r["acks"], self.scheduled_us,
                self.send_us, self.ack_us, self.acked, self.errors, self.error)


def replay_rows(rows: Iterable, plan: ReplayPlan) -> Iterator[tuple]:
    """One Spark task: send ``rows`` (time-ordered) at their due times, yield result rows."""
    from confluent_kafka import Producer

    payloads = _Payloads()
    producers: dict[tuple, Producer] = {}
    requests: list[_Request] = []

    def producer_for(row: dict) -> Producer:
        key = (row["client_id"], row["acks"], row["compression"])
        if key not in producers:
            client_id = row["client_id"] + (f" az={row['client_az']}" if row["client_az"] else "")
            producers[key] = in_az_namespace(dict(plan.netns), row["client_az"], Producer, {
                "bootstrap.servers": plan.bootstrap, "client.id": client_id,
                "acks": str(row["acks"]), "compression.type": row["compression"],
                "enable.idempotence": False, **dict(plan.producer_config)})
        return producers[key]

    def poll_all() -> None:
        for producer in producers.values():
            producer.poll(0)

    for spark_row in rows:
        row = spark_row.asDict()
        producer = producer_for(row)
        request = _Request(row, value_bytes(row["bytes"], row["record_count"], row["compression"]),
                           plan.due_us(row["timestamp_us"]))
        requests.append(request)
        while (wait := request.scheduled_us - now_us()) > 0:
            poll_all()
            time.sleep(min(wait / 1e6, 0.002))
        request.send_us = now_us()
        compressed = row["compression"] != "none"
        for _ in range(row["record_count"]):
            value = payloads.value(request.value_bytes, compressed)
            while True:
                try:
                    producer.produce(row["topic"], value, partition=row["partition"],
                                     on_delivery=request.delivered)
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    producer.poll(0.05)
        poll_all()
    for producer in producers.values():
        producer.flush(plan.flush_timeout_s)
    for request in requests:
        yield request.result()


def in_az_namespace(netns: dict[str, str], az: str | None, make: Callable[..., T],
                    *args) -> T:
    """``make(*args)`` inside the AZ's network namespace if it has one, so the client it
    makes (and librdkafka's threads) talk from there; else here."""
    if az in netns:
        from broker.az_network import call_in
        return call_in(netns[az], make, *args)
    return make(*args)


@dataclass
class Consumers:
    """One consumer per AZ in driver threads; partition i is read from AZ i mod #AZs."""

    bootstrap: str
    topics: dict[str, int]
    azs: list[str]
    progress: Progress | None = None
    task_id: int | None = None
    netns: dict[str, str] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)
    _columns: list[list] = field(default_factory=lambda: [[] for _ in E2E_SCHEMA.names])
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _ready: list[threading.Event] = field(default_factory=list)

    def start(self) -> "Consumers":
        for index, az in enumerate(self.azs):
            ready = threading.Event()
            self._ready.append(ready)
            thread = threading.Thread(target=self._run, args=(index, az, ready), daemon=True)
            thread.start()
            self._threads.append(thread)
        for ready in self._ready:
            ready.wait(30)
        return self

    @property
    def consumed(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def _run(self, index: int, az: str, ready: threading.Event) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = in_az_namespace(self.netns, az, Consumer, {
            "bootstrap.servers": self.bootstrap, "group.id": f"bench-e2e-{az}",
            "client.id": f"bench-consumer az={az}", "client.rack": az,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            # librdkafka pauses fetching 1 s once its queue is full (see bench/README.md).
            "fetch.queue.backoff.ms": 10})
        # From the current end, read before any replayed record can arrive: the topics may
        # hold older data, and OFFSET_END would be resolved only at the first fetch.
        mine = [TopicPartition(topic, p) for topic, count in self.topics.items()
                for p in range(count) if p % len(self.azs) == index]
        for tp in mine:
            tp.offset = consumer.get_watermark_offsets(tp, timeout=30)[1]
        consumer.assign(mine)
        ready.set()
        columns: list[list] = [[] for _ in E2E_SCHEMA.names]
        try:
            while not self._stop.is_set():
                # poll returns as soon as one record is there (consume(n, t) would wait for
                # n records or t); then take whatever else is already queued, without waiting.
                first = consumer.poll(0.1)
                received = now_us()
                messages = [] if first is None else [first, *consumer.consume(1000, 0)]
                good = [m for m in messages if m.error() is None]
                for m in good:
                    for column, value in zip(columns, (
                            m.topic(), m.partition(), m.offset(),
                            SEND_TIME.unpack_from(m.value())[0], received)):
                        column.append(value)
                if good:
                    with self._lock:
                        self.counts[az] += len(good)
                    if self.progress is not None:
                        self.progress.update(self.task_id, advance=len(good))
        finally:
            consumer.close()
            with self._lock:
                for mine, column in zip(self._columns, columns):
                    mine.extend(column)

    def wait_for(self, expected: int, idle_timeout_s: float = 30.0) -> int:
        """Until ``expected`` records arrived, or nothing new came for ``idle_timeout_s``."""
        last, last_change = self.consumed, time.monotonic()
        while (seen := self.consumed) < expected:
            if seen != last:
                last, last_change = seen, time.monotonic()
            elif time.monotonic() - last_change > idle_timeout_s:
                break
            time.sleep(0.1)
        return self.consumed

    def stop(self) -> pa.Table:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        with self._lock:
            return pa.table(self._columns, schema=E2E_SCHEMA)


@dataclass
class ReplayResult:
    out: Path
    trace: TraceSummary
    produced: int  # records the producers sent
    acked: int
    failed: int
    consumed: int
    wall_s: float

    def as_dict(self) -> dict:
        return {"records_in_trace": self.trace.records, "records_sent": self.produced,
                "records_acked": self.acked, "records_failed": self.failed,
                "records_consumed": self.consumed, "replay_wall_s": round(self.wall_s, 2)}


def replay(spark, trace: Path, bootstrap: str, out: Path, *, speedup: float = 1.0,
           azs: list[str] | None = None, lead_s: float = 3.0,
           producer_config: dict[str, str] | None = None, show_progress: bool = True,
           label: str = "replay", netns: dict[str, str] | None = None) -> ReplayResult:
    """Replay ``trace`` against ``bootstrap`` (topics must exist); results under ``out``.
    With ``netns`` (AZ -> namespace, a local Spark master only) each client of an AZ runs
    inside that AZ's namespace."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (ByteType, IntegerType, LongType, StringType, StructField,
                                   StructType)

    summary = validate_trace(trace)
    out.mkdir(parents=True, exist_ok=True)
    reader = spark.read
    if Path(trace).is_dir():
        reader = reader.option("recursiveFileLookup", "true")
    rows = reader.parquet(*(str(f) for f in trace_files(trace)))
    tasks = max(1, min(summary.producers, spark.sparkContext.defaultParallelism))
    by_producer = (rows.repartition(tasks, "client_id").sortWithinPartitions("timestamp_us")
                   .persist())
    # Shuffle before the clock starts, so that the replay job's tasks only have to start.
    by_producer.count()
    plan = ReplayPlan(bootstrap, summary.start_us, now_us() + int(lead_s * 1e6), speedup,
                      tuple(sorted((producer_config or {}).items())),
                      netns=tuple(sorted((netns or {}).items())))
    spark_types = {pa.string(): StringType(), pa.int32(): IntegerType(), pa.int64(): LongType(),
                   pa.int8(): ByteType()}
    schema = StructType([StructField(name, spark_types[kind]) for name, kind in REQUEST_FIELDS])
    results = spark.createDataFrame(
        by_producer.rdd.mapPartitions(lambda part: replay_rows(part, plan)), schema)

    azs = azs or sorted({az for az in _trace_azs(trace) if az}) or ["az1"]
    started = time.monotonic()
    with Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("records consumed"), TimeElapsedColumn(),
                  disable=not show_progress) as progress:
        task_id = progress.add_task(label, total=summary.records)
        consumers = Consumers(bootstrap, summary.topics, azs, progress, task_id,
                              netns or {}).start()
        try:
            results.write.mode("overwrite").parquet(str(out / REQUESTS))
            totals = spark.read.parquet(str(out / REQUESTS)).agg(
                F.sum("record_count").alias("sent"), F.sum("acked").alias("acked"),
                F.sum("errors").alias("failed")).first()
            consumers.wait_for(totals["acked"])
        finally:
            e2e = consumers.stop()
            by_producer.unpersist()
    pq.write_table(e2e, out / E2E)
    return ReplayResult(out, summary, totals["sent"] or 0, totals["acked"] or 0,
                        totals["failed"] or 0, e2e.num_rows, time.monotonic() - started)


def _trace_azs(trace: Path) -> set[str]:
    return {az for f in trace_files(trace)
            for az in pq.read_table(f, columns=["client_az"])["client_az"].to_pylist()}


class TopicCreationError(RuntimeError):
    pass


def create_topics(bootstrap: str, topics: dict[str, int], replication_factor: int = 1,
                  config: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
    """Create the trace's topics and wait until every partition has a leader.

    Raises TopicCreationError with the broker's message when a topic is refused (an unknown
    ``kipper.storage.mode`` comes back as INVALID_CONFIG)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, count, replication_factor, config=config or {})
                                   for name, count in topics.items()],
                                  request_timeout=timeout_s)
    problem = None
    for name, future in futures.items():
        try:
            future.result(timeout_s + 5)
        except KafkaException as e:
            problem = f"{e.args[0].name()}: {e.args[0].str()}"
        except concurrent.futures.TimeoutError:
            problem = f"CreateTopics for {name} got no answer in {timeout_s:.0f} s"
    # Raised out here, so that no exception keeps this frame, and so the admin client and
    # its connections, alive after the caller has given up on the cluster.
    if problem is not None:
        raise TopicCreationError(problem)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10).topics
        if all(name in metadata and metadata[name].error is None
               and len(metadata[name].partitions) == count
               and all(p.leader >= 0 for p in metadata[name].partitions.values())
               for name, count in topics.items()):
            return
        time.sleep(0.2)
    raise TopicCreationError(f"topics {sorted(topics)} have no leaders after {timeout_s:.0f} s")
