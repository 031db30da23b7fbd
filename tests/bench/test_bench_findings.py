"""docs/findings.md's generator (bench/findings.py) on fixture runs: answers computed from the
runs' JSON, runs missing, every claim present once, and the command line."""

from __future__ import annotations

import json
import re

from bench.findings import CLAIMS, Runs, main, render
from bench.report import claim_rows


def compare_report() -> dict:
    """A `kipper bench compare` report.json cut to what the claims read."""
    def mode(produced, by_class, operations=None, requests_per_tb=0.0):
        return {"status": "ok", "produced_bytes": produced,
                "throughput": {"mb_per_s": 2.0},
                "cross_az": {"bytes_by_class": by_class},
                "object_store": {"by_operation": operations or {}},
                "cost": {"per_tb_produced": {"object_store_requests": requests_per_tb}}}
    return {"modes": {
        "classic": mode(40_000_000, {"produce": 26_000_000, "replication": 80_000_000}),
        "active-tiered": mode(40_000_000, {"produce": 28_000_000, "replication": 2_000_000},
                              {"PutObject": 400, "GetObject": 2000}, 18.6),
        "diskless": mode(40_000_000, {"diskless-coordinator": 3_000_000},
                         {"PutObject": 200, "GetObject": 1000}, 35.5),
        "tansu": {"status": "ok", "cross_az": "n/a", "cost": "n/a"},  # a peer: left out
        "shared": {"status": "failed: no answer"},
    }}


def sweep() -> dict:
    def case(interval, hedged, p99, uploads=120):
        hedged_puts = 12 if hedged else 0
        return {"profile": "s3-standard", "commit_interval_ms": interval, "hedged": hedged,
                "records": 3000, "errors": {}, "p50_ms": 250.0, "p99_ms": p99, "seconds": 10.0,
                "uploads": uploads, "hedged_puts": hedged_puts,
                "hedged_put_wins": 3 if hedged else 0, "brokers": 3,
                "puts_per_s_per_broker": (uploads + hedged_puts) / 10.0 / 3}
    return {"cases": [case(250, False, 480.0), case(250, True, 390.0),
                      case(500, False, 700.0, uploads=60)]}


def fanout() -> dict:
    def design(per_partition, rpcs, appends):
        return {"commit_per_partition": per_partition, "partitions": 30, "records": 3000,
                "errors": {}, "p50_ms": 280.0, "p99_ms": 600.0, "wal_files": 80,
                "batches": 2000, "commit_rpcs": rpcs, "coordinator_appends": appends,
                "design": "per-partition fan-out" if per_partition else "per-broker grouping",
                "commit_rpcs_per_wal_file": rpcs / 80, "appends_per_wal_file": appends / 80}
    return {"designs": [design(False, 80, 81), design(True, 1760, 1762)]}


def section(text: str, number: int) -> str:
    return re.search(rf"^## {number}\. .*?(?=^## )", text, re.S | re.M).group(0)


def test_answers_are_computed_from_the_runs_json():
    text = render(Runs({"compare": compare_report(), "sweep": sweep(), "fanout": fanout()},
                       {"compare": "`report.json`", "sweep": "`sweep.json`",
                        "fanout": "`fanout.json`"}))
    assert "classic 2.000, active-tiered 0.050, diskless 0.000" in section(text, 1)
    assert "classic 0.650, active-tiered 0.700, diskless 0.000" in section(text, 2)
    economics = section(text, 6)
    assert "diskless: 5.00 PUTs and 25.00 GETs per MB, $35.50/TB in requests" in economics
    assert "250 ms 4.00, 500 ms 2.00" in economics  # the sweep's unhedged PUTs per broker
    fan = section(text, 8)
    assert "per-broker grouping: 1.00 commit RPCs and 1.01 coordinator appends" in fan
    assert "per-partition fan-out: 22.00 commit RPCs and 22.02 coordinator appends" in fan
    assert "(22.0x here)" in fan and "computed from `fanout.json`" in fan
    # The sweep's table and the target verdict at 250 ms.
    assert "| s3-standard | 250 ms | yes | 3000 | 250 | 390 | 4.40 | 10.0% | 3/12 | n/a |" in text
    assert ("s3-standard, 250 ms (target P99 <= 400 ms): one PUT P99 480 ms (NOT met) at "
            "4.00 PUT/s per broker; hedged P99 390 ms (met) at 4.40 PUT/s per broker") in text


def test_every_claim_once_and_missing_runs_say_how_to_make_them():
    text = render(Runs())
    assert [int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)] == list(range(1, 20))
    assert len(CLAIMS) == 19
    rows = re.findall(r"^\| (\d+) \| ", text, re.M)
    assert [int(n) for n in rows] == list(range(1, 20))
    assert "Not run yet: `kipper bench compare` has no JSON here." in section(text, 1)
    assert "python -m bench.commit_fanout_bench --json" in section(text, 8)
    assert "Measured: not run yet (`python -m bench.diskless_sweep_bench" in text
    assert "**hedging does not reach the target**" in text
    assert "Not run yet: bench/mixed_broker_bench.py has no JSON here." in section(text, 18)
    assert "python -m bench.spray_bench --json" in section(text, 12)
    assert "python -m bench.mode_switch_bench" in section(text, 17)


def spray() -> dict:
    def routing(name, rejections, sends, batches_per_s):
        return {"routing": name, "brokers": 3, "batches": 100, "records_per_batch": 10,
                "in_flight": 5, "records_acked": 1000, "sends": sends,
                "out_of_order_rejections": rejections, "duplicate_sequence_answers": 0,
                "retries_sent": 10, "retries_deduplicated": 9, "retries_written_again": 0,
                "retries_refused": 1, "other_errors": {}, "wall_s": 10.0, "log_records": 1000,
                "log_duplicates": 0, "log_gaps": 0, "log_out_of_order": 0,
                "rejection_rate": rejections / (sends - 10), "batches_per_s": batches_per_s}
    return {"routings": [routing("sticky", 0, 110, 12.0), routing("spray", 100, 210, 6.0)]}


def mixed() -> dict:
    def case(name, round_, lag_p99, produce_p50, diskless):
        return {"case": name, "seconds": 20.0, "flush_ms": 1000, "classic_records": 4000,
                "classic_errors": 0, "diskless_records": diskless, "diskless_errors": 0,
                "produce_p50_ms": produce_p50, "produce_p99_ms": 4 * produce_p50,
                "flush_lag_p50_ms": 500.0, "flush_lag_p99_ms": lag_p99,
                "flush_lag_max_ms": lag_p99 + 100, "records_never_seen_flushed": 0,
                "unflushed_p50_records": 90.0, "unflushed_max_records": 200,
                "record_size": 1024, "round": round_, "load_average": 3.0}
    return {"cases": [case("classic alone", 0, 1400.0, 40.0, 0),
                      case("classic + diskless", 0, 1300.0, 120.0, 30000),
                      case("classic alone", 1, 1500.0, 50.0, 0),
                      case("classic + diskless", 1, 1500.0, 150.0, 30000)]}


def test_spray_and_mixed_broker_answers_are_computed_from_their_json():
    text = render(Runs({"spray": spray(), "mixed": mixed()},
                       {"spray": "`spray.json`", "mixed": "`mixed.json`"}))
    idempotence = section(text, 12)
    assert "gets 50% of its sends refused OUT_OF_ORDER_SEQUENCE (sticky: 0%)" in idempotence
    assert "costs 2.0x the throughput" in idempotence
    assert "every record once and in order" in idempotence
    assert "computed from `spray.json`" in idempotence
    durability = section(text, 18)
    assert "flush lag is not stretched (P99 0.97x" in durability
    assert "produce latency is 3.0x at the median" in durability
    assert "classic + diskless (median of 2 rounds): flush lag P50/P99 500/1400 ms" in durability
    assert "diskless 1500 records/s" in durability


def test_command_writes_the_document_from_the_files(tmp_path):
    paths = {}
    for name, data in (("report", compare_report()), ("sweep", sweep()), ("fanout", fanout())):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    out = tmp_path / "findings.md"
    assert main(["--compare", str(paths["report"]), "--sweep", str(paths["sweep"]),
                 "--fanout", str(tmp_path / "absent.json"), "--out", str(out)]) == 0
    text = out.read_text()
    assert f"computed from `{paths['report']}`" in section(text, 1)
    assert "Not run yet: bench/commit_fanout_bench.py has no JSON here." in section(text, 8)


def test_report_html_claims_table_answers_from_its_own_run():
    rows = claim_rows(compare_report())
    assert [row[0] for row in rows] == [str(n) for n in range(1, 20)]
    assert rows[0][3] == "computed from report.json"
    assert rows[7][2].startswith("Not run yet")  # claim 8 needs the fan-out bench
    assert rows[2][3] == "recorded in bench/README.md, tiered_bench.py"


def cost_scale() -> dict:
    """`kipper bench cost-scale`'s cost_scale.json (as `compare --full` writes it), cut down."""
    def point(mode, run, mb_per_s, usd):
        return {"mode": mode, "mb_per_s": mb_per_s, "source": f"full/{run}", "notes": [],
                "usd_per_tb": usd}
    breaks = {"diskless": {"0": 0.8, "0.5": 1.1, "0.9": None}}
    rows = [{"mb_per_s": 10, "extrapolated": True, "classic": 102.9, "diskless": 17.25}]
    return {"baseline": "classic",
            "measured": [point("classic", "1-mb-s", 0.96, 102.9),
                         point("classic", "5-mb-s", 4.8, 102.7),
                         point("diskless", "1-mb-s", 0.93, 90.23),
                         point("diskless", "5-mb-s", 4.7, 25.1)],
            "object_classes": {"s3_standard": {"rows": rows, "break_even_mb_per_s": breaks},
                               "s3_express_one_zone": {"rows": rows,
                                                       "break_even_mb_per_s": breaks}}}


def test_cost_scale_section_from_a_full_run():
    text = render(Runs({"cost_scale": cost_scale()}))
    scale = text[text.index("## Cost as a function of scale"):]
    assert "| mode | `1-mb-s` run | `5-mb-s` run |" in scale
    assert "| diskless | $90.23 at 0.9 MB/s | $25.10 at 4.7 MB/s |" in scale
    assert "| S3 Standard | diskless | 0.8 MB/s | 1.1 MB/s | never |" in scale
    assert "| S3 Express One Zone | 10 | $102.90 | $17.25 |" in scale
    assert "Not run yet (`python -m broker.cli bench compare --full" in render(Runs())


def test_cache_claim_from_the_cache_bench():
    def case(name, gets):
        groups = [{"group": i + 1, "records": 100, "wrong": 0, "get_requests": n,
                   "seconds": 1.0} for i, n in enumerate(gets)]
        return {"name": name, "partitions": 6, "produced_mb": 10.0, "groups": groups,
                "gets_per_mb": [n / 10.0 for n in gets]}
    runs = Runs({"cache": {"cases": [case("read cache", [40, 0, 0]),
                                     case("no cache", [30, 30, 30])]}})
    claim = section(render(runs), 11)
    assert "the first group paid the GETs (4.00 per MB) and the 2 later ones 0" in claim
    assert "(3.00, 3.00, 3.00 per MB): 2.2x the GETs for 3 groups" in claim
    assert "Every record read back as acknowledged." in claim


def test_tiered_hop_claim_from_the_interval_sweep():
    def interval(ms, wait, p50):
        steps = {"upload_wait": wait, "put": 20.0, "publish": 10.0, "download": 25.0,
                 "replicated": 40.0}
        return {"interval_ms": ms, "classic": {"p50_ms": 7.0, "p99_ms": 20.0},
                "active_tiered": {"p50_ms": p50, "p99_ms": 2 * p50,
                                  "breakdown_mean_ms": steps}}
    runs = Runs({"intervals": {"intervals": [interval(25, 15.0, 90.0),
                                             interval(250, 190.0, 300.0)]}})
    claim = section(render(runs), 4)
    assert "the wait for the upload grows with the interval (15 to 190 ms mean)" in claim
    # download is inside "replicated": 20 + 10 + 40, not counted twice
    assert "add 70-70 ms at every interval, so the interval's wait is the larger part " \
           "from 250 ms" in claim
    assert "acks=all P50 goes from 90 to 300 ms against classic's 7-7 ms" in claim
