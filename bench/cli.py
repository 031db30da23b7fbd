"""`kipper bench …`: trace validation, synthesis, Spark replay and analysis, the mode comparison.

The heavy modules (pyspark, matplotlib) are imported inside the commands, so that `kipper
broker` does not pay for them at start-up.
"""

from __future__ import annotations

import argparse
import json
import time
import sys
from pathlib import Path

from bench.spark import DEFAULT_MASTER


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _validate(args: argparse.Namespace) -> int:
    from bench.trace import TraceError, validate_trace
    try:
        summary = validate_trace(args.trace)
    except TraceError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"{args.trace}: valid trace (schema v1): {summary.rows} requests, {summary.records} "
          f"records, {summary.bytes} bytes, {summary.producers} producers, "
          f"{summary.duration_s:.1f} s, topics {summary.topics}")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from bench.spark import spark_session
    from bench.synth import SynthParams, synthesize
    azs = tuple(args.azs.split(","))
    if args.omb:
        from bench.omb import OmbWorkloadError, read_workload
        try:
            workload = read_workload(args.omb)
        except OmbWorkloadError as e:
            print(e, file=sys.stderr)
            return 1
        params = workload.synth_params(args.duration, azs, args.seed)
        print(f"OMB workload {workload.name!r}: {workload.producers} producers, "
              f"{workload.topics} topics x {workload.partitions_per_topic} partitions, "
              f"{workload.producer_rate:g} msg/s of {workload.message_size} B "
              f"({workload.mb_per_s:.1f} MB/s), {params.duration_s:g} s")
        for field, value in workload.unmapped:
            print(f"  not replayed: {field}={value!r} (see bench/README.md)")
    else:
        params = SynthParams(producers=args.producers, topics=args.topics,
                             partitions=args.partitions, duration_s=args.duration or 60.0,
                             rate=args.rate, zipf_s=args.zipf, mean_records=args.mean_records,
                             azs=azs, seed=args.seed)
    summary = synthesize(spark_session(args.master), params, args.out)
    print(f"wrote {args.out}: {summary.rows} requests, {summary.records} records, "
          f"{summary.bytes} bytes over {summary.duration_s:.1f} s")
    return 0


def _replay(args: argparse.Namespace) -> int:
    from bench.replay import create_topics, replay
    from bench.spark import spark_session
    from bench.trace import validate_trace
    if args.create_topics:
        create_topics(args.bootstrap, validate_trace(args.trace).topics,
                      args.replication_factor, dict(args.topic_config))
    result = replay(spark_session(args.master), args.trace, args.bootstrap, args.out,
                    speedup=args.speedup, producer_config=dict(args.producer_config))
    print(json.dumps(result.as_dict(), indent=2))
    return 0 if result.failed == 0 and result.consumed == result.acked else 1


def _analyze(args: argparse.Namespace) -> int:
    from bench.analyze import analyze, headline
    from bench.spark import spark_session
    figures = analyze(spark_session(args.master), args.run)
    (args.run / "analysis.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(headline(figures), indent=2))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from bench.compare import FULL_RATES, CompareOptions, compare, compare_at_rates
    if args.netns and not args.master.startswith("local"):
        print("--netns runs the replay's clients inside the AZ namespaces of this machine: "
              "it needs a local Spark master", file=sys.stderr)
        return 2
    rates = FULL_RATES if args.full and not args.rates else args.rates
    if args.trace and (args.rate or rates):
        print("--rate, --rates and --full scale the synthetic trace; a given trace replays at "
              "its own rate (--speedup compresses it)", file=sys.stderr)
        return 2
    options = CompareOptions(
        trace=args.trace, modes=args.modes.split(","),
        peers=args.peer or (["tansu"] if args.full else []), out=args.out,
        speedup=args.speedup, master=args.master, quick=args.quick, rate_mb_s=args.rate,
        retention_hours=args.retention_hours, netns=args.netns, az_rtt_ms=args.az_rtt_ms)
    if not rates:
        return _print_compare(args.out, compare(options))
    started = time.monotonic()
    runs = compare_at_rates(options, rates)
    status = max(_print_compare(run, json.loads((run / "report.json").read_text()))
                 for run in runs)
    status = max(status, _cost_scale_runs(runs, args.out / "cost-scale", "classic"))
    print(f"{len(runs)} rates in {time.monotonic() - started:.0f} s")
    return status


def _print_compare(out: Path, report: dict) -> int:
    print(f"wrote {out / 'report.html'} and report.json in {report['wall_s']:.0f} s")
    for name, run in report["modes"].items():
        print(f"  {name}: {run['status']}")
    return 1 if any(run["status"].startswith("failed") for run in report["modes"].values()) else 0


def _report(args: argparse.Namespace) -> int:
    from bench.report import write_report
    report = json.loads((args.run / "report.json").read_text())
    write_report(report, args.run)
    print(f"wrote {args.run / 'report.html'}")
    return 0


def _cost_scale(args: argparse.Namespace) -> int:
    return _cost_scale_runs(args.run, args.out, args.baseline)


def _cost_scale_runs(runs: list[Path], out: Path, baseline: str) -> int:
    from bench.cost import load_prices
    from bench.cost_scale import (format_table, models_from_points, plot_cost_scale,
                                  points_from_report, scale_table)
    prices = load_prices()
    points = []
    for run in runs:
        path = run / "report.json"
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"{path}: cannot read a compare report: {e}", file=sys.stderr)
            return 1
        points += points_from_report(report, str(run), prices)
    if not points:
        print("no priced kipper mode in the given runs", file=sys.stderr)
        return 1
    models = models_from_points(points)
    table = scale_table(models, prices, baseline=baseline)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cost_scale.json").write_text(json.dumps(table, indent=1))
    plot = plot_cost_scale(models, table, prices, out / "cost_vs_throughput.png")
    print(format_table(table, list(models)))
    print(f"\nwrote {plot} and {out / 'cost_scale.json'}")
    return 0


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of MB/s: {text!r}") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"rates must be positive MB/s: {text!r}")
    return rates


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="produce traces, Spark replay, mode comparison")
    commands = bench.add_subparsers(dest="bench_command", required=True)

    validate = commands.add_parser("validate", help="check a trace file or directory")
    validate.add_argument("trace", type=Path)
    validate.set_defaults(func=_validate)

    synth = commands.add_parser("synth", help="generate a synthetic trace with Spark")
    synth.add_argument("--out", type=Path, required=True, help="trace file to write")
    synth.add_argument("--producers", type=int, default=12)
    synth.add_argument("--topics", type=int, default=2)
    synth.add_argument("--partitions", type=int, default=12, help="per topic")
    synth.add_argument("--omb", type=Path, metavar="WORKLOAD.yaml",
                       help="an OpenMessaging Benchmark workload file: its topics, partitions, "
                            "producers, rate and message size replace the options below")
    synth.add_argument("--duration", type=float,
                       help="seconds of trace (default 60, or the OMB workload's duration)")
    synth.add_argument("--rate", type=float, default=20.0,
                       help="mean produce requests/s per producer")
    synth.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent over partitions")
    synth.add_argument("--mean-records", type=float, default=4.0, help="records per request")
    synth.add_argument("--azs", default="az1,az2,az3")
    synth.add_argument("--seed", type=int, default=1)

    replay = commands.add_parser("replay", help="replay a trace against a running cluster")
    replay.add_argument("--trace", type=Path, required=True)
    replay.add_argument("--bootstrap", required=True)
    replay.add_argument("--out", type=Path, required=True, help="run directory for results")
    replay.add_argument("--speedup", type=float, default=1.0)
    replay.add_argument("--create-topics", action="store_true",
                        help="create the trace's topics first")
    replay.add_argument("--replication-factor", type=int, default=1)
    replay.add_argument("--topic-config", type=_key_value, action="append", default=[],
                        metavar="KEY=VALUE", help="config of created topics")
    replay.add_argument("--producer-config", type=_key_value, action="append", default=[],
                        metavar="KEY=VALUE", help="extra librdkafka producer setting")

    analyze = commands.add_parser("analyze", help="latency, throughput and errors of a replay")
    analyze.add_argument("--run", type=Path, required=True, help="a replay's run directory")

    compare = commands.add_parser("compare", help="one trace against every storage mode")
    compare.add_argument("--trace", type=Path, help="default: a synthetic trace")
    compare.add_argument("--modes", default="classic,active-tiered,diskless,shared")
    compare.add_argument("--peer", action="append", default=[], choices=["tansu"])
    compare.add_argument("--out", type=Path, default=Path("bench-report"))
    compare.add_argument("--speedup", type=float, default=1.0)
    compare.add_argument("--quick", action="store_true",
                         help="a small synthetic trace (20 s): the whole run in minutes")
    compare.add_argument("--rate", type=float, metavar="MB_S",
                         help="scale the synthetic trace's request rate to produce about MB_S")
    compare.add_argument("--rates", type=_rates, metavar="MB_S,MB_S,...",
                         help="one comparison per rate in OUT/<rate>-mb-s/, then "
                              "`bench cost-scale` over them in OUT/cost-scale/")
    compare.add_argument("--full", action="store_true",
                         help="the default 60 s trace at 1, 5 and 20 MB/s (or --rates) with "
                              "the Tansu peer, then cost-scale: about 30 min on 2 cores")
    compare.add_argument("--retention-hours", type=float, default=168.0,
                         help="how long produced data is kept, for the storage cost")
    compare.add_argument("--netns", action="store_true",
                         help="each AZ a network namespace (root, local Spark master): the "
                              "kernel's inter-AZ bytes reported next to kipper's")
    compare.add_argument("--az-rtt-ms", type=float, default=0.0,
                         help="with --netns: round trip added between AZs (default 0)")

    report = commands.add_parser("report", help="redraw report.html from a run's report.json")
    report.add_argument("--run", type=Path, required=True)

    cost_scale = commands.add_parser(
        "cost-scale", help="$/TB vs throughput per mode, extrapolated from compare runs")
    cost_scale.add_argument("--run", type=Path, action="append", required=True,
                            help="a `bench compare` output directory (repeat for runs at "
                                 "other rates: the fit uses them all)")
    cost_scale.add_argument("--out", type=Path, required=True,
                            help="where cost_vs_throughput.png and cost_scale.json go")
    cost_scale.add_argument("--baseline", default="classic",
                            help="the mode break-even throughputs are measured against")
    cost_scale.set_defaults(func=_cost_scale)

    for command in (synth, replay, analyze, compare):
        command.add_argument("--master", default=DEFAULT_MASTER,
                             help="Spark master (local[*], spark://host:7077)")
    for command, func in ((synth, _synth), (replay, _replay), (analyze, _analyze),
                          (compare, _compare), (report, _report)):
        command.set_defaults(func=func)
