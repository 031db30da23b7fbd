"""Cost per TB vs throughput: the fit, the extrapolation and the break-even on numbers a
reader can check by hand."""

import json
import subprocess
import sys

import pytest

from bench.cost import GB
from bench.cost_scale import (MeasuredPoint, ScaleModel, break_even, fit,
                              plot_report_cost_scale, points_from_report, scale_table)

PRICES = {
    "s3_standard": {"put_requests_per_1k": 0.005, "get_requests_per_1k": 0.0004,
                    "storage_gb_month": 0.023},
    "s3_express_one_zone": {"put_requests_per_1k": 0.001, "get_requests_per_1k": 0.0,
                            "upload_per_gb": 0.002, "retrieval_per_gb": 0.0,
                            "storage_gb_month": 0.11},
    "cross_az": {"transfer_per_gb_each_way": 0.01},
    "ebs_gp3": {"storage_gb_month": 0.08},
}
# Bytes per MB produced that come to N GB per TB produced.
def gb_per_tb(n: float) -> float:
    return n * GB / 1e6


# Classic: 500 GB cross AZ per TB (at $0.02 a crossing: $10/TB) and 100 GB on EBS for a
# 730-hour month ($8/TB), whatever the rate.
CLASSIC = ScaleModel(mode="classic", brokers=3, cross_az_bytes_per_mb=gb_per_tb(500),
                     stored_bytes_per_mb={"ebs_gp3": gb_per_tb(100)}, retention_hours=730,
                     object_bytes_per_mb={}, object_class=None,
                     requests={"put": (0.0, 0.0), "get": (0.0, 0.0)})
# Diskless: 4 PUTs per second per broker whatever the rate (one per 250 ms commit interval),
# and 1,000 GB of objects written per TB (S3 Express charges them per GB).
DISKLESS = ScaleModel(mode="diskless", brokers=3, cross_az_bytes_per_mb=0.0,
                      stored_bytes_per_mb={}, retention_hours=730,
                      object_bytes_per_mb={"put": gb_per_tb(1000)}, object_class="s3_standard",
                      requests={"put": (4.0, 0.0), "get": (0.0, 0.0)})


def point(mb_per_s: float, puts: float, duration_s: float = 100.0, brokers: int = 1,
          **overrides) -> MeasuredPoint:
    return MeasuredPoint(**{
        "mode": "diskless", "mb_per_s": mb_per_s, "duration_s": duration_s, "brokers": brokers,
        "cross_az_bytes_per_mb": 0.0, "stored_bytes_per_mb": {}, "retention_hours": 168,
        "requests": {"put": puts, "get": 0.0}, "object_bytes_per_mb": {},
        "object_class": "s3_standard", **overrides})


def test_fit_separates_time_driven_from_byte_driven_requests():
    # 5 PUTs/s at 1 MB/s and 5.9 PUTs/s at 10 MB/s: 4.9/s whatever the rate + 0.1 per MB.
    model = fit([point(1, 500), point(10, 590)])
    assert model.requests["put"] == pytest.approx((4.9, 0.1))
    # One throughput only: every request is taken as time-driven.
    assert fit([point(2, 800, brokers=2)]).requests["put"] == pytest.approx((4.0, 0.0))
    # Requests that only grow with the data: no time-driven part, 1 per MB.
    assert fit([point(1, 100), point(10, 1000)]).requests["put"] == pytest.approx((0.0, 1.0))
    with pytest.raises(ValueError, match="exactly one mode"):
        fit([point(1, 100), point(2, 200, mode="classic")])


def test_extrapolation_request_cost_falls_with_throughput_cross_az_does_not():
    # 12 MB/s on 3 brokers: 4 MB/s and 4 PUTs/s per broker, 1 PUT per MB, 10^6 per TB: $5.
    assert DISKLESS.dollars_per_tb(12, PRICES) == pytest.approx(
        {"cross_az_transfer": 0, "object_store_requests": 5.0, "storage": 0, "total": 5.0})
    assert DISKLESS.dollars_per_tb(120, PRICES)["total"] == pytest.approx(0.5)
    # On S3 Express: $1 of PUTs at 12 MB/s plus 1,000 GB uploaded at $0.002.
    assert DISKLESS.dollars_per_tb(12, PRICES, "s3_express_one_zone")["total"] == pytest.approx(3.0)
    for mb_per_s in (1, 10, 1000):
        assert CLASSIC.dollars_per_tb(mb_per_s, PRICES) == pytest.approx(
            {"cross_az_transfer": 10.0, "object_store_requests": 0, "storage": 8.0,
             "total": 18.0})
    # Half-price cross-AZ transfer halves that part only.
    assert CLASSIC.dollars_per_tb(10, PRICES, cross_az_discount=0.5)["total"] == pytest.approx(13.0)


def test_break_even_on_standard_express_and_with_a_cross_az_discount():
    # Diskless on Standard costs 60/T $/TB, classic 18: equal at T = 60/18 MB/s.
    assert break_even(DISKLESS, CLASSIC, PRICES) == pytest.approx(60 / 18)
    # On Express: 12/T + 2 = 18 at T = 0.75 MB/s.
    assert break_even(DISKLESS, CLASSIC, PRICES, "s3_express_one_zone") == pytest.approx(0.75)
    # A 50 % cross-AZ discount makes classic $13/TB: 60/T = 13.
    assert break_even(DISKLESS, CLASSIC, PRICES, cross_az_discount=0.5) == pytest.approx(60 / 13)
    # Never cheaper than a free baseline; cheaper from the lowest rate asked for than a dear one.
    free_classic = ScaleModel(**{**CLASSIC.__dict__, "cross_az_bytes_per_mb": 0.0,
                                 "stored_bytes_per_mb": {}})
    assert break_even(DISKLESS, free_classic, PRICES) is None
    assert break_even(DISKLESS, CLASSIC, PRICES, low=4) == 4

    table = scale_table({"classic": CLASSIC, "diskless": DISKLESS}, PRICES,
                        throughputs=(6, 60), discounts=(0.0, 0.5))
    standard = table["object_classes"]["s3_standard"]
    assert [row["diskless"] for row in standard["rows"]] == pytest.approx([10.0, 1.0])
    assert all(row["extrapolated"] for row in standard["rows"])
    assert standard["break_even_mb_per_s"]["diskless"] == pytest.approx(
        {"0": 60 / 18, "0.5": 60 / 13})


def compare_report() -> dict:
    """A compare report.json with one priced mode, a peer and an unavailable mode."""
    return {"options": {"brokers": 3, "retention_hours": 730}, "modes": {
        "diskless": {
            "status": "ok", "span_s": 100.0, "produced_bytes": 10**9,
            "cross_az": {"bytes": 10**8},
            "stored_bytes": {"ebs_gp3": 0, "s3_standard": 10**9, "s3_express_one_zone": 0},
            "object_store": {"requests": 1500, "bytes": 3 * 10**9,
                             "bytes_by_request_class": {"put": 10**9, "get": 2 * 10**9},
                             "by_operation": {"PutObject": 1200, "GetObject": 300,
                                              "DeleteObjects": 7, "CreateBucket": 0}},
            "cost": {"dollars": {"s3_standard.put_requests": 0.006,
                                 "s3_standard.get_requests": 0.00012},
                     "per_tb_produced": {}}},
        "tansu": {"status": "ok", "cost": "n/a"},
        "active-tiered": {"status": "unavailable: no engine"}}}


def test_points_from_a_compare_report_reproduce_its_dollars_per_tb():
    # 1e9 bytes produced in 100 s on 3 brokers: 10 MB/s, 1,000 MB.
    [measured] = points_from_report(compare_report(), "run-a", PRICES)
    assert (measured.mode, measured.mb_per_s, measured.brokers, measured.object_class) == (
        "diskless", 10.0, 3, "s3_standard")
    assert measured.requests == {"put": 1200, "get": 300}   # DeleteObjects is free
    assert measured.cross_az_bytes_per_mb == 1e5
    assert measured.object_bytes_per_mb == {"put": 1e6, "get": 2e6}
    assert measured.requests_per_broker_s("put") == 4.0
    # At the measured rate, the model gives back the run's own figures: 1.2 PUTs and 0.3 GETs
    # per MB, 0.1 MB crossing AZs and 1 MB kept a month on Standard.
    model = fit([measured])
    per_tb = model.dollars_per_tb(10.0, PRICES)
    tb_gb = 1e12 / GB
    assert per_tb == pytest.approx({
        "cross_az_transfer": 0.1 * tb_gb * 0.02,
        "object_store_requests": 1.2e6 / 1000 * 0.005 + 0.3e6 / 1000 * 0.0004,
        "storage": tb_gb * 0.023,
        "total": 0.1 * tb_gb * 0.02 + 6.12 + tb_gb * 0.023})


def test_cost_scale_command_prints_the_table_and_writes_the_plot(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    report = compare_report()
    report["modes"]["classic"] = {**report["modes"]["diskless"], "object_store": {
        "requests": 0, "bytes": 0, "by_operation": {"CreateBucket": 0}},
        "stored_bytes": {"ebs_gp3": 3 * 10**9}, "cross_az": {"bytes": 3 * 10**9},
        "cost": {"dollars": {}, "per_tb_produced": {}}}
    (run / "report.json").write_text(json.dumps(report))
    result = subprocess.run([sys.executable, "-m", "broker.cli", "bench", "cost-scale", "--run",
                             str(run), "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "diskless at   10.00 MB/s" in result.stdout and "(measured, " in result.stdout
    assert "EXTRAPOLATED $/TB, objects on s3_express_one_zone" in result.stdout
    assert "break-even, diskless cheaper than classic from (extrapolated)" in result.stdout
    assert (tmp_path / "out" / "cost_vs_throughput.png").stat().st_size > 0
    figures = json.loads((tmp_path / "out" / "cost_scale.json").read_text())
    assert set(figures["object_classes"]["s3_standard"]["break_even_mb_per_s"]) == {"diskless"}


def test_report_plot_with_and_without_priced_modes(tmp_path):
    plot_report_cost_scale(compare_report(), tmp_path / "a.png", PRICES)
    unpriced = {**compare_report(), "modes": {"tansu": {"status": "ok", "cost": "n/a"}}}
    plot_report_cost_scale(unpriced, tmp_path / "b.png", PRICES)
    assert (tmp_path / "a.png").stat().st_size > 0 and (tmp_path / "b.png").stat().st_size > 0
