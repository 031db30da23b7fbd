"""Stop and start of a `kipper cluster up` with many partitions: how long each takes.

Starts 3 brokers, creates topics of every storage mode (by default 2,000 partitions: classic
RF=3, active-tiered RF=3 and diskless), produces records to some partitions of each, then

* stops the cluster as Ctrl-C does (SIGTERM to the launcher) and times it, noting whether the
  launcher had to SIGKILL a broker;
* starts it again on the same data dir and times the bootstrap line, then how long until
  ListOffsets (confluent-kafka) answers on every partition, noting any broker fenced meanwhile;
* reads every partition back and checks that every acknowledged record is there.

    python -m bench.lifecycle_bench [--classic 1700 --active-tiered 150 --diskless 150]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.local_cluster import LocalCluster

PARTITIONS_PER_TOPIC = 100
# What the launcher and the controller log when something went wrong (broker.launcher,
# coordinator.controller).
SIGKILL_LINE = "ignored SIGTERM"
FENCED_LINE = "fencing broker"


@dataclass
class Topic:
    name: str
    mode: str
    partitions: int
    replication_factor: int


def mixed_topics(partitions_by_mode: dict[str, int]) -> list[Topic]:
    """Topics of at most PARTITIONS_PER_TOPIC partitions, that many partitions per mode (a
    diskless partition is served by every broker and names one replica)."""
    topics = []
    for mode, total in partitions_by_mode.items():
        replication_factor = 1 if mode == "diskless" else 3
        for index, start in enumerate(range(0, total, PARTITIONS_PER_TOPIC)):
            topics.append(Topic(f"{mode}-{index}", mode,
                                min(PARTITIONS_PER_TOPIC, total - start), replication_factor))
    return topics


def create_topics(bootstrap: str, topics: list[Topic]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(t.name, t.partitions, t.replication_factor,
                 config={"kipper.storage.mode": t.mode}) for t in topics], request_timeout=120)
    for future in futures.values():
        future.result(120)


def produce(bootstrap: str, topics: list[Topic], partitions_per_topic: int,
            records_per_partition: int) -> dict[tuple[str, int], list[bytes]]:
    """Idempotent acks=all records to the first partitions of every topic; the acknowledged
    values of each partition. (Every partition of 2,000 at once takes minutes on two cores:
    each follower fetch names every partition it follows, as kipper has no fetch sessions.)"""
    from confluent_kafka import Producer
    acked: dict[tuple[str, int], list[bytes]] = {}
    failures = []

    def delivered(error, message) -> None:
        if error is None:
            acked.setdefault((message.topic(), message.partition()), []).append(message.value())
        else:
            failures.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 20,
                         "message.timeout.ms": 120_000})
    for i in range(records_per_partition):
        for topic in topics:
            for partition in range(min(partitions_per_topic, topic.partitions)):
                value = f"{topic.name}-{partition}-{i}".encode()
                while True:
                    try:
                        producer.produce(topic.name, value, partition=partition,
                                         on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
    if producer.flush(120) or failures:
        raise RuntimeError(f"produce failed: {len(failures)} errors, e.g. {failures[:3]}")
    return acked


def list_offsets_failures(bootstrap: str, topics: list[Topic], timeout: float = 10
                          ) -> dict[tuple[str, int], str]:
    """Partitions whose ListOffsets (latest) fails, with the error of each."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    requests = {TopicPartition(t.name, p): OffsetSpec.latest()
                for t in topics for p in range(t.partitions)}
    failures = {}
    try:
        futures = admin.list_offsets(requests, request_timeout=timeout)
    except KafkaException as e:
        return {(t.name, p): str(e) for t in topics for p in range(t.partitions)}
    for partition, future in futures.items():
        try:
            future.result(timeout + 5)
        except KafkaException as e:
            failures[(partition.topic, partition.partition)] = str(e.args[0])
    return failures


def read_everything(bootstrap: str, acked: dict[tuple[str, int], list[bytes]],
                    timeout: float = 120) -> dict[tuple[str, int], list[bytes]]:
    """The acknowledged values not found in their partition."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lifecycle-check",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, partition, 0) for topic, partition in acked])
    missing = {key: set(values) for key, values in acked.items()}
    deadline = time.monotonic() + timeout
    try:
        while any(missing.values()) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if not message.error():
                    missing[(message.topic(), message.partition())].discard(message.value())
    finally:
        consumer.close()
    return {key: sorted(values) for key, values in missing.items() if values}


@dataclass
class StopFigures:
    seconds: float
    status: int | None
    killed: bool


def timed_stop(cluster: LocalCluster) -> StopFigures:
    """Ctrl-C of the launcher (SIGINT), timed until it has exited."""
    log_start = cluster.log_size()
    started = time.monotonic()
    status = cluster.terminate(sig=signal.SIGINT)
    seconds = time.monotonic() - started
    return StopFigures(seconds, status, SIGKILL_LINE in cluster.log_since(log_start))


@dataclass
class StartFigures:
    # From the launcher's start to its bootstrap line.
    bootstrap_s: float
    # From the launcher's start until ListOffsets answered on every partition.
    usable_s: float
    # Partitions whose ListOffsets failed right after the bootstrap line.
    failing_at_bootstrap: dict[tuple[str, int], str]
    fenced: list[str]


def timed_start(cluster: LocalCluster, topics: list[Topic], timeout: float = 120
                ) -> StartFigures:
    log_start = cluster.log_size()
    started = time.monotonic()
    cluster.start(timeout)
    bootstrap_s = time.monotonic() - started
    failing_at_bootstrap = failing = list_offsets_failures(cluster.bootstrap, topics)
    while failing and time.monotonic() - started < timeout:
        time.sleep(0.5)
        failing = list_offsets_failures(cluster.bootstrap, topics)
    usable_s = time.monotonic() - started
    if failing:
        raise RuntimeError(f"{len(failing)} partitions still fail ListOffsets after "
                           f"{timeout:.0f} s, e.g. {list(failing.items())[:3]}")
    fenced = [line for line in cluster.log_since(log_start).splitlines() if FENCED_LINE in line]
    return StartFigures(bootstrap_s, usable_s, failing_at_bootstrap, fenced)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lifecycle_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--classic", type=int, default=1700, help="classic partitions (RF=3)")
    parser.add_argument("--active-tiered", type=int, default=150,
                        help="active-tiered partitions (RF=3)")
    parser.add_argument("--diskless", type=int, default=150, help="diskless partitions")
    parser.add_argument("--produce-partitions", type=int, default=5,
                        help="partitions of each topic written to (default 5)")
    parser.add_argument("--records", type=int, default=20,
                        help="records per partition written to (default 20)")
    parser.add_argument("--root", type=Path, help="keep the cluster's data and log here")
    args = parser.parse_args(argv)
    topics = mixed_topics({"classic": args.classic, "active-tiered": args.active_tiered,
                           "diskless": args.diskless})
    partitions = sum(t.partitions for t in topics)
    with tempfile.TemporaryDirectory(prefix="kipper-lifecycle-bench-") as scratch:
        cluster = LocalCluster(args.root or Path(scratch), brokers=3)
        try:
            started = time.monotonic()
            cluster.start(120)
            print(f"first start: bootstrap after {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            create_topics(cluster.bootstrap, topics)
            print(f"created {len(topics)} topics, {partitions} partitions, in "
                  f"{time.monotonic() - started:.1f} s")
            started = time.monotonic()
            acked = produce(cluster.bootstrap, topics, args.produce_partitions, args.records)
            print(f"produced {sum(map(len, acked.values()))} records to {len(acked)} "
                  f"partitions in "
                  f"{time.monotonic() - started:.1f} s")
            stop = timed_stop(cluster)
            print(f"graceful stop: {stop.seconds:.1f} s (status {stop.status}, "
                  f"{'a broker was SIGKILLed' if stop.killed else 'no broker killed'})")
            cluster = LocalCluster(cluster.root, brokers=3)
            start = timed_start(cluster, topics)
            print(f"restart: bootstrap line after {start.bootstrap_s:.1f} s, "
                  f"ListOffsets failing on {len(start.failing_at_bootstrap)} of {partitions} "
                  f"partitions then; usable (every partition answers ListOffsets) after "
                  f"{start.usable_s:.1f} s; brokers fenced during start: {len(start.fenced)}")
            missing = read_everything(cluster.bootstrap, acked)
            print(f"after restart: {sum(map(len, missing.values()))} acknowledged records "
                  f"missing in {len(missing)} partitions")
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
