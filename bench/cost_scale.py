"""Cost per TB as a function of throughput: measured runs extrapolated to 10-1,000 MB/s.

A run of `kipper bench compare` measures, per mode, what one MB produced costs at the rate
the run had: cross-AZ bytes, bytes left stored, object-store requests and bytes. Two of
these scale differently with throughput:

- bytes (cross-AZ transfer, storage, S3 Express per-GB charges) are proportional to the data,
  so their cost per TB does not depend on the rate: classic's replication crosses AZs for
  every byte whatever the rate;
- object-store requests are partly *time-driven*: a diskless broker uploads one WAL object per
  commit interval however much it holds, so its PUTs per second are fixed and their cost per
  TB falls as 1/throughput, and partly *byte-driven* (objects that reach their size limit,
  reads that grow with the data).

The fit: per mode, requests per second per broker = a + b × (MB/s per broker), least squares
over the measured points (a, b ≥ 0). With a single throughput measured, a and b cannot be told
apart and every request is taken as time-driven (b = 0): right for diskless's commit-interval
uploads below the object size limit, optimistic above it. Every figure away from a measured
throughput is an extrapolation, and is labelled so in the table and the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from bench.cost import GB, HOURS_PER_MONTH, REQUEST_CLASS, load_prices

MB = 1e6
MB_PER_TB = 1e6
OBJECT_CLASSES = ("s3_standard", "s3_express_one_zone")
REQUEST_CLASSES = ("put", "get")
# Throughputs of the extrapolated curve and table (MB/s per cluster).
THROUGHPUTS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
DISCOUNTS = (0.0, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class MeasuredPoint:
    """What one mode's run measured, per MB produced (10⁶ bytes) and per second."""
    mode: str
    mb_per_s: float          # produced MB per second of the run, whole cluster
    duration_s: float
    brokers: int
    cross_az_bytes_per_mb: float
    # storage class (ebs_gp3, s3_standard, s3_express_one_zone) -> bytes left stored per MB
    stored_bytes_per_mb: Mapping[str, float]
    retention_hours: float
    # request class (put, get) -> object-store requests of the whole run
    requests: Mapping[str, float]
    # Object bytes written (put) and read (get) per MB produced.
    object_bytes_per_mb: Mapping[str, float]
    # The storage class the run's objects were in; None for a mode without objects.
    object_class: str | None
    source: str = ""
    notes: tuple[str, ...] = ()

    def requests_per_broker_s(self, request_class: str) -> float:
        return self.requests.get(request_class, 0.0) / self.duration_s / self.brokers


@dataclass(frozen=True)
class ScaleModel:
    """One mode's cost per TB at any throughput, fitted from its measured points."""
    mode: str
    brokers: int
    cross_az_bytes_per_mb: float
    stored_bytes_per_mb: Mapping[str, float]
    retention_hours: float
    object_bytes_per_mb: Mapping[str, float]
    object_class: str | None
    # request class -> (a: requests/s per broker whatever the rate, b: requests per MB)
    requests: Mapping[str, tuple[float, float]]
    measured: tuple[MeasuredPoint, ...] = field(default=())

    def dollars_per_tb(self, mb_per_s: float, prices: Mapping[str, Mapping[str, float]],
                       object_class: str | None = None,
                       cross_az_discount: float = 0.0) -> dict[str, float]:
        """$/TB produced at ``mb_per_s`` (whole cluster), by category and "total"; objects
        priced as ``object_class`` (default: the class measured), cross-AZ transfer at
        (1 − ``cross_az_discount``) × list price."""
        objects = object_class or self.object_class
        # bytes per MB produced -> GB per TB produced
        gb_per_tb = MB_PER_TB / GB
        cross = (self.cross_az_bytes_per_mb * gb_per_tb
                 * 2 * prices["cross_az"]["transfer_per_gb_each_way"] * (1 - cross_az_discount))
        storage = 0.0
        for storage_class, per_mb in self.stored_bytes_per_mb.items():
            priced_as = objects if storage_class in OBJECT_CLASSES and objects else storage_class
            storage += (per_mb * gb_per_tb * self.retention_hours / HOURS_PER_MONTH
                        * prices[priced_as]["storage_gb_month"])
        requests = 0.0
        if objects:
            table = prices[objects]
            mb_per_broker_s = mb_per_s / self.brokers
            for request_class, (per_s, per_mb) in self.requests.items():
                per_broker_s = per_s + per_mb * mb_per_broker_s
                requests_per_mb = per_broker_s / mb_per_broker_s
                requests += (requests_per_mb * MB_PER_TB / 1000
                             * table[f"{request_class}_requests_per_1k"])
            if objects == "s3_express_one_zone":
                requests += (self.object_bytes_per_mb.get("put", 0.0) * gb_per_tb
                             * table["upload_per_gb"]
                             + self.object_bytes_per_mb.get("get", 0.0) * gb_per_tb
                             * table["retrieval_per_gb"])
        return {"cross_az_transfer": cross, "object_store_requests": requests,
                "storage": storage, "total": cross + requests + storage}


def fit(points: list[MeasuredPoint]) -> ScaleModel:
    """Fit one mode's model: byte figures averaged, requests/s per broker = a + b × MB/s per
    broker by least squares with a, b ≥ 0 (b = 0 if one throughput was measured)."""
    if not points or len({p.mode for p in points}) != 1:
        raise ValueError("fit takes the measured points of exactly one mode")
    first = points[0]

    def mean(values) -> float:
        values = list(values)
        return sum(values) / len(values)

    def mean_of(attribute: str) -> dict[str, float]:
        keys = sorted({k for p in points for k in getattr(p, attribute)})
        return {k: mean(getattr(p, attribute).get(k, 0.0) for p in points) for k in keys}

    x = np.array([p.mb_per_s / p.brokers for p in points])
    requests = {}
    for request_class in REQUEST_CLASSES:
        y = np.array([p.requests_per_broker_s(request_class) for p in points])
        if len(set(x.round(9))) < 2:
            a, b = float(y.mean()), 0.0
        else:
            a, b = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), y, rcond=None)[0]
            # A negative term has no physical meaning: refit with it at zero.
            if a < 0:
                a, b = 0.0, float((x @ y) / (x @ x))
            elif b < 0:
                a, b = float(y.mean()), 0.0
        requests[request_class] = (float(a), float(b))
    classes = {p.object_class for p in points} - {None}
    if len(classes) > 1:
        raise ValueError(f"{first.mode}: runs with objects in different classes {sorted(classes)}")
    return ScaleModel(
        mode=first.mode, brokers=first.brokers,
        cross_az_bytes_per_mb=mean(p.cross_az_bytes_per_mb for p in points),
        stored_bytes_per_mb=mean_of("stored_bytes_per_mb"),
        retention_hours=first.retention_hours,
        object_bytes_per_mb=mean_of("object_bytes_per_mb"),
        object_class=next(iter(classes), None), requests=requests, measured=tuple(points))


def break_even(cheaper_later: ScaleModel, baseline: ScaleModel,
               prices: Mapping[str, Mapping[str, float]], object_class: str | None = None,
               cross_az_discount: float = 0.0,
               low: float = 1e-3, high: float = 1e6) -> float | None:
    """The throughput (MB/s per cluster) from which ``cheaper_later`` costs less per TB than
    ``baseline``: ``low`` if it always does, None if it never does within [low, high]."""
    def gap(mb_per_s: float) -> float:
        return (cheaper_later.dollars_per_tb(mb_per_s, prices, object_class, cross_az_discount)
                ["total"] - baseline.dollars_per_tb(mb_per_s, prices, object_class,
                                                    cross_az_discount)["total"])
    if gap(low) < 0:
        return low
    if gap(high) >= 0:
        return None
    # The gap falls with throughput (time-driven requests spread over more bytes): bisect on
    # a log scale.
    for _ in range(200):
        middle = math.sqrt(low * high)
        if gap(middle) < 0:
            high = middle
        else:
            low = middle
        if high / low < 1 + 1e-12:
            break
    return high


# --- From `kipper bench compare`'s report.json to measured points. -----------------------

def points_from_report(report: Mapping, source: str = "",
                       prices: Mapping[str, Mapping[str, float]] | None = None
                       ) -> list[MeasuredPoint]:
    """One MeasuredPoint per kipper mode the report priced (peers and failed modes have none)."""
    prices = prices or load_prices()
    options = report["options"]
    points = []
    for mode, run in report["modes"].items():
        if run.get("status") != "ok" or not isinstance(run.get("cost"), dict):
            continue
        produced_mb = run["produced_bytes"] / MB
        if produced_mb <= 0 or run["span_s"] <= 0:
            continue
        store = run["object_store"]
        requests = {c: 0.0 for c in REQUEST_CLASSES}
        for operation, count in store["by_operation"].items():
            request_class = REQUEST_CLASS[operation]
            if request_class != "free":
                requests[request_class] += count
        dollars = run["cost"]["dollars"]
        request_dollars = {c: sum(dollars.get(f"{c}.{r}_requests", 0.0) for r in REQUEST_CLASSES)
                           for c in OBJECT_CLASSES}
        object_class = (max(request_dollars, key=request_dollars.get)
                        if any(request_dollars.values()) else None)
        notes = []
        if "bytes_by_request_class" in store:
            object_bytes = dict(store["bytes_by_request_class"])
        elif object_class == "s3_express_one_zone":
            # Express charges every byte: its per-GB items give the bytes back exactly.
            table = prices[object_class]
            object_bytes = {c: dollars.get(f"{object_class}.{item}", 0.0) / table[f"{item}_per_gb"] * GB
                            for c, item in (("put", "upload"), ("get", "retrieval"))}
        else:
            # Reports written before the split: the objects the run left stored are taken as
            # the bytes written, the rest of the object traffic as bytes read.
            written = sum(run["stored_bytes"].get(c, 0) for c in OBJECT_CLASSES)
            object_bytes = {"put": written, "get": max(0, store["bytes"] - written)}
            if store["bytes"]:
                notes.append("object bytes written/read estimated from the bytes stored")
        points.append(MeasuredPoint(
            mode=mode, mb_per_s=produced_mb / run["span_s"], duration_s=run["span_s"],
            brokers=options["brokers"],
            cross_az_bytes_per_mb=run["cross_az"]["bytes"] / produced_mb,
            stored_bytes_per_mb={c: b / produced_mb for c, b in run["stored_bytes"].items()},
            retention_hours=options["retention_hours"], requests=requests,
            object_bytes_per_mb={c: b / produced_mb for c, b in object_bytes.items()},
            object_class=object_class, source=source, notes=tuple(notes)))
    return points


def models_from_points(points: list[MeasuredPoint]) -> dict[str, ScaleModel]:
    modes = list(dict.fromkeys(p.mode for p in points))
    return {mode: fit([p for p in points if p.mode == mode]) for mode in modes}


# --- The table and the plot. --------------------------------------------------------------

def scale_table(models: Mapping[str, ScaleModel], prices: Mapping[str, Mapping[str, float]],
                baseline: str = "classic", throughputs=THROUGHPUTS,
                discounts=DISCOUNTS) -> dict:
    """Every figure the command prints and writes: $/TB per mode at each throughput (measured
    ones marked), and break-even throughputs against ``baseline`` per object class and
    cross-AZ discount."""
    result: dict = {"object_classes": {}, "measured": [], "baseline": baseline}
    for model in models.values():
        for point in model.measured:
            result["measured"].append({
                "mode": point.mode, "mb_per_s": point.mb_per_s, "source": point.source,
                "notes": list(point.notes),
                "usd_per_tb": model.dollars_per_tb(point.mb_per_s, prices)["total"]})
    for object_class in OBJECT_CLASSES:
        rows = []
        for mb_per_s in sorted(set(throughputs)):
            rows.append({"mb_per_s": mb_per_s, "extrapolated": True, **{
                mode: model.dollars_per_tb(mb_per_s, prices, object_class)["total"]
                for mode, model in models.items()}})
        breaks = {}
        if baseline in models:
            for mode, model in models.items():
                if mode != baseline:
                    breaks[mode] = {f"{discount:g}": break_even(
                        model, models[baseline], prices, object_class, discount)
                        for discount in discounts}
        result["object_classes"][object_class] = {"rows": rows, "break_even_mb_per_s": breaks}
    return result


def _mb(value: float | None) -> str:
    if value is None:
        return "never"
    return "always" if value <= 1e-3 else f"{value:,.1f} MB/s"


def format_table(table: Mapping, modes: list[str]) -> str:
    lines = ["Measured (each mode at the rate its run had, objects priced as measured):"]
    for point in table["measured"]:
        notes = f"  [{'; '.join(point['notes'])}]" if point["notes"] else ""
        lines.append(f"  {point['mode']:>14} at {point['mb_per_s']:7.2f} MB/s: "
                     f"${point['usd_per_tb']:8.2f}/TB  (measured, {point['source']}){notes}")
    for object_class, figures in table["object_classes"].items():
        lines.append(f"\nEXTRAPOLATED $/TB, objects on {object_class}, list cross-AZ price:")
        lines.append("  " + f"{'MB/s':>7}" + "".join(f"{m:>15}" for m in modes))
        for row in figures["rows"]:
            lines.append("  " + f"{row['mb_per_s']:>7g}"
                         + "".join(f"{row[m]:>15.2f}" for m in modes))
        for mode, by_discount in figures["break_even_mb_per_s"].items():
            lines.append(f"  break-even, {mode} cheaper than {table['baseline']} from "
                         "(extrapolated), by cross-AZ discount: "
                         + ", ".join(f"{float(d):.0%}: {_mb(v)}" for d, v in by_discount.items()))
    return "\n".join(lines)


def plot_cost_scale(models: Mapping[str, ScaleModel], table: Mapping,
                    prices: Mapping[str, Mapping[str, float]], path: Path) -> Path:
    """$/TB vs throughput per mode, one panel per object class: extrapolated curves dashed,
    measured points as dots, break-even points (list cross-AZ price) marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.geomspace(0.1, 1000, 120)
    figure, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for axis, (object_class, figures) in zip(axes, table["object_classes"].items()):
        for index, (mode, model) in enumerate(models.items()):
            colour = f"C{index}"
            axis.plot(grid, [model.dollars_per_tb(x, prices, object_class)["total"] for x in grid],
                      "--", color=colour, label=f"{mode} (extrapolated)")
            # A point is measured only where its objects were in this class; elsewhere its
            # counts are measured but their prices are not (hollow marker).
            as_measured = model.object_class in (None, object_class)
            rates = ", ".join(f"{point.mb_per_s:.1f}" for point in model.measured)
            axis.plot([point.mb_per_s for point in model.measured],
                      [model.dollars_per_tb(point.mb_per_s, prices, object_class)["total"]
                       for point in model.measured],
                      "o", color=colour, markerfacecolor=colour if as_measured else "none",
                      label=f"{mode} ({'measured' if as_measured else 'measured counts, repriced'}"
                            f" at {rates} MB/s)")
        for index, (mode, by_discount) in enumerate(figures["break_even_mb_per_s"].items()):
            at = by_discount["0"]
            if at is not None and grid[0] <= at <= grid[-1]:
                cost = models[mode].dollars_per_tb(at, prices, object_class)["total"]
                axis.plot(at, cost, "kx", markersize=10)
                axis.annotate(f"break-even {mode}\n{at:.1f} MB/s (extrapolated)", (at, cost),
                              textcoords="offset points", xytext=(6, 12 + 26 * index), fontsize=8,
                              arrowprops={"arrowstyle": "-", "color": "grey"})
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("produced MB/s per cluster (log)")
        axis.set_title(f"objects on {object_class.replace('_', ' ')}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("USD per TB produced (log)")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return path


def plot_report_cost_scale(report: Mapping, path: Path,
                           prices: Mapping[str, Mapping[str, float]] | None = None) -> Path:
    """The cost-vs-throughput plot of one compare report (for report.html)."""
    prices = prices or load_prices()
    points = points_from_report(report, "this run", prices)
    if not points:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        figure, axis = plt.subplots(figsize=(6, 1.2))
        axis.axis("off")
        axis.text(0.5, 0.5, "no priced kipper mode in this run", ha="center", va="center")
        figure.savefig(path, dpi=80)
        plt.close(figure)
        return path
    models = models_from_points(points)
    return plot_cost_scale(models, scale_table(models, prices), prices, path)
