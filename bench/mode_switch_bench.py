"""What a live storage-mode switch (docs/mode-switch.md) costs writers: round trips
classic -> diskless -> classic of a topic under load on a `kipper cluster up` (3 brokers, RF=3).

Two writers run through every switch:
- a probe (kafka-python): acks=all, no retries, one record in flight at a time, so every
  refusal a broker answers reaches it (NOT_LEADER_OR_FOLLOWER while the partition is sealed). Per switch:
  how many of its records were refused, and the refused window, from its first refused send
  to the first send acknowledged after it;
- an idempotent acks=all producer with retries (what applications run): its longest wait
  between two acknowledgements across the switch, next to its longest outside any switch.
And the switch's own duration, from IncrementalAlterConfigs to the topic's mode described as
the new one, and how long the brokers kept the partitions sealed (refusing every append), from
their log lines: the longest over partitions and brokers.

    python -m bench.mode_switch_bench [--rounds 5] [--s3-latency-profile none]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

from bench.local_cluster import LocalCluster

MODE = "kipper.storage.mode"
QUIET_S = 2.0  # between switches: the writers' baseline


@dataclass
class ProbeSend:
    sent_at: float
    error: str | None = None  # the error's name
    answered_at: float | None = None


@dataclass(eq=False)  # a thread: hashed by identity
class Probe(threading.Thread):
    """kafka-python, acks=all, no retries, one record at a time: each refusal surfaces
    (librdkafka retries NOT_LEADER_OR_FOLLOWER after a metadata refresh even with
    retries=0, so it never shows one)."""

    bootstrap: str
    topic: str
    sends: list[ProbeSend] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError as PythonKafkaError
        producer = KafkaProducer(bootstrap_servers=self.bootstrap.split(","), acks="all",
                                 retries=0, max_in_flight_requests_per_connection=1,
                                 linger_ms=0, metadata_max_age_ms=1000)
        while not self.stopping.is_set():
            send = ProbeSend(time.monotonic())
            self.sends.append(send)
            try:
                producer.send(self.topic, b"probe", partition=0).get(30)
            except PythonKafkaError as e:
                send.error = type(e).__name__
                time.sleep(0.005)  # the client refreshes its metadata meanwhile
            send.answered_at = time.monotonic()
        producer.close(10)


@dataclass(eq=False)
class Writer(threading.Thread):
    """An idempotent acks=all producer; the time of every acknowledgement."""

    bootstrap: str
    topic: str
    acks: list[float] = field(default_factory=list)
    errors: list = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def _delivered(self, error, _message) -> None:
        if error is None:
            self.acks.append(time.monotonic())
        else:
            self.errors.append(error)

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "topic.metadata.refresh.interval.ms": 1000})
        while not self.stopping.is_set():
            producer.produce(self.topic, b"w" * 100, partition=1, on_delivery=self._delivered)
            producer.poll(0.002)
        producer.flush(60)

    def longest_gap(self, start: float, end: float) -> float:
        """The longest wait between two acknowledgements within [start, end]."""
        times = [start, *(t for t in self.acks if start <= t <= end), end]
        return max(b - a for a, b in zip(times, times[1:]))


@dataclass
class Switch:
    to: str
    started: float
    ended: float
    # Longest time a broker kept a partition sealed (its log line), in seconds.
    sealed_s: float = 0.0


# replication/storage_switch.py's line when a partition takes appends again.
SEALED_LINE = re.compile(r"(\S+)-(\d+) took appends again after ([0-9.]+) s sealed")


def refused_window(sends: list[ProbeSend], start: float, end: float) -> tuple[int, float]:
    """Refused probe records within [start, end], and the time from the first refused send
    to the first acknowledged send after it (0 without refusals)."""
    window = [s for s in sends if start <= s.sent_at <= end]
    refused = [s for s in window if s.error is not None]
    if not refused:
        return 0, 0.0
    first = refused[0].sent_at
    recovered = next((s.answered_at for s in window
                      if s.sent_at > refused[-1].sent_at and s.error is None), end)
    return len(refused), recovered - first


def switch(cluster: LocalCluster, admin: AdminClient, topic: str, mode: str) -> Switch:
    position = cluster.log_size()
    started = time.monotonic()
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(MODE, mode, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    describe = ConfigResource(ResourceType.TOPIC, topic)
    while admin.describe_configs([describe])[describe].result(30)[MODE].value != mode:
        time.sleep(0.02)
    ended = time.monotonic()
    time.sleep(0.5)  # every broker applied the last span and logged
    sealed = [float(m.group(3)) for m in SEALED_LINE.finditer(cluster.log_since(position))
              if m.group(1) == topic]
    return Switch(mode, started, ended, max(sealed, default=float("nan")))


def run(cluster: LocalCluster, rounds: int) -> None:
    bootstrap = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "mode-switch-bench"
    admin.create_topics([NewTopic(topic, 2, 3, config={MODE: "classic"})])[topic].result(30)
    time.sleep(2)
    probe, writer = Probe(bootstrap, topic), Writer(bootstrap, topic)
    probe.start()
    writer.start()
    time.sleep(QUIET_S)
    switches = []
    for _ in range(rounds):
        for mode in ("diskless", "classic"):
            switches.append(switch(cluster, admin, topic, mode))
            time.sleep(QUIET_S)
    probe.stopping.set()
    writer.stopping.set()
    probe.join(60)
    writer.join(60)

    print(f"{'switch':<22} {'duration s':>10} {'sealed s':>9} {'refused':>8} {'refused s':>10} "
          f"{'writer gap s':>13}")
    rows = []
    for number, s in enumerate(switches):
        # Refusals until the writers settled after the switch (half the quiet time).
        end = s.ended + QUIET_S / 2
        refused, refused_s = refused_window(probe.sends, s.started, end)
        gap = writer.longest_gap(s.started, end)
        rows.append((s.ended - s.started, s.sealed_s, refused_s, gap))
        print(f"{number + 1:>2} to {s.to:<17} {s.ended - s.started:>10.3f} {s.sealed_s:>9.3f} "
              f"{refused:>8} {refused_s:>10.3f} {gap:>13.3f}")
    quiet = [(a.ended + QUIET_S / 2, b.started) for a, b in zip(switches, switches[1:])]
    baseline = max(writer.longest_gap(start, end) for start, end in quiet)
    for name, index in (("switch duration", 0), ("sealed (writes refused)", 1),
                        ("probe's refused window", 2), ("writer gap", 3)):
        values = [row[index] for row in rows]
        print(f"{name}: median {statistics.median(values):.3f} s, max {max(values):.3f} s")
    print(f"writer's longest gap between switches (baseline): {baseline:.3f} s")
    sent = len(probe.sends)
    print(f"probe: {sent} records, {sum(s.error is not None for s in probe.sends)} refused "
          f"({', '.join(sorted({s.error for s in probe.sends if s.error}))}); "
          f"writer: {len(writer.acks)} acknowledged, {len(writer.errors)} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5,
                        help="classic -> diskless -> classic round trips")
    parser.add_argument("--s3-latency-profile", default="none")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kipper-mode-switch-") as root:
        cluster = LocalCluster(Path(root), extra_args=[
            "--s3-latency-profile", args.s3_latency_profile]).start()
        try:
            run(cluster, args.rounds)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
