"""docs/findings.md: the 19 claims of the KIP threads (digest §6), each with kipper's measured
answer, the figure and the command that regenerates it.

Answers come from the JSON the runs write where they write JSON (the `compare` report, the
diskless sweep, the commit fan-out, diskless merge, tiered fallback, spray and mixed-broker
benches), and otherwise from the figures recorded in bench/README.md (quoted with the bench and
its date), or say why the claim is not measurable here. A run whose JSON is missing is reported
as not run, with its command.

    python -m bench.findings                     # rewrites docs/findings.md
    python -m bench.findings --out /tmp/f.md --compare other-run/report.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.diskless_sweep_bench import (
    ModelResult,
    SweepResult,
    model,
    model_table,
    table,
    verdicts,
)

REPO = Path(__file__).resolve().parents[1]
MB = 1e6

COMPARE_COMMAND = "python -m broker.cli bench compare --quick --peer tansu --out docs/bench-report"
SWEEP_COMMAND = ("python -m bench.diskless_sweep_bench --repeat 2 "
                 "--json docs/findings/diskless-sweep.json")
FANOUT_COMMAND = "python -m bench.commit_fanout_bench --json docs/findings/commit-fanout.json"
INTERVALS_COMMAND = ("python -m bench.tiered_interval_bench "
                     "--json docs/findings/tiered-intervals.json")
CACHE_COMMAND = "python -m bench.diskless_cache_bench --json docs/findings/diskless-cache.json"
FULL_COMMAND = "python -m broker.cli bench compare --full --out docs/bench-full"
MERGE_COMMAND = "python -m bench.diskless_merge_bench --json docs/findings/diskless-merge.json"
FALLBACK_COMMAND = ("python -m bench.tiered_fallback_bench "
                    "--json docs/findings/tiered-fallback.json")
SPRAY_COMMAND = "python -m bench.spray_bench --json docs/findings/spray.json"
MIXED_COMMAND = "python -m bench.mixed_broker_bench --json docs/findings/mixed-broker.json"
WIPE_COMMAND = "python -m pytest -n 0 tests/system/test_wiped_broker.py"
GENERATE_COMMAND = "python -m bench.findings"


@dataclass(frozen=True)
class RunFile:
    """A bench's JSON that claims are computed from: where it is kept and what writes it."""

    name: str
    path: str  # relative to the repository
    command: str
    what: str  # the bench, for "not run yet"


RUN_FILES = (
    RunFile("compare", "docs/bench-report/report.json", COMPARE_COMMAND, "`kipper bench compare`"),
    RunFile("sweep", "docs/findings/diskless-sweep.json", SWEEP_COMMAND,
            "bench/diskless_sweep_bench.py"),
    RunFile("fanout", "docs/findings/commit-fanout.json", FANOUT_COMMAND,
            "bench/commit_fanout_bench.py"),
    RunFile("cost_scale", "docs/bench-full/cost-scale/cost_scale.json", FULL_COMMAND,
            "`kipper bench compare --full`"),
    RunFile("intervals", "docs/findings/tiered-intervals.json", INTERVALS_COMMAND,
            "bench/tiered_interval_bench.py"),
    RunFile("cache", "docs/findings/diskless-cache.json", CACHE_COMMAND,
            "bench/diskless_cache_bench.py"),
    RunFile("merge", "docs/findings/diskless-merge.json", MERGE_COMMAND,
            "bench/diskless_merge_bench.py"),
    RunFile("fallback", "docs/findings/tiered-fallback.json", FALLBACK_COMMAND,
            "bench/tiered_fallback_bench.py"),
    RunFile("spray", "docs/findings/spray.json", SPRAY_COMMAND, "bench/spray_bench.py"),
    RunFile("mixed", "docs/findings/mixed-broker.json", MIXED_COMMAND,
            "bench/mixed_broker_bench.py"),
)
RUN_FILE = {run.name: run for run in RUN_FILES}


@dataclass(frozen=True)
class Runs:
    """The JSON of each run by RunFile name (absent: not run, or its file is missing), and
    where each was read, for the doc."""

    json: Mapping[str, dict] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> dict | None:
        return self.json.get(name)

    def source(self, name: str) -> str:
        return self.sources.get(name, f"`{RUN_FILE[name].path}`")


@dataclass(frozen=True)
class Finding:
    answer: str  # kipper's answer, one or two sentences
    figure: str  # the numbers behind it (markdown)
    command: str  # what regenerates the figure
    source: str  # the JSON it was computed from, or where the recorded figure is


@dataclass(frozen=True)
class Claim:
    number: int
    title: str
    claim: str
    finding: Callable[[Runs], Finding]


def recorded(answer: str, figure: str, command: str, where: str) -> Callable[[Runs], Finding]:
    """A figure from bench/README.md (its bench writes no JSON kept here)."""
    return lambda runs: Finding(answer, figure, command, f"recorded in {where}")


def not_measurable(why: str, command: str = "") -> Callable[[Runs], Finding]:
    return lambda runs: Finding(f"Not measurable here, because {why}", "", command, "")


def not_measured(why: str) -> Callable[[Runs], Finding]:
    """Measurable here, but no bench or test does it yet."""
    return lambda runs: Finding(f"Not measured yet: {why}", "", "", "")


def not_run(name: str) -> Finding:
    run = RUN_FILE[name]
    return Finding(f"Not run yet: {run.what} has no JSON here.", "", run.command, "")


# --- answers computed from the runs' JSON ------------------------------------------------------


def _modes(runs: Runs) -> dict[str, dict]:
    """The kipper modes the run measured (peers and failed modes have no produced bytes)."""
    return {name: mode for name, mode in runs.get("compare")["modes"].items()
            if isinstance(mode, dict) and mode.get("status") == "ok"
            and mode.get("produced_bytes") and isinstance(mode.get("cross_az"), dict)}


def _class_share(mode: dict, traffic_class: str) -> float:
    return mode["cross_az"]["bytes_by_class"].get(traffic_class, 0) / mode["produced_bytes"]


def _shares(runs: Runs, traffic_class: str) -> dict[str, float]:
    return {name: _class_share(mode, traffic_class) for name, mode in _modes(runs).items()}


def _cross_az_finding(runs: Runs, traffic_class: str, answer: str) -> Finding:
    """A claim about the cross-AZ bytes of one traffic class per produced byte, by mode."""
    if runs.get("compare") is None:
        return not_run("compare")
    shares = _shares(runs, traffic_class)
    figure = ", ".join(f"{name} {share:.3f}" for name, share in shares.items())
    return Finding(answer, f"cross-AZ {traffic_class} bytes per produced byte: {figure}",
                   COMPARE_COMMAND, f"computed from {runs.source('compare')}")


def cross_az_replication(runs: Runs) -> Finding:
    return _cross_az_finding(
        runs, "replication",
        "Confirmed: classic RF=3 replicates about 2x the produced bytes across AZs, "
        "active-tiered and diskless almost nothing (followers read object storage; "
        "diskless has no followers).")


def producer_cross_az(runs: Runs) -> Finding:
    return _cross_az_finding(
        runs, "produce",
        "Confirmed: diskless routes every producer to a broker of its AZ (0 produce bytes "
        "cross); classic and active-tiered send a producer's bytes to the leader wherever it "
        "is (about 2/3 with leaders spread over 3 AZs; the quick trace's hot partitions make "
        "it a little more).")


def request_economics(runs: Runs) -> Finding:
    if runs.get("compare") is None or not _modes(runs):
        return not_run("compare")
    parts = []
    for name, mode in _modes(runs).items():
        operations = mode.get("object_store", {}).get("by_operation", {})
        if not operations.get("PutObject"):
            continue
        produced_mb = mode["produced_bytes"] / MB
        per_tb = mode["cost"]["per_tb_produced"]["object_store_requests"]
        parts.append(f"{name}: {operations['PutObject'] / produced_mb:.2f} PUTs and "
                     f"{operations.get('GetObject', 0) / produced_mb:.2f} GETs per MB, "
                     f"${per_tb:.2f}/TB in requests")
    rate = next(iter(_modes(runs).values()))["throughput"]["mb_per_s"]
    figure = f"at {rate:.1f} MB/s (quick trace): " + "; ".join(parts)
    if runs.get("sweep") is not None:
        single = [c for c in runs.get("sweep")["cases"]
                  if c["profile"] == "s3-standard" and not c["hedged"]]
        figure += ("; diskless WAL PUTs per second per broker by commit interval: "
                   + ", ".join(f"{c['commit_interval_ms']} ms {c['puts_per_s_per_broker']:.2f}"
                               for c in single))
    return Finding(
        "Measured for combined multi-partition objects: diskless's PUTs are time-driven "
        "(one WAL object per commit interval per broker), so their cost per TB falls as "
        "1/throughput (measured at three rates: *Cost as a function of scale* below). One "
        "object per partition is not "
        "built, so that side of the comparison is not measured.",
        figure, f"{COMPARE_COMMAND}; {SWEEP_COMMAND}",
        f"computed from {runs.source('compare')}"
        + (f" and {runs.source('sweep')}" if runs.get("sweep") else ""))


def commit_fanout(runs: Runs) -> Finding:
    if runs.get("fanout") is None:
        return not_run("fanout")
    designs = {d["design"]: d for d in runs.get("fanout")["designs"]}
    grouped, naive = designs["per-broker grouping"], designs["per-partition fan-out"]
    figure = "; ".join(
        f"{d['design']}: {d['commit_rpcs_per_wal_file']:.2f} commit RPCs and "
        f"{d['appends_per_wal_file']:.2f} coordinator appends per WAL file "
        f"({d['wal_files']} files, {d['partitions']} partitions, produce P50/P99 "
        f"{d['p50_ms']:.0f}/{d['p99_ms']:.0f} ms)" for d in (grouped, naive))
    ratio = naive["commit_rpcs_per_wal_file"] / grouped["commit_rpcs_per_wal_file"]
    return Finding(
        f"Confirmed: per-broker grouping is one commit RPC per WAL file whatever the number "
        f"of partitions in it; the naive fan-out costs one per partition in the file "
        f"({ratio:.1f}x here). AZ representatives are not built (kipper's producers already "
        f"stay in their AZ), so the third design is not measured.",
        figure, FANOUT_COMMAND, f"computed from {runs.source('fanout')}")


def _merge_cases(runs: Runs) -> tuple[dict, dict]:
    cases = {case["merging"]: case for case in runs.get("merge")["cases"]}
    return cases[False], cases[True]


def metadata_growth(runs: Runs) -> Finding:
    if runs.get("merge") is None:
        return not_run("merge")
    plain, merged = _merge_cases(runs)
    # Per batch: the two runs' batch rates differ with the machine's load.
    ratio = merged["db_bytes_per_batch"] / plain["db_bytes_per_batch"]
    if ratio < 0.8:
        verdict = (f"Merging slows the coordinator's database growth to {ratio:.2f}x of "
                   f"the growth without it, per batch produced.")
    else:
        verdict = (f"Not in kipper: merging does not slow the coordinator's metadata growth "
                   f"(database bytes per batch produced {ratio:.2f}x of those without "
                   f"merging), because a merge "
                   f"repoints each batch's row to the merged object and keeps one row per "
                   f"batch; it only shrinks the objects table ({plain['samples'][-1]['objects']}"
                   f" objects at the end without merging, {merged['samples'][-1]['objects']} "
                   f"with).")
    logs = [c["growth_per_s"]["metadata_log_bytes"] / 1e3 for c in (plain, merged)]
    if logs[1] > logs[0]:
        verdict += (f" Its own records (one move per batch) make the coordinator log grow "
                    f"faster: {logs[1]:,.1f} against {logs[0]:,.1f} kB/s.")
    tables = plain["table_bytes"]
    requests_share = tables.get("requests", 0) / sum(tables.values())
    answer = (f"{verdict} {requests_share:.0%} of the database is the `requests` table, "
              f"every commit's answer kept for request-id retries; it was never trimmed "
              f"until this run showed it, and is now kept one hour (REQUEST_DEDUP_WINDOW_MS), "
              f"which a run this short does not reach. Growth is linear in batches: "
              f"{plain['db_bytes_per_batch']:,.0f} database bytes per batch against Jun's "
              f"100 B, so his scenario (100,000 partitions, 5 h, 250 ms) comes to about "
              f"{plain['jun_extrapolated_bytes'] / 1e9:,.0f} GB here (extrapolated, counting "
              f"every commit answer: an hour's are kept now, so about {1 - requests_share * 0.8:.0%}"
              f" of it; his estimate: 720 GB). Only removing batch rows bounds it: retention, or segment "
              f"assembly and tiered-storage offload (digest §2E), not built for diskless "
              f"topics.")
    settings = runs.get("merge")["settings"]
    tables = ", ".join(f"{name} {size / 1e6:.2f} MB"
                       for name, size in list(plain["table_bytes"].items())[:3])
    figure = (
        f"{settings['partitions']} partitions, {settings['rate']:g} records/s through one "
        f"broker, {plain['commit_interval_ms']} ms commits, {plain['produce_s']:.0f} s "
        f"sampled every {settings['sample_s']:g} s (profile {settings['profile']}); "
        + "; ".join(
            f"{c['name']}: {c['wal_files']} WAL files, {c['batches']} batches, "
            f"{c['merges']} merges of {c['merged_objects']} objects, database "
            f"+{c['growth_per_s']['db_bytes'] / 1e3:,.1f} kB/s "
            f"({c['db_bytes_per_batch']:,.0f} B per batch), coordinator log "
            f"+{c['growth_per_s']['metadata_log_bytes'] / 1e3:,.1f} kB/s"
            for c in (plain, merged))
        + f"; Jun's formula scaled to this run (100 B per partition per commit, "
        f"{plain['jun_scaled_entries']:,.0f} entries): {plain['jun_scaled_bytes'] / 1e6:,.2f} "
        f"MB, measured without merging {plain['batches']:,} batches and "
        f"{plain['growth_per_s']['db_bytes'] * plain['produce_s'] / 1e6:,.2f} MB; largest "
        f"tables without merging: "
        f"{tables}; extrapolated figures assume growth stays linear in batches")
    return Finding(answer, figure, MERGE_COMMAND, f"computed from {runs.source('merge')}")


def cold_read_cost(runs: Runs) -> Finding:
    if runs.get("merge") is None:
        return not_run("merge")
    plain, merged = _merge_cases(runs)
    before, after = plain["cold_read"], merged["cold_read"]
    gets = before["gets_per_partition"] / after["gets_per_partition"]
    per_partition = [(c["cold_read"]["seconds"] / len(c["cold_reads"])) for c in (plain, merged)]
    wrong = plain["wrong_records"] + merged["wrong_records"]
    answer = (
        f"Confirmed: reading a partition through a broker with a cold cache took "
        f"{before['gets_per_partition']:,.1f} GETs and {per_partition[0]:.1f} s from the small "
        f"WAL objects, {after['gets_per_partition']:,.1f} GETs and {per_partition[1]:.1f} s "
        f"after merging ({gets:.1f}x fewer GETs). kipper merges at most "
        f"{merged['merge_max_objects']} WAL objects into one and never merges merged objects "
        f"again, so a cold read still costs a GET per merged object (at best "
        f"1/{merged['merge_max_objects']} of the GETs without merging), which still grows "
        f"with the data kept. "
        + ("Every record read back matched what was acknowledged." if not wrong else
           f"{wrong} records read back did NOT match what was acknowledged."))
    figure = "; ".join(
        f"{c['name']}: {c['cold_read']['records']} records of {len(c['cold_reads'])} "
        f"partitions, {c['cold_read']['get_requests']} GETs, {c['cold_read']['seconds']:.1f} s"
        for c in (plain, merged)) + f" (profile {runs.get('merge')['settings']['profile']})"
    return Finding(answer, figure, MERGE_COMMAND, f"computed from {runs.source('merge')}")


def tiered_hop(runs: Runs) -> Finding:
    if runs.get("intervals") is None:
        return not_run("intervals")
    results = runs.get("intervals")["intervals"]
    # "replicated" runs from the references handed out to the followers' fetch past them:
    # the download is inside it.
    steps = [r["active_tiered"]["breakdown_mean_ms"] for r in results]
    rest = [step.get("put", 0) + step.get("publish", 0) + step.get("replicated", 0)
            for step in steps]
    dominant = next((r["interval_ms"] for r, step, other in zip(results, steps, rest)
                     if step.get("upload_wait", 0) > other), None)
    first, last = results[0], results[-1]
    answer = (
        f"Measured at {len(results)} upload intervals ({first['interval_ms']}-"
        f"{last['interval_ms']} ms): the wait for the upload grows with the interval "
        f"({steps[0].get('upload_wait', 0):.0f} to {steps[-1].get('upload_wait', 0):.0f} ms "
        f"mean); PUT, publish and the followers' replication round (download and next fetch) "
        f"add {min(rest):.0f}-{max(rest):.0f} ms at every interval"
        + (f", so the interval's wait is the larger part from {dominant} ms. "
           if dominant is not None else ", more than the interval's wait at every interval. ")
        + f"acks=all P50 goes from {first['active_tiered']['p50_ms']:.0f} to "
        f"{last['active_tiered']['p50_ms']:.0f} ms against classic's "
        f"{min(r['classic']['p50_ms'] for r in results):.0f}-"
        f"{max(r['classic']['p50_ms'] for r in results):.0f} ms. kipper has no separate "
        f"download interval: a follower learns of an object from its next fetch.")
    figure = "; ".join(
        f"{r['interval_ms']} ms: P50/P99 classic {r['classic']['p50_ms']:.1f}/"
        f"{r['classic']['p99_ms']:.1f}, active-tiered {r['active_tiered']['p50_ms']:.1f}/"
        f"{r['active_tiered']['p99_ms']:.1f} ms, steps "
        + ", ".join(f"{k} {v:.1f}" for k, v in r["active_tiered"]["breakdown_mean_ms"].items())
        for r in results)
    return Finding(answer, figure, INTERVALS_COMMAND,
                   f"computed from {runs.source('intervals')}")


def cache_effectiveness(runs: Runs) -> Finding:
    if runs.get("cache") is None:
        return not_run("cache")
    cases = {case["name"]: case for case in runs.get("cache")["cases"]}
    cached, uncached = cases["read cache"], cases["no cache"]
    groups = len(cached["groups"])
    later = sum(g["get_requests"] for g in cached["groups"][1:])
    total = [sum(g["get_requests"] for g in case["groups"]) for case in (cached, uncached)]
    wrong = sum(g["wrong"] for case in (cached, uncached) for g in case["groups"])
    answer = (
        f"Confirmed for the in-memory read cache: {groups} consumer groups read the same "
        f"diskless data through a broker that never held it; with the cache the first group "
        f"paid the GETs ({cached['gets_per_mb'][0]:.2f} per MB) and the {groups - 1} later "
        f"ones {later}, without it every group paid them again "
        f"({', '.join(f'{v:.2f}' for v in uncached['gets_per_mb'])} per MB): "
        f"{total[1] / total[0]:.1f}x the GETs for {groups} groups. A consumer in the writing "
        f"broker's AZ is served from what that broker cached on upload. Local "
        f"materialisation is not built in kipper, so that design is not measured. "
        + ("Every record read back as acknowledged." if not wrong else
           f"{wrong} records read back missing or wrong."))
    figure = "; ".join(
        f"{case['name']}: " + ", ".join(f"group {g['group']} {g['get_requests']} GETs in "
                                        f"{g['seconds']:.1f} s" for g in case["groups"])
        for case in (cached, uncached)) + (
        f" ({cached['produced_mb']:.0f} MB in {cached['partitions']} partitions); earlier, "
        "diskless_bench.py: consume through the writer's AZ (its cache) 300.9 MB/s, through "
        "another AZ (S3 GETs) 52.1 MB/s")
    return Finding(answer, figure, CACHE_COMMAND, f"computed from {runs.source('cache')}")


def lagging_follower_fallback(runs: Runs) -> Finding:
    if runs.get("fallback") is None:
        return not_run("fallback")
    phases = {p["name"]: p for p in runs.get("fallback")["phases"]}
    in_sync, behind = phases["in sync"], phases["behind the objects"]
    answer = (
        f"Confirmed: a follower that came back after the objects of its missing offsets were "
        f"deleted caught up from raw leader records "
        f"(kipper_active_tiered_fallback_bytes_total): {behind['fallback_per_missed']:.2f} "
        f"bytes per byte it missed, all of them cross-AZ replication to its AZ "
        f"({behind['to_follower_per_missed']:.2f} per byte missed), against "
        f"{in_sync['cross_az_per_produced']:.3f} cross-AZ replication bytes per produced "
        f"byte with every follower in sync.")
    mib = 1 << 20
    figure = "; ".join(
        f"{p['name']}: {p['produced_bytes'] / mib:.1f} MiB produced, "
        f"{p['missed_bytes'] / mib:.2f} MiB missed by the stopped follower, fallback "
        f"{p['fallback_bytes'] / mib:.2f} MiB, cross-AZ replication "
        f"{p['cross_az_replication_bytes'] / mib:.2f} MiB, {p['uploads']} objects uploaded"
        + (f", caught up {p['catch_up_s']:.1f} s after its restart"
           if p["catch_up_s"] is not None else "")
        for p in (in_sync, behind)) + (
        "; test: tests/storage/active_tiered/test_fallback.py::"
        "test_follower_behind_the_objects_falls_back_to_records")
    return Finding(answer, figure, FALLBACK_COMMAND, f"computed from {runs.source('fallback')}")


def leaderless_idempotence(runs: Runs) -> Finding:
    if runs.get("spray") is None:
        return not_run("spray")
    routings = {r["routing"]: r for r in runs.get("spray")["routings"]}
    sticky, spray = routings["sticky"], routings["spray"]
    figure = "; ".join(
        f"{r['routing']}: {r['out_of_order_rejections']} OUT_OF_ORDER_SEQUENCE answers to "
        f"{r['sends'] - r['retries_sent']} sends of {r['batches']} batches "
        f"({r['rejection_rate']:.1%}), {r['duplicate_sequence_answers']} DUPLICATE_SEQUENCE, "
        f"{r['records_acked']} records acknowledged at {r['batches_per_s']:.1f} batches/s; "
        f"deliberate retries {r['retries_deduplicated']} deduplicated, "
        f"{r['retries_refused']} refused, {r['retries_written_again']} written again; log read "
        f"back: {r['log_records']} records, {r['log_duplicates']} duplicates, {r['log_gaps']} "
        f"gaps, {r['log_out_of_order']} out of order" for r in (sticky, spray))
    intact = all(r["log_duplicates"] == r["log_gaps"] == r["log_out_of_order"]
                 == r["retries_written_again"] == 0 for r in (sticky, spray))
    refused = sum(r["retries_refused"] for r in (sticky, spray))
    log_state = ("the log ends with every record once and in order either way, and no retry "
                 "of an acknowledged batch was written again (they got their first offsets"
                 + (f"; {refused} that came after the producer's five newest batches got "
                    "OUT_OF_ORDER_SEQUENCE, as Kafka answers" if refused else "") + ")"
                 if intact else "but the log read back is NOT intact (see the figure)")
    return Finding(
        f"Confirmed: spraying one idempotent producer's consecutive batches over "
        f"{spray['brokers']} brokers gets {spray['rejection_rate']:.0%} of its sends refused "
        f"OUT_OF_ORDER_SEQUENCE (sticky: {sticky['rejection_rate']:.0%}), since the batch "
        f"coordinator checks sequences in the order the brokers' WAL files commit, and costs "
        f"{sticky['batches_per_s'] / spray['batches_per_s']:.1f}x the throughput in resends; "
        f"{log_state}. Kafka clients do not spray: metadata names one broker of their AZ.",
        figure, SPRAY_COMMAND, f"computed from {runs.source('spray')}")


def _median_of_rounds(cases: list[dict], case: str, key: str) -> float:
    return statistics.median(c[key] for c in cases if c["case"] == case)


def mixed_broker_durability(runs: Runs) -> Finding:
    if runs.get("mixed") is None:
        return not_run("mixed")
    cases = runs.get("mixed")["cases"]
    alone, mixed = "classic alone", "classic + diskless"
    keys = ("flush_lag_p50_ms", "flush_lag_p99_ms", "unflushed_max_records", "produce_p50_ms",
            "produce_p99_ms", "diskless_records")
    median = {case: {key: _median_of_rounds(cases, case, key) for key in keys}
              for case in (alone, mixed)}
    rounds = len(cases) // 2
    flush_ms, seconds = cases[0]["flush_ms"], cases[0]["seconds"]
    figure = "; ".join(
        f"{case} (median of {rounds} rounds): flush lag P50/P99 "
        f"{m['flush_lag_p50_ms']:.0f}/{m['flush_lag_p99_ms']:.0f} ms, at most "
        f"{m['unflushed_max_records']:.0f} acknowledged records unflushed, classic produce "
        f"P50/P99 {m['produce_p50_ms']:.0f}/{m['produce_p99_ms']:.0f} ms, diskless "
        f"{m['diskless_records'] / seconds:.0f} records/s" for case, m in median.items())
    figure += (f" (flush.ms={flush_ms}, 1 KiB records, load average "
               f"{min(c['load_average'] for c in cases):.0f}-"
               f"{max(c['load_average'] for c in cases):.0f} on 2 cores)")
    lag = median[mixed]["flush_lag_p99_ms"] / median[alone]["flush_lag_p99_ms"]
    latency = median[mixed]["produce_p50_ms"] / median[alone]["produce_p50_ms"]
    lag_words = ("is not stretched" if lag <= 1.25 else f"is stretched {lag:.1f}x")
    return Finding(
        f"Measured: with diskless produce on the same brokers the classic topic's flush lag "
        f"{lag_words} (P99 {lag:.2f}x; flush.ms bounds it: kipper writes no diskless data to "
        f"local disk), but its produce latency is {latency:.1f}x at the median: diskless "
        f"competes for the brokers' event loop and CPU, not for IOPS.",
        figure, MIXED_COMMAND, f"computed from {runs.source('mixed')}")


# --- the claims --------------------------------------------------------------------------------

CLAIMS = (
    Claim(1, "Cross-AZ replication bytes",
          "Leader-to-follower cross-AZ bytes are ~0 under KIP-1176 and Diskless and ~2x the "
          "produced bytes under classic RF=3.", cross_az_replication),
    Claim(2, "Producer cross-AZ bytes",
          "Diskless with AZ-local produce routing gives ~0; classic and KIP-1176 ~2/3 of "
          "produced bytes with producers spread over 3 AZs.", producer_cross_az),
    Claim(3, "acks=1 latency parity",
          "KIP-1176 leader-ack latency matches classic.",
          recorded("Confirmed: active-tiered acks=1 P50/P99 within 2 % of classic.",
                   "1,000 single-record requests each: classic 0.41 / 4.13 ms, active-tiered "
                   "0.42 / 4.03 ms (1.02x / 0.98x), 2026-11-21",
                   "python -m bench.tiered_bench", "bench/README.md, tiered_bench.py")),
    Claim(4, "acks=all cost of KIP-1176's extra hop",
          "Break the acks=all latency into upload, download and next fetch, and how it "
          "changes with the download interval.",
          tiered_hop),
    Claim(5, "Durability under Christo's scenarios",
          "No acked-record loss under acks=all when the leader is killed before upload; loss "
          "only in an ack-on-upload mode with the single-AZ store offline.",
          recorded("Confirmed for acks=all: no acknowledged record lost when the leader is "
                   "killed before its upload, nor across 50 kill -9 cycles in every mode. "
                   "kipper has no ack-on-upload mode, so the loss case is not reproduced.",
                   "tests/storage/active_tiered/test_durability.py (scenario 1: leader killed "
                   "before upload; scenario 2: bucket outage and leader loss); 50 kill -9 "
                   "cycles: classic 299,321 / active-tiered 279,000 / diskless 277,902 "
                   "acknowledged, 0 lost, 0 duplicated (2026-11-26)",
                   "python -m pytest -n 0 tests/storage/active_tiered/test_durability.py; "
                   "python -m bench.controller_failover_bench",
                   "bench/README.md, controller_failover_bench.py")),
    Claim(6, "Object-store request economics",
          "PUTs and GETs per MB and their $ as functions of upload batch size and interval, "
          "combined multi-partition objects versus one object per partition.",
          request_economics),
    Claim(7, "WAL metadata volume (KIP-1176)",
          "Metadata bytes and records per GB under each KIP-1176 scheme, ~100,000x "
          "per-segment metadata.",
          recorded("Confirmed in kind: metadata grows with objects x partitions, not bytes. "
                   "653-1,287x KIP-405's per-segment metadata at full speed (4 MiB objects), "
                   "20,437-38,816x paced at 1 MiB/s (100 ms objects); the thread's 100,000x is "
                   "the paced case at a lower per-partition rate.",
                   "per GB, full speed / paced: topic 314.5 / 9,141.5 KiB, fetch 377.1 / "
                   "11,371.9 KiB, memory 191.3 / 5,987.5 KiB (2026-11-21)",
                   "python -m bench.tiered_bench", "bench/README.md, tiered_bench.py")),
    Claim(8, "Commit RPCs per WAL file",
          "Naive per-partition fan-out versus per-broker grouping versus AZ representatives "
          "(<= (AZs - 1) + 1 expected).", commit_fanout),
    Claim(9, "Batch-coordinator metadata growth",
          "Growth over time with no merging versus with merging, against Jun's 720 GB "
          "formula scaled to the test.",
          metadata_growth),
    Claim(10, "Cold-read cost",
          "GETs and latency to rebuild a cache segment from many small WAL objects versus "
          "merged objects.",
          cold_read_cost),
    Claim(11, "Cache effectiveness",
          "Object-store GET rate for N consumer groups with no cache, a local in-memory "
          "cache and local materialisation.",
          cache_effectiveness),
    Claim(12, "Idempotence under leaderless produce",
          "OUT_OF_ORDER_SEQUENCE rejections when one producer sprays across brokers versus "
          "sticky AZ-local routing; duplicates deduplicated.",
          leaderless_idempotence),
    Claim(13, "Transactions on diskless topics",
          "read_committed never sees aborted data, LSO correct, markers at the right "
          "offsets, a transaction spanning classic and diskless is atomic.",
          recorded("Confirmed by tests in every mode; the cost: from 10 batches per "
                   "transaction diskless loses under 10 % of its idempotent throughput.",
                   "diskless records/s: idempotent 69, txn-1 34 (0.50x), txn-10 64 (0.92x), "
                   "txn-100 65 (0.95x); commit P50/P99 txn-1 10.0/24.0 ms (2026-11-23); tests "
                   "tests/system/test_transactions.py, test_exactly_once.py",
                   "python -m bench.txn_bench", "bench/README.md, txn_bench.py")),
    Claim(14, "WAL garbage collection",
          "Uncommitted, rejected and orphan bytes deleted after the grace period; no object "
          "with a live batch ever deleted.",
          recorded("Confirmed: aborted and fenced producers' WAL bytes all reclaimed once "
                   "their records were deleted; orphans (kill -9 between upload and commit) "
                   "collected; the coordinator refuses to delete a live object.",
                   "10 aborted transactions wrote 2,072,880 WAL bytes and 5 fenced zombies "
                   "26,659; GC deleted 2,099,461 bytes (2026-11-23); "
                   "tests/storage/diskless/test_faults.py, tests/coordinator/"
                   "test_control_plane_contract.py::test_objects_deleted_refuses_live_object_"
                   "and_late_commit_fails",
                   "python -m bench.txn_bench", "bench/README.md, txn_bench.py")),
    Claim(15, "Local segments are disposable cache",
          "After wiping a broker's disk its diskless partitions serve correct data from "
          "object storage and coordinator metadata only.",
          recorded("Confirmed, after two fixes: a broker killed with kill -9 and restarted on an "
                   "empty data directory serves every acknowledged record of its diskless "
                   "partitions, in order and once, to consumers that bootstrap from it alone, "
                   "from the WAL objects and the batch coordinator's state (restored from its "
                   "checkpoint and the log after it), and takes new idempotent produce; the "
                   "classic, active-tiered and shared topics of the same test recover too "
                   "(replicas fetched again, streams reopened). The test found two real "
                   "bugs, both fixed: a broker kept its producer-id block on its disk, so a "
                   "wiped broker handed out producer ids again (ids now come in blocks from "
                   "the controller, AllocateProducerIds, recorded in the metadata log); and a "
                   "client's Metadata request naming __diskless-metadata before the first "
                   "diskless commit auto-created it on one replica, tying every diskless "
                   "partition's metadata to one broker's disk (internal topics are no longer "
                   "auto-created).",
                   "tests/system/test_wiped_broker.py::test_a_wiped_broker_serves_every_"
                   "acknowledged_record_again: 3 brokers, per mode 300 records before the "
                   "wipe, 100 while it is down and 100 through it after; the wiped broker "
                   "restored the coordinator's checkpoint (offset 63) in 0.09 s and served the "
                   "diskless partition with 14 object GETs; every mode read whole through it "
                   "within 13 s of its restart; about 70 s (2026-11-26)",
                   WIPE_COMMAND, "bench/README.md, tests/system/test_wiped_broker.py")),
    Claim(16, "Lagging-follower fallback in KIP-1176",
          "A follower below the first tiered offset catches up from raw leader data; the "
          "fallback's cross-AZ bytes reported.",
          lagging_follower_fallback),
    Claim(17, "Online mode switch",
          "Classic to diskless and back mid-stream keeps offsets contiguous and consumers "
          "uninterrupted.",
          recorded("Partly: offsets stay contiguous and an idempotent confluent-kafka "
                   "producer and a group member go on without an error, but each partition "
                   "refuses appends (retriable NOT_LEADER_OR_FOLLOWER) for the few tenths of "
                   "a second it is sealed; kill -9 of its leader, the controller or the batch "
                   "coordinator mid-switch loses nothing.",
                   "ten classic<->diskless switches of a 2-partition RF=3 topic: appends "
                   "refused 0.30 s median (0.93 s max), whole switch 0.39 s median; with "
                   "s3-standard latency 0.37 s refused; the idempotent producer's longest "
                   "ack gap across a switch 0.56 s against 0.60 s between switches; "
                   "tests/system/test_mode_switch.py",
                   "python -m bench.mode_switch_bench --rounds 5",
                   "bench/README.md, mode_switch_bench.py")),
    Claim(18, "Mixed-broker durability",
          "Classic-topic flush lag / RPO with and without diskless cache materialisation on "
          "the same broker.",
          mixed_broker_durability),
    Claim(19, "Rack-aware consumption",
          "The rack-aware assignor keeps consumer fetch bytes within the AZ.",
          recorded("Confirmed: KIP-848 members in az1..az3 on a diskless topic fetched only "
                   "from their own AZ.",
                   "12,074 records consumed; consumer fetch bytes same-AZ 1,999,320, "
                   "cross-AZ 0 (0 in each of three runs)",
                   "python -m bench.consumer_protocol_bench",
                   "bench/README.md, consumer_protocol_bench.py")),
)


# --- the document ------------------------------------------------------------------------------


MODEL_SAMPLES = 20_000  # per cell: P99s within a few ms, the document in about a second
MODEL_GRID = [(profile, interval, hedged) for profile in ("s3-standard", "s3-express")
              for interval in (50, 100, 150, 250, 500) for hedged in (False, True)]


@functools.cache
def modelled() -> dict[tuple[str, int, bool], ModelResult]:
    """The model of every MODEL_GRID cell (seeded: the same every time)."""
    return {key: model(*key, samples=MODEL_SAMPLES) for key in MODEL_GRID}


def sweep_section(runs: Runs) -> list[str]:
    """The issue's latency-against-cost question: the sweep's measured table and verdicts,
    and what the latency profiles alone imply (the model, computed here)."""
    standard = [modelled()[("s3-standard", 250, hedged)] for hedged in (False, True)]
    express = modelled()[("s3-express", 250, False)]
    lines = [
        "## Diskless latency against its cost", "",
        "Target (issue #20): produce P99 <= 400 ms at one PUT per 250 ms per broker. What the "
        "latency profiles alone imply (model: buffer wait uniform over the interval plus the "
        "PUT; commit, broker and client time come on top): on S3 Standard the P99 at 250 ms "
        f"is {standard[0].p99_ms:.0f} ms with one PUT per object and "
        f"{standard[1].p99_ms:.0f} ms hedged at the PUT's P95, for "
        f"{standard[1].extra_put_share:.1%} more PUTs: **hedging does not reach the target**; "
        "the interval has to come down to about 150 ms (175 ms hedged), i.e. 1.4-1.7x the "
        f"PUTs, before commit time. On S3 Express the P99 at 250 ms is {express.p99_ms:.0f} "
        "ms without hedging: the target is met and hedging adds nothing.", "",
        model_table(list(modelled().values())), ""]
    if runs.get("sweep") is None:
        return lines + [f"Measured: not run yet (`{SWEEP_COMMAND}`).", ""]
    results = [SweepResult(**{k: v for k, v in case.items()
                              if k in SweepResult.__dataclass_fields__})
               for case in runs.get("sweep")["cases"]]
    shares = {}
    for r in results:
        if r.hedged:
            shares.setdefault(r.profile, []).append(r.extra_put_share)
    hedged_share = "; ".join(f"{profile} {min(v):.0%}-{max(v):.0%}"
                             for profile, v in shares.items())
    return lines + [
        f"Measured, computed from {runs.source('sweep')} (regenerate with `{SWEEP_COMMAND}`; read "
        "the load average column: on a shared 2-core machine the brokers' own CPU time "
        "dominates once it is loaded):", "",
        table(results), "", *(f"- {line}" for line in verdicts(results)),
        f"- Uploads hedged at the profile's P95 (the model's rate is 5 %): {hedged_share}. "
        "The broker's own PUT time comes on top of the profile's delay, so a trigger taken "
        "from the profile alone hedges far more often than 5 % wherever that time is not "
        "small against the P95 (all of S3 Express's 8 ms here); give "
        "`diskless_append_hedge_after_ms` in ms there.", ""]


OBJECT_CLASS_NAMES = {"s3_standard": "S3 Standard", "s3_express_one_zone": "S3 Express One Zone"}


def _break_even(value: float | None) -> str:
    if value is None:
        return "never"
    return "always" if value <= 1e-3 else f"{value:,.1f} MB/s"


def cost_scale_section(runs: Runs) -> list[str]:
    """The issue's cost-vs-throughput question: the measured points of the `--full` run, $/TB
    extrapolated from the model fitted through them, and the break-even throughputs."""
    lines = ["## Cost as a function of scale", ""]
    table = runs.get("cost_scale")
    if table is None:
        return lines + [f"Not run yet (`{FULL_COMMAND}`).", ""]
    baseline = table["baseline"]
    modes = list(dict.fromkeys(point["mode"] for point in table["measured"]))
    sources = list(dict.fromkeys(point["source"] for point in table["measured"]))
    lines += [
        f"Computed from {runs.source('cost_scale')} (regenerate with `{FULL_COMMAND}`; "
        "bench/README.md, *Cost as a function of scale*, explains the model). Measured: "
        "each mode's $/TB at the rate its run reached, objects priced in the class they were "
        "in:", "",
        "| mode | " + " | ".join(f"`{Path(source).name}` run" for source in sources) + " |",
        "|---|" + "---|" * len(sources)]
    for mode in modes:
        cells = {p["source"]: f"${p['usd_per_tb']:.2f} at {p['mb_per_s']:.1f} MB/s"
                 for p in table["measured"] if p["mode"] == mode}
        lines.append(f"| {mode} | " + " | ".join(cells.get(s, "-") for s in sources) + " |")
    lines += ["", f"**Extrapolated** break-even: the throughput per cluster (3 brokers) from "
              f"which a mode costs less per TB than {baseline}, by cross-AZ discount:", "",
              "| objects on | mode | " + " | ".join(
                  f"{float(d):.0%} discount" for d in next(iter(
                      next(iter(table["object_classes"].values()))["break_even_mb_per_s"]
                      .values()), {})) + " |"]
    lines.append("|---|---|" + "---|" * (lines[-1].count("|") - 3))
    for object_class, figures in table["object_classes"].items():
        for mode, by_discount in figures["break_even_mb_per_s"].items():
            lines.append(f"| {OBJECT_CLASS_NAMES.get(object_class, object_class)} | {mode} | "
                         + " | ".join(_break_even(v) for v in by_discount.values()) + " |")
    lines += ["", "**Extrapolated** $/TB at list cross-AZ prices:", "",
              "| objects on | MB/s | " + " | ".join(modes) + " |",
              "|---|---|" + "---|" * len(modes)]
    for object_class, figures in table["object_classes"].items():
        for row in figures["rows"]:
            if row["mb_per_s"] in (1, 10, 100, 1000):
                lines.append(f"| {OBJECT_CLASS_NAMES.get(object_class, object_class)} | "
                             f"{row['mb_per_s']:g} | "
                             + " | ".join(f"${row[m]:.2f}" for m in modes if m in row) + " |")
    return lines + [""]


def claims_table(runs: Runs) -> list[tuple[int, str, str, str]]:
    """(number, title, answer, source) per claim: the summary table of docs/findings.md and
    of `kipper bench compare`'s report.html."""
    return [(claim.number, claim.title, finding.answer, finding.source or "-")
            for claim, finding in ((claim, claim.finding(runs)) for claim in CLAIMS)]


def render(runs: Runs) -> str:
    findings = [(claim, claim.finding(runs)) for claim in CLAIMS]
    lines = [
        "# Findings: the KIP threads' claims, measured",
        "",
        "The 19 claims of the digest's §6 (`../shared/docs/kip-threads-digest.md`), each with "
        "kipper's answer, the figure and the command that regenerates it. Generated by "
        f"`{GENERATE_COMMAND}` (bench/findings.py) from the JSON of the runs where the bench "
        "writes JSON, otherwise from the figure recorded in bench/README.md. Figures were "
        "taken on a shared 2-core machine: read ratios within one run, not absolute values.",
        "",
        "| # | claim | answer | source |",
        "|---|---|---|---|",
    ]
    for number, title, answer, source in claims_table(runs):
        lines.append(f"| {number} | {title} | {answer} | {source} |")
    lines.append("")
    for claim, finding in findings:
        lines += [f"## {claim.number}. {claim.title}", "", f"*Claim:* {claim.claim}", "",
                  f"*Answer:* {finding.answer}", ""]
        if finding.figure:
            lines += [f"*Figure:* {finding.figure}", ""]
        if finding.source:
            lines += [f"*Source:* {finding.source}", ""]
        if finding.command:
            lines += [f"*Regenerate:* `{finding.command}`", ""]
    lines += sweep_section(runs)
    lines += cost_scale_section(runs)
    return "\n".join(lines)


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="findings", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for run in RUN_FILES:
        p.add_argument(f"--{run.name.replace('_', '-')}", type=Path, default=REPO / run.path,
                       help=f"the JSON of {run.what} (default {run.path})")
    p.add_argument("--out", type=Path, default=REPO / "docs/findings.md")
    args = p.parse_args(argv)
    paths = {run.name: getattr(args, run.name) for run in RUN_FILES}

    def shown(path: Path) -> str:
        return f"`{path.relative_to(REPO) if path.is_relative_to(REPO) else path}`"

    runs = Runs({name: run for name, path in paths.items() if (run := load(path)) is not None},
                {name: shown(path) for name, path in paths.items()})
    args.out.write_text(render(runs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
