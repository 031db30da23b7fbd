"""Latency profiles: the distribution's quantiles, seeding, and the delay on real requests."""

from __future__ import annotations

import random
import statistics

import pytest

from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreConfig, fast_bucket
from storage.objectstore.latency import S3_EXPRESS, S3_STANDARD, LatencyModel


def quantiles_ms(model: LatencyModel, kind: str, bucket: str, n: int = 20_000) -> tuple[float, float]:
    cuts = statistics.quantiles((model.sample_s(kind, bucket) * 1000 for _ in range(n)), n=100)
    return cuts[49], cuts[98]


@pytest.mark.parametrize("profile, table, bucket", [
    ("s3-standard", S3_STANDARD, WAL_BUCKET),
    ("s3-express", S3_EXPRESS, fast_bucket("az1")),
    ("aws", S3_STANDARD, WAL_BUCKET),
    ("aws", S3_EXPRESS, fast_bucket("az3")),
])
@pytest.mark.parametrize("kind", ["put", "get", "delete", "list"])
def test_sampled_quantiles_match_the_table(profile, table, bucket, kind) -> None:
    p50, p99 = quantiles_ms(LatencyModel(profile, random.Random(42)), kind, bucket)
    assert p50 == pytest.approx(table[kind].p50_ms, rel=0.05)
    assert p99 == pytest.approx(table[kind].p99_ms, rel=0.12)


def test_s3_standard_uploads_look_like_kip_1150() -> None:
    p50, p99 = quantiles_ms(LatencyModel("s3-standard", random.Random(1)), "put", WAL_BUCKET)
    assert 90 < p50 < 110 and 260 < p99 < 340


def test_seeded_draws_repeat_and_none_adds_nothing() -> None:
    first, second = (LatencyModel("s3-standard", random.Random(3)) for _ in range(2))
    assert [first.sample_s("get", WAL_BUCKET) for _ in range(5)] == [
        second.sample_s("get", WAL_BUCKET) for _ in range(5)]
    assert LatencyModel("none", random.Random(3)).sample_s("put", WAL_BUCKET) == 0


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(ValueError, match="s3-express"):
        ObjectStoreConfig(latency_profile="s3-glacier")


async def test_requests_are_delayed_by_the_profile(s3_endpoint, s3_prefix: str) -> None:
    bucket = fast_bucket("az1")
    async with ObjectStore(s3_endpoint.config(latency_profile="s3-express", seed=5)) as store:
        for i in range(20):
            await store.put(bucket, f"{s3_prefix}{i}", b"payload")
        [row] = [r for r in store.accounting.snapshot()["requests"] if r["operation"] == "PutObject"]

    # Without faults or retries the store's seeded stream feeds only the latency draws.
    expected = LatencyModel("s3-express", random.Random(5))
    added_s = sum(expected.sample_s("put", bucket) for _ in range(20))
    assert row["latency_sum_s"] >= added_s


def test_quantiles_of_the_profile() -> None:
    model = LatencyModel("s3-standard")
    assert model.quantile_s("put", WAL_BUCKET, 0.5) == pytest.approx(0.100)
    assert model.quantile_s("put", WAL_BUCKET, 0.99) == pytest.approx(0.300)
    # Between them for the lognormal: where hedged WAL uploads send their second PUT.
    assert model.quantile_s("put", WAL_BUCKET, 0.95) == pytest.approx(0.2174, abs=1e-4)
    assert LatencyModel("none").quantile_s("put", WAL_BUCKET, 0.95) is None
