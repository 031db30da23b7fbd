"""Object-store client configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .latency import LATENCY_PROFILES

MiB = 1 << 20


@dataclass(frozen=True)
class ObjectStoreConfig:
    # None starts an embedded S3 server (moto) owned by the ObjectStore.
    endpoint_url: str | None = None
    # None means botocore's usual credential chain (env, ~/.aws, instance role); the
    # embedded server accepts anything.
    access_key: str | None = None
    secret_key: str | None = None
    region: str = "us-east-1"
    # "path" works with moto, MinIO and LocalStack without wildcard DNS.
    addressing_style: str = "path"
    # The AZ of the process using the store (the broker's rack); labels every request.
    az: str = "az1"

    connect_timeout_s: float = 5.0
    # botocore's, per socket read of one attempt: it does not bound a whole request.
    read_timeout_s: float = 30.0
    # Bounds one whole operation (every attempt, backoff and wait for a pooled connection):
    # a store that accepts connections and never answers must fail the caller, which then
    # falls back or answers its client, rather than hold it for attempts x read timeout.
    request_timeout_s: float = 5.0
    max_pool_connections: int = 64

    # Attempts per request, the first included. Throttling, 5xx and connection errors
    # are retried after an exponential backoff with full jitter.
    max_attempts: int = 5
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0

    # Objects larger than the threshold are uploaded in parts, several at a time.
    multipart_threshold: int = 16 * MiB
    multipart_part_size: int = 16 * MiB
    multipart_concurrency: int = 4

    # Ranges of one object closer than this are read with a single GET: reading a few
    # hundred KiB more costs far less than another request's price and latency.
    coalesce_gap: int = 1 * MiB

    # A key of latency.LATENCY_PROFILES: "none", "s3-standard", "s3-express", or "aws"
    # (standard for the regional WAL bucket, express for the per-AZ fast buckets).
    latency_profile: str = "none"
    # Seeds the latency, fault and backoff draws; None = unpredictable.
    seed: int | None = None
    # Fault specs applied at start, in the format FaultInjector.apply_fault takes.
    faults: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.latency_profile not in LATENCY_PROFILES:
            raise ValueError(
                f"unknown latency profile {self.latency_profile!r}; "
                f"choose one of {', '.join(LATENCY_PROFILES)}"
            )
        if self.multipart_part_size < 5 * MiB:
            raise ValueError("S3 requires multipart parts of at least 5 MiB")
        if self.multipart_threshold < self.multipart_part_size:
            raise ValueError("multipart_threshold must be at least multipart_part_size")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
