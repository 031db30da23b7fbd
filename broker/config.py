"""Broker configuration: defaults < TOML file < KIPPER_* environment < command-line flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class BrokerConfig:
    node_id: int = 0
    # host:port to bind; port 0 picks a free port (the chosen one is logged and advertised).
    listener: str = "127.0.0.1:9092"
    advertised_listener: str | None = None
    rack: str | None = None
    data_dir: Path = Path("data/broker-0")
    cluster_id: str = "kipper-cluster"
    max_request_bytes: int = 100 * 1024 * 1024
    connections_max_idle_ms: int = 600_000
    auto_create_topics: bool = False
    default_partitions: int = 1
    default_replication_factor: int = 1
    default_storage_mode: str = "classic"
    log_retention_check_interval_ms: int = 300_000
    log_flush_interval_ms: int = 1_000
    # host:port of the controller; none means this process runs it (like broker 0 by default).
    controller: str | None = None
    # False for `kipper controller`: a controller-only process serving no partitions.
    broker_role: bool = True
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 500
    replica_lag_time_max_ms: int = 30_000
    unclean_leader_election: bool = False
    # host:port of the HTTP metrics endpoint (/metrics, /metrics.json); none = no endpoint.
    metrics_listener: str | None = None
    # S3 endpoint URL of the object store (MinIO, LocalStack, AWS, or `kipper cluster up`'s
    # embedded server). Without one, active-tiered and diskless topics cannot be opened.
    s3_endpoint: str | None = None
    # None = botocore's credential chain (AWS_ACCESS_KEY_ID, ~/.aws, instance role).
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    # storage.objectstore.latency profile added to every request: none, s3-standard,
    # s3-express or aws, so a laptop run shows cloud latencies.
    s3_latency_profile: str = "none"
    # Prepended to every object key this cluster writes, so clusters can share buckets.
    s3_key_prefix: str = ""
    # Diskless topics (KIP-1150/1163): the WAL buffer shared by all diskless partitions is
    # closed, uploaded and committed after this long or at this size.
    diskless_append_commit_interval_ms: int = 250
    diskless_append_buffer_max_bytes: int = 8 * 1024 * 1024
    diskless_read_cache_max_bytes: int = 256 * 1024 * 1024
    # The batch coordinator's housekeeping (retention, GC, merging): see
    # coordinator/diskless_housekeeping.py.
    diskless_housekeeping_interval_ms: int = 5_000
    diskless_object_delete_delay_ms: int = 60_000
    diskless_orphan_grace_ms: int = 600_000
    diskless_merge_max_object_bytes: int = 4 * 1024 * 1024
    diskless_merge_min_objects: int = 8
    # Directory where the produce traffic received is written as a bench trace; none = off.
    capture_trace_dir: Path | None = None
    # Active-tiered (KIP-1176): the broker's WAL uploader closes a combined object of all its
    # leader partitions' new bytes every interval, or sooner once it holds max_bytes.
    active_tiered_upload_interval_ms: int = 100
    active_tiered_upload_max_bytes: int = 4 << 20
    # A follower that cannot get a WAL range in this time (its bytes, or with the topic
    # scheme its metadata) asks the leader for the records instead.
    active_tiered_download_timeout_ms: int = 2000
    # Broker-wide defaults for topic configs (e.g. {"retention.ms": "3600000"}).
    topic_defaults: dict[str, str] = field(default_factory=dict)

    @property
    def host_port(self) -> tuple[str, int]:
        return split_host_port(self.listener)

    def topic_config_defaults(self) -> dict[str, str]:
        return {"kipper.storage.mode": self.default_storage_mode, **self.topic_defaults}


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listener {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _coerce(kind: str, raw: Any) -> Any:
    """Convert a TOML/env/CLI value to the field's declared type (annotations are strings)."""
    if kind == "int":
        return int(raw)
    if kind == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes", "on")
    if kind in ("Path", "Path | None"):
        return Path(raw)
    if kind.startswith("dict"):
        return {str(k): str(v) for k, v in dict(raw).items()}
    return None if raw is None else str(raw)


def load_config(config_file: Path | None = None, overrides: dict[str, Any] | None = None,
                environ: dict[str, str] | None = None) -> BrokerConfig:
    environ = os.environ if environ is None else environ
    kinds = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}
    values: dict[str, Any] = {}
    if config_file is not None:
        with open(config_file, "rb") as f:
            for key, raw in tomllib.load(f).items():
                name = key.replace("-", "_").replace(".", "_")
                if name not in kinds:
                    raise ValueError(f"{config_file}: unknown broker setting {key!r}")
                values[name] = raw
    for name in kinds:
        env_key = "KIPPER_" + name.upper()
        if env_key in environ:
            values[name] = environ[env_key]
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = raw
    return BrokerConfig(**{name: _coerce(kinds[name], raw) for name, raw in values.items()})
