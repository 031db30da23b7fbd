"""Reading kipper's metrics: /metrics.json rows and /metrics scrapes."""

from __future__ import annotations

import urllib.request

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families


def az_locality(row: dict) -> str:
    """"same", "cross" or "unknown": where a /metrics.json network row's peer is."""
    if row["peer_az"] == "unknown":
        return "unknown"
    return "same" if row["peer_az"] == row["local_az"] else "cross"


def scrape(url: str) -> dict[str, Metric]:
    """A node's /metrics, parsed: family name (a counter's without _total) -> family."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def total(scrapes: list[dict[str, Metric]], sample: str, **labels: str) -> float:
    """The sum over nodes of the samples named ``sample`` whose labels include ``labels``."""
    return sum(s.value for families in scrapes for family in families.values()
               for s in family.samples
               if s.name == sample and labels.items() <= s.labels.items())
