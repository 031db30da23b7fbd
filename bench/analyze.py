"""`kipper bench analyze`: the Spark job that turns a replay's results into figures.

Percentiles are nearest-rank (``percentile_approx`` with an accuracy of 10⁶, which is exact
below a million rows and within 10⁻⁶ of the rank above): P50 of 1..1000 ms is 500 ms.
Produce latency is per trace row, from the first record's send to the last record's ack;
end-to-end latency is per record, from send to the consumer's receive. Throughput is what
was acknowledged, over the span from the first send to the last ack.
"""

from __future__ import annotations

from pathlib import Path

from bench.replay import E2E, REQUESTS

PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p99_9": 0.999}
ACCURACY = 1_000_000
# Points of each latency CDF kept for the plots.
CDF_POINTS = [i / 200 for i in range(1, 200)] + [0.995, 0.999, 1.0]


def _quantiles(frame, column: str, fractions: list[float]) -> list[float]:
    from pyspark.sql import functions as F
    row = frame.agg(F.percentile_approx(column, fractions, ACCURACY).alias("q")).first()
    return [float(v) for v in row["q"]] if row["q"] is not None else []


def _latency(frame, column: str) -> dict:
    values = _quantiles(frame, column, [*PERCENTILES.values(), *CDF_POINTS])
    if not values:
        return {"count": 0}
    named = dict(zip(PERCENTILES, values))
    return {"count": frame.count(), **{f"{k}_ms": v for k, v in named.items()},
            "cdf": {"fraction": CDF_POINTS, "ms": values[len(PERCENTILES):]}}


def analyze(spark, run: Path) -> dict:
    """Every figure of one replay run directory, as plain JSON-able data."""
    from pyspark.sql import functions as F

    requests = spark.read.parquet(str(Path(run) / REQUESTS))
    e2e = spark.read.parquet(str(Path(run) / E2E))

    # A row counts for produce latency once all its records were acknowledged.
    complete = requests.where((F.col("acked") == F.col("record_count")) & (F.col("errors") == 0))
    produce = complete.select(((F.col("ack_us") - F.col("send_us")) / 1000).alias("ms"))
    lateness = requests.select(((F.col("send_us") - F.col("scheduled_us")) / 1000).alias("ms"))
    end_to_end = e2e.select(((F.col("receive_us") - F.col("send_us")) / 1000).alias("ms"))

    totals = requests.agg(
        F.count("*").alias("requests"), F.sum("record_count").alias("records_sent"),
        F.sum("acked").alias("records_acked"), F.sum("errors").alias("records_failed"),
        F.sum(F.when(F.col("errors") > 0, 1).otherwise(0)).alias("requests_failed"),
        F.sum(F.when(F.col("acked") == F.col("record_count"), F.col("bytes")).otherwise(0))
        .alias("bytes_acked"),
        F.min("send_us").alias("first_send_us"), F.max("ack_us").alias("last_ack_us")).first()
    span_s = max((totals["last_ack_us"] or 0) - (totals["first_send_us"] or 0), 1) / 1e6
    errors = {row["error"]: row["records"] for row in requests.where(F.col("errors") > 0)
              .groupBy("error").agg(F.sum("errors").alias("records")).collect()}

    # Acknowledged bytes per second of the run, for the throughput plot.
    per_second = (complete.select(((F.col("ack_us") - totals["first_send_us"]) / 1_000_000)
                                  .cast("long").alias("second"), "bytes")
                  .groupBy("second").agg(F.sum("bytes").alias("bytes")).orderBy("second")
                  .collect())
    return {
        "requests": totals["requests"],
        "records_sent": totals["records_sent"] or 0,
        "records_acked": totals["records_acked"] or 0,
        "records_failed": totals["records_failed"] or 0,
        "requests_failed": totals["requests_failed"] or 0,
        "records_consumed": e2e.count(),
        "errors": errors,
        "span_s": span_s,
        "throughput": {"records_per_s": (totals["records_acked"] or 0) / span_s,
                       "mb_per_s": (totals["bytes_acked"] or 0) / span_s / 1e6,
                       "bytes_acked": totals["bytes_acked"] or 0},
        "produce_latency": _latency(produce, "ms"),
        "e2e_latency": _latency(end_to_end, "ms"),
        "send_lateness": {k: v for k, v in _latency(lateness, "ms").items() if k != "cdf"},
        "series": {"second": [row["second"] for row in per_second],
                   "mb_per_s": [row["bytes"] / 1e6 for row in per_second]},
    }


def headline(figures: dict) -> dict:
    """The figures without the plot data (CDF points, per-second series)."""
    return {key: ({k: v for k, v in value.items() if k != "cdf"} if isinstance(value, dict)
                  else value)
            for key, value in figures.items() if key != "series"}
