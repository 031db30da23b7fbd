"""Reading kipper's /metrics.json rows."""

from __future__ import annotations


def az_locality(row: dict) -> str:
    """"same", "cross" or "unknown": where a /metrics.json network row's peer is."""
    if row["peer_az"] == "unknown":
        return "unknown"
    return "same" if row["peer_az"] == row["local_az"] else "cross"
