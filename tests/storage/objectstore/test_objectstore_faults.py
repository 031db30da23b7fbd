"""Retries, error rates, outage windows and slow requests, and switching them at runtime."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from storage.objectstore import WAL_BUCKET, FaultAdminServer, ObjectStore, ObjectStoreUnavailable
from storage.objectstore.cli import main as cli_main
from storage.objectstore.cli import parse_duration
from storage.objectstore.faults import FaultInjector


def put_counts(store: ObjectStore) -> tuple[int, int]:
    """(requests, errors) of PutObject to the WAL bucket."""
    for row in store.accounting.snapshot()["requests"]:
        if (row["operation"], row["bucket"]) == ("PutObject", WAL_BUCKET):
            return row["requests"], row["errors"]
    return 0, 0


async def test_injected_errors_are_retried(s3_endpoint, s3_prefix: str) -> None:
    config = s3_endpoint.config(seed=7, max_attempts=10, backoff_base_s=0.001,
                                faults=({"fault": "errors", "op": "put", "rate": 0.5},))
    async with ObjectStore(config) as store:
        for i in range(20):
            await store.put(WAL_BUCKET, f"{s3_prefix}{i}", b"payload")
        assert await store.get(WAL_BUCKET, f"{s3_prefix}19") == b"payload"  # gets are unaffected

        requests, errors = put_counts(store)
        assert requests == 20 + errors
        assert 5 <= errors <= 40


async def test_retries_give_up_after_max_attempts(s3_endpoint, s3_prefix: str) -> None:
    config = s3_endpoint.config(max_attempts=3, backoff_base_s=0.001,
                                faults=({"fault": "errors", "rate": 1.0},))
    async with ObjectStore(config) as store:
        with pytest.raises(ObjectStoreUnavailable, match="failed 3 time"):
            await store.put(WAL_BUCKET, s3_prefix + "x", b"payload")
        assert put_counts(store) == (3, 3)


async def test_outage_window_fails_calls_then_recovers(s3_endpoint, s3_prefix: str) -> None:
    async with ObjectStore(s3_endpoint.config(max_attempts=1)) as store:
        store.faults.apply_fault({"fault": "outage", "for_s": 0.5})
        with pytest.raises(ObjectStoreUnavailable, match="outage"):
            await store.put(WAL_BUCKET, s3_prefix + "during", b"payload")
        await asyncio.sleep(0.6)
        await store.put(WAL_BUCKET, s3_prefix + "after", b"payload")
        assert put_counts(store) == (2, 1)
        assert store.faults.show()["outages"] == []


async def test_retries_ride_out_a_short_outage(s3_endpoint, s3_prefix: str) -> None:
    config = s3_endpoint.config(seed=1, max_attempts=8, backoff_base_s=0.1, backoff_max_s=0.2)
    async with ObjectStore(config) as store:
        store.faults.apply_fault({"fault": "outage", "for_s": 0.3})
        await store.put(WAL_BUCKET, s3_prefix + "x", b"payload")
        requests, errors = put_counts(store)
        assert errors >= 1 and requests == errors + 1


async def test_outage_configured_at_start(s3_endpoint, s3_prefix: str) -> None:
    config = s3_endpoint.config(max_attempts=1, faults=({"fault": "outage", "after_s": 1.0, "for_s": 0.5},))
    async with ObjectStore(config) as store:
        started = time.monotonic()
        await store.put(WAL_BUCKET, s3_prefix + "before", b"payload")
        await asyncio.sleep(started + 1.1 - time.monotonic())
        with pytest.raises(ObjectStoreUnavailable):
            await store.put(WAL_BUCKET, s3_prefix + "during", b"payload")
        await asyncio.sleep(started + 1.6 - time.monotonic())
        await store.put(WAL_BUCKET, s3_prefix + "after", b"payload")


async def test_hanging_outage_holds_requests_until_the_read_timeout(s3_endpoint, s3_prefix: str) -> None:
    config = s3_endpoint.config(read_timeout_s=0.2, max_attempts=2, backoff_base_s=0.001)
    async with ObjectStore(config) as store:
        store.faults.apply_fault({"fault": "outage", "for_s": 5, "mode": "hang"})
        started = time.monotonic()
        with pytest.raises(ObjectStoreUnavailable, match="read timeout"):
            await store.get(WAL_BUCKET, s3_prefix + "x")
        assert 0.4 <= time.monotonic() - started < 1.0


async def test_slow_requests(object_store: ObjectStore, s3_prefix: str) -> None:
    await object_store.put(WAL_BUCKET, s3_prefix + "x", b"payload")
    object_store.faults.apply_fault({"fault": "slow", "op": "get", "rate": 1.0, "delay_ms": 150})
    started = time.monotonic()
    await object_store.get(WAL_BUCKET, s3_prefix + "x")
    assert time.monotonic() - started >= 0.15

    object_store.faults.apply_fault({"fault": "slow", "op": "get", "rate": 0})
    assert object_store.faults.show()["slow"] == {}


@pytest.mark.parametrize("spec", [
    {"fault": "errors", "op": "put", "rate": 2},
    {"fault": "errors", "op": "copy", "rate": 0.5},
    {"fault": "outage"},
    {"fault": "outage", "for_s": 1, "mode": "explode"},
    {"fault": "meteor"},
    ["not", "an", "object"],
])
def test_bad_fault_specs_are_refused(spec) -> None:
    with pytest.raises(ValueError):
        FaultInjector().apply_fault(spec)


def test_outage_state_follows_the_clock() -> None:
    now = [100.0]
    faults = FaultInjector(clock=lambda: now[0])
    faults.apply_fault({"fault": "outage", "after_s": 5, "for_s": 10, "mode": "hang"})
    assert faults.show()["outages"] == [{"starts_in_s": 5.0, "ends_in_s": 15.0, "mode": "hang"}]
    now[0] = 116.0
    assert faults.show()["outages"] == []


def test_parse_duration() -> None:
    assert [parse_duration(t) for t in ("10s", "500ms", "2m", "1.5")] == [10.0, 0.5, 120.0, 1.5]


async def test_cli_switches_faults_through_the_admin_endpoint(
    object_store: ObjectStore, s3_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = FaultAdminServer(object_store.faults)
    url = await admin.start()
    try:
        async def kipper(*argv: str) -> tuple[int, str]:
            # The CLI blocks on HTTP; the admin server needs this event loop meanwhile.
            code = await asyncio.to_thread(cli_main, ["s3-fault", "--admin", url, *argv])
            return code, capsys.readouterr().out

        assert await kipper("errors", "--op", "put", "--rate", "1") == (
            0, json.dumps({"errors": {"put": 1.0}, "slow": {}, "outages": []}, indent=2) + "\n")
        with pytest.raises(ObjectStoreUnavailable):
            await object_store.put(WAL_BUCKET, s3_prefix + "x", b"payload")

        code, out = await kipper("outage", "--for", "10s", "--hang")
        assert code == 0 and json.loads(out)["outages"][0]["mode"] == "hang"
        code, out = await kipper("slow", "--op", "get", "--delay", "250ms")
        assert json.loads(out)["slow"] == {"get": {"rate": 1.0, "delay_ms": 250.0}}

        assert (await kipper("clear"))[0] == 0
        code, out = await kipper("show")
        assert code == 0 and json.loads(out) == {"errors": {}, "slow": {}, "outages": []}
        await object_store.put(WAL_BUCKET, s3_prefix + "x", b"payload")

        assert (await kipper("errors", "--rate", "7"))[0] == 1  # refused by the server: HTTP 400
    finally:
        await admin.stop()
    assert await asyncio.to_thread(cli_main, ["s3-fault", "--admin", url, "show"]) == 1  # nobody listening
