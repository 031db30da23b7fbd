"""Consumer-group members as processes of real clients, and the scenario every client runs.

A member process prints ``assigned ...``, ``record <partition> <offset> <value>`` and
``closed`` lines (see group_member.py); ``Member`` collects them from a reader thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from typing import Protocol

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from .js import JS_DIR
from .topics import create_topic
from .wait import wait_until

HERE = Path(__file__).resolve().parent
PARTITIONS = 6
STEP_TIMEOUT = 60.0


class Member:
    def __init__(self, name: str, command: list[str], log_dir: Path, *,
                 announces_close: bool = True) -> None:
        self.name = name
        self.records: list[tuple[int, int, str]] = []
        self.assignment: list[int] | None = None
        # kcat prints no "assigned" or "closed" lines: its clean exit (status 0) says the same.
        self.announces = announces_close
        self.closed = not announces_close
        self.stopped = False
        self.stderr_path = log_dir / f"{name}.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                         stdin=subprocess.DEVNULL, text=True, cwd=HERE)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "record":
                partition, offset, value = rest.split(" ", 2)
                self.records.append((int(partition), int(offset), value))
            elif kind == "assigned":
                self.assignment = [int(p) for p in rest.split(",") if p]
            elif kind == "closed":
                self.closed = True

    def stop(self) -> None:
        """SIGTERM: the member closes its consumer (committing) and must exit cleanly.

        A member is signalled only once it has joined the group: before, its SIGTERM handler
        may not be installed yet (a loaded machine can take seconds to import a client), and
        the default action would kill it. Its partners may have consumed every record by then."""
        if self.announces:
            wait_until(lambda: self.assignment is not None or self.proc.poll() is not None,
                       STEP_TIMEOUT, 0.05)
        self.stopped = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STEP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(5)
        assert self.proc.returncode == 0 and self.closed, (
            f"{self.name} exited {self.proc.returncode}:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])


Spawn = Callable[[str], Member]


def python_member(client: str, bootstrap: str, topic: str, group: str, log_dir: Path,
                  rack: str | None = None) -> Spawn:
    """Members of ``client`` (group_member.py); with ``rack``, in that AZ (confluent-kafka)."""
    location = [] if rack is None else [rack]
    return lambda name: Member(name, [sys.executable, str(HERE / "group_member.py"), client,
                                      bootstrap, topic, group, name, *location], log_dir)


def kafkajs_member(bootstrap: str, topic: str, group: str, log_dir: Path) -> Spawn:
    node = shutil.which("node")
    assert node, "node is needed for the kafkajs tests (apt-get install nodejs npm)"
    return lambda name: Member(name, [node, str(JS_DIR / "group_member.mjs"), bootstrap, topic,
                                      group, name], log_dir)


def kcat_member(bootstrap: str, topic: str, group: str, log_dir: Path) -> Spawn:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is needed for this test (apt-get install kcat)"
    return lambda name: Member(name, [
        kcat, "-b", bootstrap, "-G", group, "-X", f"client.id={name}",
        "-X", "auto.offset.reset=earliest", "-X", "heartbeat.interval.ms=500",
        "-X", "session.timeout.ms=6000", "-f", "record %p %o %s\n", "-u", "-q", topic],
        log_dir, announces_close=False)


def produce(bootstrap: str, topic: str, values: range, partitions: int = PARTITIONS) -> None:
    """Records "v<i>", spread round-robin over the partitions."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failures = []
    for i in values:
        producer.produce(topic, f"v{i}".encode(), partition=i % partitions,
                         on_delivery=lambda err, _: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures


def values(members: list[Member]) -> Counter:
    return Counter(value for m in members for _, _, value in m.records)


def wait_for_values(members: list[Member], expected: set[str]) -> None:
    def done() -> bool:
        for m in members:
            assert m.stopped or m.proc.poll() is None, f"{m.name} died:\n{m.log_tail()}"
        return expected <= set(values(members))
    try:
        wait_until(done, STEP_TIMEOUT, 0.1)
    except TimeoutError:
        missing = sorted(expected - set(values(members)))
        raise AssertionError(f"{len(missing)} records never arrived, e.g. {missing[:5]}; "
                             + "; ".join(f"{m.name}: {m.log_tail(5)}" for m in members)) from None


def wait_for_assigned_members(bootstrap: str, group: str, count: int) -> None:
    """Wait until ``group`` is stable with ``count`` members, each assigned some partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def partitions(assignment) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in assignment.topic_partitions}

    def assigned() -> bool:
        try:
            description = admin.describe_consumer_groups([group])[group].result(10)
        except KafkaException:  # not known yet, or its coordinator is loading
            return False
        # A KIP-848 member also holds its target assignment: until it does, it may still
        # read a partition the coordinator has moved to another member.
        return (len(description.members) == count
                and all(m.assignment and m.assignment.topic_partitions
                        and (m.target_assignment is None
                             or partitions(m.assignment) == partitions(m.target_assignment))
                        for m in description.members))
    wait_until(assigned, STEP_TIMEOUT, 0.2)


def assert_exactly_once(members: list[Member], expected: set[str]) -> None:
    counts = values(members)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    assert not duplicates, f"delivered more than once: {sorted(duplicates.items())[:10]}"
    assert set(counts) == expected, f"unexpected: {sorted(set(counts) - expected)[:10]}"


def names(numbers: range) -> set[str]:
    return {f"v{i}" for i in numbers}


class Restartable(Protocol):
    """What the group scenario runs against and kills: one broker, or a whole cluster."""

    @property
    def bootstrap(self) -> str: ...

    def kill(self) -> None: ...

    def start(self) -> object: ...


def run_group_scenario(broker: Restartable, topic: str, spawn: Spawn,
                       replication_factor: int = 1, kill_broker: bool = True) -> None:
    """Three members share a 6-partition topic while a fourth joins and one leaves; every
    record arrives exactly once. Committed offsets then hold for a new set of members, and
    (``kill_broker``) after the broker (every broker of a cluster) is killed with SIGKILL and
    restarted."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS, replication_factor)
    produce(bootstrap, topic, range(0, 300))
    first = [spawn(f"member-{i}") for i in range(3)]
    wait_until(lambda: sum(len(m.records) for m in first) >= 100, STEP_TIMEOUT, 0.1)

    fourth = spawn("member-3")
    wait_until(lambda: fourth.assignment, STEP_TIMEOUT, 0.1)
    produce(bootstrap, topic, range(300, 600))
    first[1].stop()
    produce(bootstrap, topic, range(600, 900))
    everyone = first + [fourth]
    wait_for_values(everyone, names(range(900)))
    for m in first[:1] + first[2:] + [fourth]:
        m.stop()
    assert_exactly_once(everyone, names(range(900)))

    # Every member above committed on leaving: new members start where they stopped.
    produce(bootstrap, topic, range(900, 1000))
    second = [spawn("restarted-0"), spawn("restarted-1")]
    wait_for_values(second, names(range(900, 1000)))
    for m in second:
        m.stop()
    assert_exactly_once(second, names(range(900, 1000)))
    if not kill_broker:
        return

    broker.kill()
    broker.start()
    produce(bootstrap, topic, range(1000, 1100))
    third = [spawn("after-kill")]
    wait_for_values(third, names(range(1000, 1100)))
    third[0].stop()
    assert_exactly_once(third, names(range(1000, 1100)))
