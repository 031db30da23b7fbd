"""Latency profiles: delay added to each request so a laptop run behaves like the cloud.

Each (profile, bucket class, operation kind) has a P50 and a P99; the delay is drawn from
the lognormal distribution with those two quantiles. The table is documented, with its
sources, in docs/object-storage.md; keep the two in step.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass
from statistics import NormalDist

from .names import REGIONAL, bucket_az

_Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class Quantiles:
    p50_ms: float
    p99_ms: float


# S3 Standard: uploads as quoted in KIP-1150 (P50 ~100 ms, P99 ~300 ms); GET is time to
# first byte. S3 Express One Zone: AWS promises "single-digit millisecond" requests.
S3_STANDARD = {
    "put": Quantiles(100, 300),
    "get": Quantiles(25, 100),
    "delete": Quantiles(30, 100),
    "list": Quantiles(50, 150),
}
S3_EXPRESS = {
    "put": Quantiles(5, 10),
    "get": Quantiles(3, 8),
    "delete": Quantiles(3, 8),
    "list": Quantiles(5, 15),
}


@dataclass(frozen=True)
class Profile:
    regional: dict[str, Quantiles]  # the kipper-wal bucket
    zonal: dict[str, Quantiles]  # the per-AZ kipper-fast-<az> buckets


LATENCY_PROFILES = {
    "none": Profile(regional={}, zonal={}),
    "s3-standard": Profile(regional=S3_STANDARD, zonal=S3_STANDARD),
    "s3-express": Profile(regional=S3_EXPRESS, zonal=S3_EXPRESS),
    # What the KIPs assume on AWS: the diskless WAL in S3 Standard, the active-tiered
    # fast buckets in S3 Express One Zone.
    "aws": Profile(regional=S3_STANDARD, zonal=S3_EXPRESS),
}


class LatencyModel:
    def __init__(self, profile: str, rng: random.Random | None = None) -> None:
        self.profile = LATENCY_PROFILES[profile]
        self._rng = rng or random.Random()

    def sample_s(self, kind: str, bucket: str) -> float:
        """One delay in seconds for a request of this kind to this bucket."""
        parameters = self._lognormal(kind, bucket)
        if parameters is None:
            return 0.0
        return self._rng.lognormvariate(*parameters) / 1000

    def quantile_s(self, kind: str, bucket: str, q: float) -> float | None:
        """The q-quantile of the delay in seconds (e.g. 0.95 for the P95), None where the
        profile adds none."""
        parameters = self._lognormal(kind, bucket)
        if parameters is None:
            return None
        mu, sigma = parameters
        return math.exp(mu + sigma * NormalDist().inv_cdf(q)) / 1000

    def _lognormal(self, kind: str, bucket: str) -> tuple[float, float] | None:
        """(mu, sigma) of the delay in ms, from the profile's P50 and P99."""
        table = self.profile.regional if bucket_az(bucket) == REGIONAL else self.profile.zonal
        quantiles = table.get(kind)
        if quantiles is None:
            return None
        return (math.log(quantiles.p50_ms),
                math.log(quantiles.p99_ms / quantiles.p50_ms) / _Z99)

    async def delay(self, kind: str, bucket: str) -> None:
        seconds = self.sample_s(kind, bucket)
        if seconds > 0:
            await asyncio.sleep(seconds)
