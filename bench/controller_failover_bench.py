"""kill -9 cycles of a `kipper cluster up` (3 brokers, all controller quorum voters) under one
idempotent acks=all producer per storage mode, each to a topic of its mode: nothing
acknowledged lost or duplicated, every voter ends with the same metadata, and how long writes
stop per kill and mode.

Each cycle kills a random broker (recording whether it was the active controller), measures
how long until a new controller is active (its log line) and until every partition accepts
writes again (the longest gap between two acknowledgements of a partition around the kill),
then, once every partition took writes again, starts the broker again (`kipper cluster start-broker N`) and waits until every
partition is fully replicated again. At the end every acknowledged record is read back once
and the voters' metadata images are compared (a checksum of each, rebuilt from its log).

    python -m bench.controller_failover_bench [--cycles 50] [--modes classic,diskless]

tests/system/test_controller_quorum.py runs the same cycles, a few per mode.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kio.index import load_payload_module
from kio.static.constants import EntityType

from bench.local_cluster import LocalCluster
from coordinator.metadata_log import MetadataLog
from coordinator.state_machine import Applier
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import decode_response, encode_request
from replication.cluster_metadata import METADATA_TOPIC, MetadataImage

MODES = ("classic", "active-tiered", "diskless")
PARTITIONS = 6
VOTERS = 3
# Faster than kipper's 9 s default, as a deployment that wants quick failover sets it: the
# figures then show what else bounds a write stop.
CLUSTER_ENV = {"KIPPER_BROKER_SESSION_TIMEOUT_MS": "3000",
               "KIPPER_REPLICA_LAG_TIME_MAX_MS": "4000"}


# --- the quorum as a client sees it (DescribeQuorum) -------------------------------------

@dataclass(frozen=True)
class QuorumView:
    leader_id: int
    epoch: int
    high_watermark: int
    voter_offsets: dict[int, int]


def describe_quorum(address: str, timeout: float = 1.0) -> QuorumView | None:
    """DescribeQuorum v1 over a raw connection (no client library sends it); None if the
    node cannot answer or no leader is known."""
    request_module = load_payload_module(ApiKey.DESCRIBE_QUORUM, 1, EntityType.request)
    body = make(request_module.DescribeQuorumRequest, topics=(make(
        request_module.TopicData, topic_name=METADATA_TOPIC,
        partitions=(make(request_module.PartitionData, partition_index=0),)),))
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(encode_request(ApiKey.DESCRIBE_QUORUM, 1, 1, "failover-bench", body))
            size = int.from_bytes(_receive(sock, 4), "big")
            _, response = decode_response(_receive(sock, size), ApiKey.DESCRIBE_QUORUM, 1)
    except (OSError, ConnectionError):
        return None
    if response.error_code or not response.topics:
        return None
    partition = response.topics[0].partitions[0]
    if partition.error_code or partition.leader_id < 0:
        return None
    return QuorumView(partition.leader_id, partition.leader_epoch, partition.high_watermark,
                      {v.replica_id: v.log_end_offset for v in partition.current_voters})


def _receive(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def active_controller(cluster: LocalCluster, alive: set[int], timeout: float = 30.0,
                      not_in_epoch: int = -1) -> QuorumView:
    """The quorum as the live brokers report it, once it has a leader among them (of an
    epoch after ``not_in_epoch``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in sorted(alive):
            view = describe_quorum(cluster.broker(node)["address"])
            if view is not None and view.leader_id in alive and view.epoch > not_in_epoch:
                return view
        time.sleep(0.02)
    raise TimeoutError("no active controller")


# The line a controller logs when it becomes active (coordinator.controller).
_ACTIVE_LINE = re.compile(r"^\[broker-(\d+)\] (\S+ \S+) INFO coordinator\.controller: controller "
                          r"\d+ is active in epoch (\d+)")


def activated_at(cluster: LocalCluster, epoch: int, timeout: float = 10.0) -> float:
    """When (wall clock) the controller of ``epoch`` said it was active, from its log line:
    a client's question (DescribeQuorum) would add its own delays to the figure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in cluster.log_tail(400).splitlines():
            match = _ACTIVE_LINE.match(line)
            if match and int(match[3]) == epoch:
                stamp = datetime.datetime.strptime(match[2], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()
        time.sleep(0.1)
    raise TimeoutError(f"no controller said it was active in epoch {epoch}")


def voter_checksums(data_dir: Path, voters: int = VOTERS) -> dict[int, tuple[int, str]]:
    """Each voter's metadata image rebuilt from its own snapshot and log, up to the offset
    every voter's log reaches: (offset, checksum) per voter."""
    async def rebuild() -> dict[int, tuple[int, str]]:
        states = {}
        for node in range(voters):
            log = MetadataLog(data_dir / f"broker-{node}")
            try:
                states[node] = await log.load()
            finally:
                await log.log.close()
        common = min((s.snapshot.end_offset if s.snapshot else 0) + len(s.tail)
                     for s in states.values())
        result = {}
        for node, state in states.items():
            image = MetadataImage()
            applier = Applier(image)
            if state.snapshot is not None:
                applier.load_snapshot(state.snapshot.end_offset, state.snapshot_records)
            applier.apply((offset, record) for offset, record in state.tail if offset < common)
            result[node] = (image.next_offset, image.checksum())
        return result
    return asyncio.run(rebuild())


# --- the producer ------------------------------------------------------------------------

@dataclass
class Producing:
    """An idempotent acks=all producer sending numbered records round robin to the topic's
    partitions until stopped; what was acknowledged, and when, per partition."""

    bootstrap: str
    topic: str
    acked: dict[int, int] = field(default_factory=dict)  # value -> partition
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        from confluent_kafka import Producer
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Producing":
        self._thread.start()
        return self

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            value = sent
            try:
                self.producer.produce(self.topic, str(value).encode(), partition=value % PARTITIONS,
                                      on_delivery=lambda err, msg, v=value: self._delivered(v, err, msg))
                sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(120)

    def _delivered(self, value: int, error, message) -> None:
        if error is not None:
            self.errors[error.name()] += 1
            return
        self.acked[value] = message.partition()
        self.ack_times.setdefault(message.partition(), []).append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(180)

    def all_acked_since(self, moment: float) -> bool:
        return len(self.ack_times) == PARTITIONS and all(
            times[-1] > moment for times in self.ack_times.values())

    def write_stop_around(self, killed_at: float, window: float = 30.0,
                          partitions: set[int] | None = None) -> float:
        """The longest any partition (of ``partitions``, default all) went without an
        acknowledgement around ``killed_at``."""
        worst = 0.0
        for partition, times in self.ack_times.items():
            if partitions is not None and partition not in partitions:
                continue
            before = [t for t in times if t <= killed_at]
            after = [t for t in times if killed_at < t <= killed_at + window]
            series = before[-1:] + after
            gaps = [b - a for a, b in zip(series, series[1:])]
            worst = max([worst, *gaps])
        return worst


def _high_watermark(consumer, partition, timeout: float = 30.0) -> int:
    """A leader may move meanwhile (the preferred-leader election after a restart): the
    client is told NOT_LEADER until its metadata catches up, so it asks again."""
    from confluent_kafka import KafkaError, KafkaException
    moved = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(partition, max(1.0, deadline - time.monotonic()))[1]
        except KafkaException as error:
            if error.args[0].code() not in moved or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_back(bootstrap: str, topic: str) -> Counter:
    """Every record of the topic, by value (read_committed not needed: no transactions)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: _high_watermark(consumer, TopicPartition(topic, p)) for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: Counter = Counter()
        positions = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 120
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            seen[int(message.value())] += 1
            positions[message.partition()] = message.offset() + 1
        return seen
    finally:
        consumer.close()


# --- the cycles --------------------------------------------------------------------------

@dataclass(frozen=True)
class Kill:
    node: int
    was_controller: bool
    new_controller_after_s: float | None  # None: it was not the controller
    write_stop_s: float


@dataclass
class CycleResult:
    mode: str
    kills: list[Kill]
    acked: int
    lost: int
    duplicated: int
    producer_errors: dict[str, int]


def start_broker(cluster: LocalCluster, node: int) -> None:
    result = subprocess.run([sys.executable, "-m", "broker.cli", "cluster", "start-broker",
                             str(node), "--data-dir", str(cluster.root / "data")],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"start-broker {node}: {result.stderr}")
    fields = dict(pair.split("=", 1) for pair in result.stdout.split(": ", 1)[1].split())
    cluster.nodes[f"broker {node}"].update(fields)


def fully_replicated(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    partitions = metadata.topics[topic].partitions
    return len(partitions) == PARTITIONS and all(
        p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in partitions.values())


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - a client error while the cluster heals: ask again
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def run_cycles(cluster: LocalCluster, modes: Sequence[str], cycles: int, seed: int = 0
               ) -> list[CycleResult]:
    """``cycles`` kill -9s of random brokers of ``cluster`` under one producer per mode, each
    to a new topic of its mode: every kill is a kill under each mode's producer."""
    from confluent_kafka.admin import AdminClient, NewTopic
    rng = random.Random(seed)
    topics = {mode: f"failover-{mode}-{seed}" for mode in modes}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    created = admin.create_topics([NewTopic(topic, PARTITIONS, VOTERS, config={
        "kipper.storage.mode": mode, "min.insync.replicas": "2"}) for mode, topic in topics.items()])
    for future in created.values():
        future.result(30)

    def all_replicated() -> bool:
        return all(fully_replicated(cluster.bootstrap, topic) for topic in topics.values())

    wait_for(all_replicated, 60, "topics replicated")
    producing = {mode: Producing(cluster.bootstrap, topic).start()
                 for mode, topic in topics.items()}
    alive = set(range(VOTERS))
    kills: dict[str, list[Kill]] = {mode: [] for mode in modes}
    try:
        time.sleep(1.0)
        for _ in range(cycles):
            quorum = active_controller(cluster, alive)
            node = rng.choice(sorted(alive))
            killed_at, killed_at_wall = time.monotonic(), time.time()
            cluster.kill_broker(node)
            alive.discard(node)
            after = None
            if node == quorum.leader_id:
                new = active_controller(cluster, alive, 30, not_in_epoch=quorum.epoch)
                after = activated_at(cluster, new.epoch) - killed_at_wall
            # Until writes resumed on every partition (the figure measured), then start it.
            wait_for(lambda: all(p.all_acked_since(killed_at) for p in producing.values()), 60,
                     "writes resumed")
            start_broker(cluster, node)
            alive.add(node)
            wait_for(all_replicated, 90, "replicas back")
            for mode, producer in producing.items():
                kills[mode].append(Kill(node, node == quorum.leader_id, after,
                                        producer.write_stop_around(killed_at)))
            time.sleep(0.5)
    finally:
        for producer in producing.values():
            producer.stop()
    results = []
    for mode, producer in producing.items():
        seen = read_back(cluster.bootstrap, topics[mode])
        lost = sum(1 for value in producer.acked if seen[value] == 0)
        duplicated = sum(1 for count in seen.values() if count > 1)
        results.append(CycleResult(mode, kills[mode], len(producer.acked), lost, duplicated,
                                   dict(producer.errors)))
    return results


def summary(kills: list[Kill]) -> str:
    lines = []
    for label, chosen in (("controller", [k for k in kills if k.was_controller]),
                          ("other", [k for k in kills if not k.was_controller])):
        if not chosen:
            continue
        stops = [k.write_stop_s for k in chosen]
        line = (f"  {label}: {len(chosen)} kills, write stop median {statistics.median(stops):.2f} s"
                f" max {max(stops):.2f} s")
        elections = [k.new_controller_after_s for k in chosen if k.new_controller_after_s]
        if elections:
            line += (f"; new active controller after median {statistics.median(elections):.2f} s"
                     f" max {max(elections):.2f} s")
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="controller_failover_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=50,
                        help="kills, each under every mode's producer (default 50)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=VOTERS, env=CLUSTER_ENV).start()
        try:
            results = run_cycles(cluster, args.modes.split(","), args.cycles, args.seed)
        finally:
            cluster.stop()
        checksums = voter_checksums(Path(root) / "data")
    same = len({c for _, c in checksums.values()}) == 1
    print(f"voters' metadata {'identical' if same else 'DIFFERENT'} {checksums}")
    for result in results:
        print(f"{result.mode}: {result.acked} acknowledged, {result.lost} lost, "
              f"{result.duplicated} duplicated, producer errors {result.producer_errors}")
        print(summary(result.kills), flush=True)
    return int(not same or any(r.lost or r.duplicated for r in results))

if __name__ == "__main__":
    sys.exit(main())
