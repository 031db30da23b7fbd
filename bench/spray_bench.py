"""Idempotence under leaderless produce (digest §6 claim 12): one idempotent producer whose
consecutive batches of one diskless partition go to different brokers at once ("spray")
against all of them to one broker ("sticky", what kipper's metadata routing makes a Kafka
client do).

KIP-1150 lets any broker take a diskless partition's batches; offsets and the producer's
sequence checks happen later, at the batch coordinator, in the order the brokers' WAL
objects are committed. One InitProducerId, then Produce requests built with kipper's
protocol layer (``protocol.framing``, kio's schemas) over one connection per broker, with up
to ``--in-flight`` batches outstanding (Kafka's limit for an idempotent producer is 5), batch
i carrying sequence numbers from i x ``--records-per-batch``. A batch answered
OUT_OF_ORDER_SEQUENCE_NUMBER is sent again (lowest sequence first, to the next broker when
spraying), as a Kafka client retries it; every ``--duplicate-every``-th batch is sent a
second time once acknowledged (a client's retry after a lost answer), to another broker when
spraying: the coordinator must answer it with the first offsets, not write it again. Counted
per routing: OUT_OF_ORDER_SEQUENCE_NUMBER rejections (and their rate per batch sent), DUPLICATE_SEQUENCE_NUMBER
answers, retries deduplicated / written again / refused, records acknowledged, batches per second; then confluent-kafka reads
the partition back and the log is checked for duplicates, gaps and order.

    python -m bench.spray_bench                                  # ~1 minute
    python -m bench.spray_bench --batches 300 --json docs/findings/spray.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from bench.diskless_bench import DISKLESS, RACKS, create_topic
from bench.local_cluster import LocalCluster
from bench.run_json import write_run
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import decode_response, encode_request
from protocol.records import build_batch

PRODUCE_VERSION = 9
INIT_VERSION = 4
ROUTINGS = ("sticky", "spray")


def request(api_key: ApiKey, version: int, entity: str, /, **values):
    module = load_payload_module(api_key, version, EntityType.request)
    return make(getattr(module, entity), **values)


class Connection:
    """One broker connection with requests pipelined on it; answers come in request order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.waiting: dict[int, tuple[asyncio.Future, ApiKey, int]] = {}
        self.correlation = itertools.count(1)
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, address: str) -> "Connection":
        host, port = address.rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def call(self, api_key: ApiKey, version: int, body):
        correlation = next(self.correlation)
        answer = asyncio.get_running_loop().create_future()
        self.waiting[correlation] = (answer, api_key, version)
        self.writer.write(encode_request(api_key, version, correlation, "spray-bench", body))
        await self.writer.drain()
        return await answer

    async def _read(self) -> None:
        while True:
            size = int.from_bytes(await self.reader.readexactly(4), "big")
            frame = await self.reader.readexactly(size)
            correlation = int.from_bytes(frame[:4], "big")
            answer, api_key, version = self.waiting.pop(correlation)
            answer.set_result(decode_response(frame, api_key, version)[1])

    async def close(self) -> None:
        self.task.cancel()
        self.writer.close()


@dataclass
class SprayResult:
    routing: str
    brokers: int
    batches: int
    records_per_batch: int
    in_flight: int
    records_acked: int = 0
    sends: int = 0
    out_of_order_rejections: int = 0
    duplicate_sequence_answers: int = 0
    retries_sent: int = 0  # duplicates sent on purpose (--duplicate-every)
    retries_deduplicated: int = 0  # answered with the first offsets
    retries_written_again: int = 0  # answered with new offsets: a duplicate in the log
    # Answered OUT_OF_ORDER_SEQUENCE_NUMBER: the retry came after the producer's five newest
    # batches had moved past it (Kafka answers the same; the first copy is in the log).
    retries_refused: int = 0
    other_errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    # The log as a consumer reads it back (see check_log).
    log_records: int = 0
    log_duplicates: int = 0
    log_gaps: int = 0
    log_out_of_order: int = 0

    @property
    def rejection_rate(self) -> float:
        """OUT_OF_ORDER_SEQUENCE_NUMBER answers per first send or resend of a batch (the
        deliberate retries left out)."""
        sends = self.sends - self.retries_sent
        return self.out_of_order_rejections / sends if sends else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.wall_s if self.wall_s else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "rejection_rate": self.rejection_rate,
                "batches_per_s": self.batches_per_s}


@dataclass(frozen=True)
class LogCheck:
    records: int
    duplicates: int  # values read more than once
    gaps: int  # expected values never read
    out_of_order: int  # values read before one that precedes them


def check_log(values: list[int], expected: int) -> LogCheck:
    """What a consumer read of a partition the producer wrote values 0..expected-1 to, in
    order and once each: how far it is from that."""
    counts = Counter(values)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    gaps = sum(1 for v in range(expected) if v not in counts)
    first_seen = list(dict.fromkeys(values))
    out_of_order = sum(1 for a, b in zip(first_seen, first_seen[1:]) if b < a)
    return LogCheck(len(values), duplicates, gaps, out_of_order)


def broker_for(batch: int, attempt: int, brokers: int, routing: str) -> int:
    """Which broker a send goes to: sticky always the first (the producer's AZ); spray
    batch after batch round the brokers, and each resend to the next one."""
    return 0 if routing == "sticky" else (batch + attempt) % brokers


async def produce(addresses: list[str], topic: str, routing: str,
                  args: argparse.Namespace) -> SprayResult:
    result = SprayResult(routing, len(addresses), args.batches, args.records_per_batch,
                         args.in_flight)
    connections = [await Connection.open(address) for address in addresses]
    try:
        init = await connections[0].call(ApiKey.INIT_PRODUCER_ID, INIT_VERSION, request(
            ApiKey.INIT_PRODUCER_ID, INIT_VERSION, "InitProducerIdRequest", transactional_id=None,
            transaction_timeout=60_000, producer_id=-1, producer_epoch=-1))
        assert init.error_code == ErrorCode.none, init.error_code
        n = args.records_per_batch
        batches = [bytes(build_batch(
            [(None, str(i * n + k).encode()) for k in range(n)], int(time.time() * 1000),
            producer_id=init.producer_id, producer_epoch=init.producer_epoch,
            base_sequence=i * n)) for i in range(args.batches)]

        async def send(batch: int, attempt: int) -> tuple[ErrorCode, int]:
            result.sends += 1
            connection = connections[broker_for(batch, attempt, len(addresses), routing)]
            v = PRODUCE_VERSION
            response = await connection.call(ApiKey.PRODUCE, v, request(
                ApiKey.PRODUCE, v, "ProduceRequest", transactional_id=None, acks=-1,
                timeout=30_000, topic_data=(request(
                    ApiKey.PRODUCE, v, "TopicProduceData", name=topic, partition_data=(
                        request(ApiKey.PRODUCE, v, "PartitionProduceData", index=0,
                                records=batches[batch]),)),)))
            answer = response.responses[0].partition_responses[0]
            return answer.error_code, answer.base_offset

        acked: dict[int, int] = {}  # batch -> its base offset
        attempts: Counter = Counter()
        to_send = list(range(args.batches))  # lowest first
        running: dict[asyncio.Task, tuple[int, bool]] = {}  # task -> (batch, retry on purpose)
        started = time.monotonic()
        while to_send or running:
            while to_send and len(running) < args.in_flight:
                batch = to_send.pop(0)
                running[asyncio.create_task(send(batch, attempts[batch]))] = (batch, False)
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                batch, on_purpose = running.pop(task)
                error, offset = task.result()
                attempts[batch] += 1
                if on_purpose:
                    if error == ErrorCode.none and offset == acked[batch]:
                        result.retries_deduplicated += 1
                    elif error == ErrorCode.none:
                        result.retries_written_again += 1
                    elif error == ErrorCode.duplicate_sequence_number:
                        result.duplicate_sequence_answers += 1
                    elif error == ErrorCode.out_of_order_sequence_number:
                        result.retries_refused += 1
                    else:
                        result.other_errors[error.name] = result.other_errors.get(error.name, 0) + 1
                elif error == ErrorCode.none:
                    acked[batch] = offset
                    if args.duplicate_every and batch % args.duplicate_every == 0:
                        result.retries_sent += 1
                        running[asyncio.create_task(send(batch, attempts[batch]))] = (batch, True)
                else:
                    if error == ErrorCode.out_of_order_sequence_number:
                        result.out_of_order_rejections += 1
                    elif error == ErrorCode.duplicate_sequence_number:
                        result.duplicate_sequence_answers += 1
                    else:
                        result.other_errors[error.name] = result.other_errors.get(error.name, 0) + 1
                    to_send.append(batch)
                    to_send.sort()
                    await asyncio.sleep(args.retry_backoff_ms / 1000)
        result.wall_s = time.monotonic() - started
        result.records_acked = len(acked) * n
        return result
    finally:
        for connection in connections:
            await connection.close()


def read_back(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[int]:
    """The partition's values from offset 0, read by confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"spray-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "client.rack": RACKS[0]})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(int(message.value()))
        while (message := consumer.poll(1.0)) is not None:  # anything past the expected end
            if not message.error():
                values.append(int(message.value()))
    finally:
        consumer.close()
    return values


def run(cluster: LocalCluster, routing: str, args: argparse.Namespace) -> SprayResult:
    topic = f"spray-{routing}"
    create_topic(cluster.bootstrap, topic, 1, 3, DISKLESS)
    addresses = [cluster.broker(node)["address"] for node in range(len(RACKS))]
    result = asyncio.run(produce(addresses, topic, routing, args))
    expected = args.batches * args.records_per_batch
    check = check_log(read_back(cluster.bootstrap, topic, expected), expected)
    result.log_records, result.log_duplicates = check.records, check.duplicates
    result.log_gaps, result.log_out_of_order = check.gaps, check.out_of_order
    return result


def table(results: list[SprayResult]) -> str:
    rows = ["| routing | batches | Produce sent | OUT_OF_ORDER_SEQUENCE | rate | "
            "DUPLICATE_SEQUENCE | retries deduplicated / written again / refused | records acked | "
            "log: records, duplicates, gaps, out of order | batches/s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.routing} | {r.batches} | {r.sends} | {r.out_of_order_rejections} "
                    f"| {r.rejection_rate:.1%} | {r.duplicate_sequence_answers} "
                    f"| {r.retries_deduplicated} / {r.retries_written_again} / {r.retries_refused} "
                    f"| {r.records_acked} | {r.log_records}, {r.log_duplicates}, {r.log_gaps}, "
                    f"{r.log_out_of_order} | {r.batches_per_s:.1f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spray_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--records-per-batch", type=int, default=10)
    p.add_argument("--in-flight", type=int, default=5,
                   help="batches outstanding at once (Kafka's idempotent maximum: 5)")
    p.add_argument("--duplicate-every", type=int, default=10,
                   help="send every Nth batch again once acknowledged (0: never)")
    p.add_argument("--retry-backoff-ms", type=float, default=20)
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spray-bench-") as root:
        cluster = LocalCluster(Path(root) / "cluster", brokers=len(RACKS)).start()
        try:
            results = [run(cluster, routing, args) for routing in ROUTINGS]
        finally:
            cluster.stop()
    wall_s = time.monotonic() - started
    print(table(results))
    if args.json:
        write_run(args.json, args, wall_s, routings=[r.as_dict() for r in results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
