"""report.html and its PNG plots from a comparison's report.json (`kipper bench report`)."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

from bench.cost import CATEGORIES  # noqa: E402
from bench.cost_scale import plot_report_cost_scale  # noqa: E402
from bench.findings import Runs, claims_table  # noqa: E402

DPI = 80
PLOTS = {
    "latency_cdf.png": "Latency CDFs: produce (send to ack, per request) and end to end "
                       "(send to consumer receive, per record)",
    "throughput.png": "Acknowledged throughput over the replay",
    "cost_per_tb.png": "Cost per TB produced, by category",
    "cross_az_bytes.png": "Cross-AZ bytes per produced byte, by traffic class",
    "cost_vs_throughput.png": "Cost per TB vs throughput: this run's measured points and the "
                              "model extrapolated from them (kipper bench cost-scale)",
}


def _ok(report: dict) -> dict[str, dict]:
    return {name: run for name, run in report["modes"].items() if run["status"] == "ok"}


def _priced(report: dict) -> dict[str, dict]:
    return {name: run for name, run in _ok(report).items() if isinstance(run["cost"], dict)}


def plot_latency(report: dict, path: Path) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for axis, key, title in ((axes[0], "produce_latency", "produce"),
                             (axes[1], "e2e_latency", "end to end")):
        for name, run in _ok(report).items():
            cdf = run[key].get("cdf")
            if cdf:
                axis.plot(cdf["ms"], cdf["fraction"], label=name)
        axis.set_xscale("log")
        # Plain numbers on the decades only: labelled minor ticks overlap on a log axis.
        axis.xaxis.set_major_formatter(ScalarFormatter())
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("latency (ms, log scale)")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of requests / records")
    axes[1].legend(loc="lower right")
    _save(figure, path)


def plot_throughput(report: dict, path: Path) -> None:
    figure, axis = plt.subplots(figsize=(10, 3.2))
    for name, run in _ok(report).items():
        axis.plot(run["series"]["second"], run["series"]["mb_per_s"], label=name)
    axis.set_xlabel("seconds since the first send")
    axis.set_ylabel("MB/s acknowledged")
    axis.grid(True, alpha=0.3)
    axis.legend()
    _save(figure, path)


def plot_cost(report: dict, path: Path) -> None:
    runs = _priced(report)
    figure, axis = plt.subplots(figsize=(7, 3.6))
    bottom = [0.0] * len(runs)
    for category in CATEGORIES:
        values = [run["cost"]["per_tb_produced"][category] for run in runs.values()]
        axis.bar(list(runs), values, bottom=bottom, label=category.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    axis.set_ylabel("USD per TB produced")
    axis.legend()
    axis.grid(True, axis="y", alpha=0.3)
    _save(figure, path)


def plot_cross_az(report: dict, path: Path) -> None:
    runs = _priced(report)
    classes = sorted({cls for run in runs.values() for cls in run["cross_az"]["bytes_by_class"]})
    figure, axis = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / max(len(runs), 1)
    for index, (name, run) in enumerate(runs.items()):
        produced = run["produced_bytes"] or 1
        axis.bar([c + index * width for c in range(len(classes))],
                 [run["cross_az"]["bytes_by_class"].get(cls, 0) / produced for cls in classes],
                 width, label=name)
    axis.set_xticks([c + width * (len(runs) - 1) / 2 for c in range(len(classes))], classes)
    axis.set_ylabel("cross-AZ bytes / produced byte")
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend()
    _save(figure, path)


def _save(figure, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def _fmt(value, digits: int = 2) -> str:
    if value is None or isinstance(value, str):
        return html.escape(value or "n/a")
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def summary_rows(report: dict) -> list[list[str]]:
    rows = []
    for name, run in report["modes"].items():
        if run["status"] != "ok":
            rows.append([html.escape(name), html.escape(run["status"])] + [""] * 9)
            continue
        priced = isinstance(run["cost"], dict)
        produce, e2e = run["produce_latency"], run["e2e_latency"]
        rows.append([
            html.escape(name), "ok",
            f'{_fmt(run["records_acked"])} / {_fmt(run["records_sent"])} / '
            f'{_fmt(run["records_consumed"])}',
            _fmt(run["records_failed"]),
            _fmt(run["throughput"]["mb_per_s"]),
            " / ".join(_fmt(produce.get(f"{p}_ms")) for p in ("p50", "p99", "p99_9")),
            " / ".join(_fmt(e2e.get(f"{p}_ms")) for p in ("p50", "p99", "p99_9")),
            _fmt(run["cross_az"]["per_produced_gb"], 3) if priced else "n/a",
            _fmt(run["object_store"]["requests"]) if priced else "n/a",
            _fmt(run["cost"]["per_tb_produced"]["total"]) if priced else "n/a",
            " / ".join(_fmt(run["cost"]["per_tb_produced"][c]) for c in CATEGORIES)
            if priced else "n/a",
        ])
    return rows


def az_link_rows(report: dict) -> list[list[str]]:
    """With --netns: per mode and AZ pair, the kernel's bytes on the link (all, frames, less
    66 bytes of headers per frame) next to kipper's count."""
    rows = []
    for name, run in _ok(report).items():
        for link in run.get("az_links", []):
            difference = link["difference"]
            rows.append([html.escape(name), html.escape(link["azs"]), _fmt(link["kernel_bytes"]),
                         _fmt(link["kernel_frames"]), _fmt(link["kernel_tcp_payload"]),
                         _fmt(link["kipper_bytes"]),
                         "n/a" if difference is None else f"{difference:+.2%}"])
    return rows


def claim_rows(report: dict) -> list[list[str]]:
    """The claims table of docs/findings.md with this report as the only run."""
    runs = Runs({"compare": report}, {"compare": "report.json"})
    return [[str(number), html.escape(title), html.escape(answer), html.escape(source)]
            for number, title, answer, source in claims_table(runs)]


def write_report(report: dict, out: Path) -> Path:
    """Write the PNGs and report.html next to report.json in ``out``."""
    out = Path(out)
    for name, plot in (("latency_cdf.png", plot_latency), ("throughput.png", plot_throughput),
                       ("cost_per_tb.png", plot_cost), ("cross_az_bytes.png", plot_cross_az),
                       ("cost_vs_throughput.png", plot_report_cost_scale)):
        plot(report, out / name)
    trace, options = report["trace"], report["options"]
    header = ["mode", "status", "records acked / sent / consumed", "failed", "MB/s",
              "produce P50 / P99 / P99.9 ms", "end-to-end P50 / P99 / P99.9 ms",
              "cross-AZ GB per produced GB", "S3 requests", "$ per TB",
              "$/TB: cross-AZ / S3 requests / storage"]
    links = az_link_rows(report)
    links_table = "" if not links else (
        "<h2>Cross-AZ bytes per AZ pair: the kernel's link counters and kipper's</h2>"
        f"<p>Each AZ a network namespace, inter-AZ round trip +{options.get('az_rtt_ms', 0):g} ms"
        " (docs/cluster.md). The kernel counts Ethernet frames; less 66 bytes of Ethernet, IP "
        "and TCP headers per frame it should match kipper's count of Kafka frames.</p>"
        + _table(["mode", "AZs", "kernel bytes", "frames", "kernel less headers",
                  "kipper bytes", "difference"], links))
    images = "".join(f'<h2>{html.escape(caption)}</h2><img src="{name}" alt="{name}">'
                     for name, caption in PLOTS.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kipper bench compare</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #bbb;padding:4px 8px;text-align:right}}
td:first-child,th{{text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>kipper bench compare</h1>
<p>{html.escape(report["created"])}; wall time {report["wall_s"]:.0f} s; trace
{html.escape(str(trace["path"]))}: {trace["rows"]:,} produce requests, {trace["records"]:,}
records, {trace["bytes"]:,} bytes, {trace["producers"]} producers over
{trace["duration_s"]:.1f} s, replayed at {options["speedup"]}&times; speed on
{options["brokers"]} brokers (one per AZ), RF={options["replication_factor"]}, Spark
{html.escape(options["master"])}. Storage is priced for keeping what the run stored for
{options["retention_hours"]:g} hours. Every figure is in <a href="report.json">report.json</a>.</p>
{_table(header, summary_rows(report))}
{links_table}
<h2>Claims of the KIP threads (digest &sect;6)</h2>
<p>This run's answer where it measures one (&ldquo;computed from report.json&rdquo;), else
the figure recorded in bench/README.md or why it is not measurable;
docs/findings.md (<code>python -m bench.findings</code>) adds the diskless sweep, commit
fan-out, diskless merge, tiered fallback, spray and mixed-broker runs.</p>
{_table(["#", "claim", "answer", "source"], claim_rows(report))}
{images}
</body></html>
"""
    path = out / "report.html"
    path.write_text(page)
    return path
