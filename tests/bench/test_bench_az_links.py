"""Kernel vs kipper cross-AZ bytes per AZ pair (bench/az_links.py) and their table in the
report (bench/report.py), from made-up counters."""

from __future__ import annotations

from bench.az_links import kipper_pair_bytes, link_figures
from bench.report import az_link_rows
from broker.az_network import FRAME_HEADER_BYTES, LinkBytes


def metrics(*rows: tuple[str, str, int]) -> dict:
    return {"network": {"server": [
        {"local_az": local, "peer_az": peer, "class": "replication", "direction": "out",
         "bytes": n} for local, peer, n in rows], "client": []}}


def test_pairs_are_unordered_and_skip_same_and_unknown_azs():
    docs = [metrics(("az1", "az2", 100), ("az1", "az1", 7), ("az1", "unknown", 9)),
            metrics(("az2", "az1", 50), ("az3", "az1", 5))]
    assert kipper_pair_bytes(docs) == {("az1", "az2"): 150, ("az1", "az3"): 5}


def test_link_figures_subtract_headers_and_compare():
    before = [metrics(("az1", "az2", 1000))]
    after = [metrics(("az1", "az2", 101_000))]
    kernel_before = [LinkBytes("az1", "az2", 10, 10, 1)]
    frames = 50
    kernel_after = [LinkBytes("az1", "az2", 60_010 + frames * FRAME_HEADER_BYTES, 40_010,
                              1 + frames)]
    row, = link_figures(before, after, kernel_before, kernel_after)
    assert row["kipper_bytes"] == 100_000
    assert row["kernel_frames"] == frames
    assert row["kernel_tcp_payload"] == 100_000
    assert row["difference"] == 0.0
    report = {"modes": {"classic": {"status": "ok", "az_links": [row]}}}
    table, = az_link_rows(report)
    assert table[:2] == ["classic", "az1-az2"] and table[-1] == "+0.00%"
