"""bench/diskless_sweep_bench.py without a cluster: rounds of a case pooled, the table and the
verdict against the issue's target."""

from __future__ import annotations

from bench.diskless_sweep_bench import SweepResult, combine, model, table, verdicts


def result(hedged=False, uploads=100, hedged_puts=0, load=2.0, errors=None):
    return SweepResult("s3-standard", 250, hedged, 100, errors or {}, 0.0, 0.0, 10.0, uploads,
                       hedged_puts, hedged_puts // 2, 3, load)


def test_rounds_pool_latencies_and_add_counts():
    rounds = [(result(True, 100, 10, 2.0, {"timeout": 1}), [float(ms) for ms in range(1, 101)]),
              (result(True, 140, 20, 4.0, {"timeout": 2}),
               [float(ms) for ms in range(101, 201)])]
    pooled = combine(rounds)
    assert (pooled.records, pooled.uploads, pooled.hedged_puts, pooled.seconds) == (200, 240, 30,
                                                                                  20.0)
    assert (pooled.p50_ms, pooled.p99_ms) == (101.0, 199.0)  # nearest rank over all 200
    assert pooled.errors == {"timeout": 3} and pooled.load_average == 3.0
    assert pooled.puts_per_s_per_broker == 270 / 20 / 3
    assert pooled.extra_put_share == 30 / 240


def test_table_and_verdict_at_the_target_interval():
    single = combine([(result(), [300.0] * 99 + [450.0])])
    hedged = combine([(result(True, 100, 8), [300.0] * 100)])
    assert "| s3-standard | 250 ms | yes | 100 | 300 | 300 | 3.60 | 8.0% | 4/8 | 2.0 |" in table(
        [single, hedged])
    assert verdicts([single, hedged]) == [
        "s3-standard, 250 ms (target P99 <= 400 ms): one PUT P99 450 ms (NOT met) at 3.33 PUT/s "
        "per broker; hedged P99 300 ms (met) at 3.60 PUT/s per broker"]


def test_model_of_the_profiles_alone():
    single, hedged = (model("s3-standard", 250, h, samples=20_000) for h in (False, True))
    # Uniform wait over 250 ms plus the lognormal PUT (P50 100, P99 300 ms).
    assert 220 < single.p50_ms < 250 and 440 < single.p99_ms < 500
    assert hedged.p99_ms < single.p99_ms and 0.04 < hedged.extra_put_share < 0.06
    assert single.extra_put_share == 0
    assert model("s3-express", 250, False, samples=20_000).p99_ms < 270
