"""The metric catalogue (broker/metric_catalog.py) follows the Prometheus naming conventions,
and the Grafana dashboard in docs/ is valid JSON whose every query names catalogued metrics
(tests/system/test_metrics.py checks a live cluster exports every catalogued family; the
table in docs/metrics.md is checked by test_config_docs.py)."""

from __future__ import annotations

import json
import re

from broker.config_docs import REPO
from broker.metric_catalog import CATALOG, spec_of

DASHBOARD = REPO / "docs" / "grafana-dashboard.json"
_METRIC_NAME = re.compile(r"\b(?:kipper|process)_[a-zA-Z0-9_]+")
_UNITS = ("_seconds", "_bytes")


def test_names_follow_the_prometheus_conventions():
    names = [spec.name for spec in CATALOG]
    assert len(names) == len(set(names))
    for spec in CATALOG:
        assert spec.name.startswith("kipper_") or spec.name.startswith("process_"), spec.name
        assert not spec.name.endswith("_total"), f"{spec.name}: a counter's _total is added"
        assert spec.help, spec.name
        if spec.kind == "histogram":
            assert spec.name.endswith(_UNITS), f"{spec.name}: a histogram names its unit"


def test_the_dashboard_queries_only_catalogued_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    for expr in exprs:
        names = _METRIC_NAME.findall(expr)
        assert names, expr
        for name in names:
            spec = spec_of(name)
            # Not only a name under a documented prefix: one the live test checks for.
            assert spec is not None and not spec.is_prefix, f"{name} (in {expr!r}) is not exported"


def test_the_dashboard_covers_what_an_operator_alerts_on():
    text = DASHBOARD.read_text()
    for name in ("kipper_under_replicated_partitions", "kipper_offline_partitions",
                 "kipper_under_min_isr_partitions", "kipper_isr_shrinks_total",
                 "kipper_active_controller", "kipper_request_seconds_bucket",
                 "kipper_topic_bytes_in_total", "kipper_topic_bytes_out_total",
                 "kipper_consumer_group_lag", "kipper_event_loop_lag_seconds_bucket",
                 "process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_open_fds", "kipper_diskless_wal_upload_seconds_bucket",
                 "kipper_diskless_wal_commit_seconds_bucket",
                 "kipper_diskless_read_cache_download_seconds_bucket",
                 "kipper_diskless_read_cache_hits_total", "kipper_diskless_coordinator_empty_objects",
                 "kipper_active_tiered_step_seconds_bucket"):
        assert name in text, name
