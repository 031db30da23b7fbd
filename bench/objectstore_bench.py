"""PUT and GET throughput and latency through kipper's object-store client.

    python -m bench.objectstore_bench                      # embedded S3, profiles none and s3-standard
    python -m bench.objectstore_bench --profiles aws --cases 1MiB:64 --concurrency 16
    python -m bench.objectstore_bench --endpoint http://127.0.0.1:9000 --access-key K --secret-key S

For each latency profile and each SIZE:COUNT case it uploads COUNT objects of SIZE bytes
with CONCURRENCY requests in flight, reads them back the same way, and deletes them.
Latency is per client call (a multipart upload is one call); throughput is payload bytes
over wall time (MB = 10^6 bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import re
import statistics
import time
import uuid
from typing import Any, Awaitable, Callable

from storage.objectstore import WAL_BUCKET, ObjectStore, ObjectStoreConfig
from storage.objectstore.embedded import ACCESS_KEY, SECRET_KEY, EmbeddedS3Process

_SIZE = re.compile(r"^(\d+)(KiB|MiB)?$")
_UNITS = {None: 1, "KiB": 1 << 10, "MiB": 1 << 20}


def parse_case(text: str) -> tuple[int, int]:
    """"1MiB:32" -> (1048576, 32)."""
    size_text, _, count_text = text.partition(":")
    match = _SIZE.match(size_text)
    if match is None or not count_text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not SIZE:COUNT, e.g. 1MiB:32")
    return int(match.group(1)) * _UNITS[match.group(2)], int(count_text)


async def timed_calls(
    calls: list[Callable[[], Awaitable[Any]]], concurrency: int
) -> tuple[list[float], float]:
    """Run the calls with at most `concurrency` at once; (each call's seconds, wall seconds)."""
    slots = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def run(call: Callable[[], Awaitable[Any]]) -> None:
        async with slots:
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(run(call) for call in calls))
    return latencies, time.perf_counter() - started


def summarize(op: str, size: int, latencies: list[float], wall_s: float) -> dict[str, Any]:
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "op": op, "size_bytes": size, "count": len(latencies),
        "mb_per_s": size * len(latencies) / wall_s / 1e6,
        "p50_ms": cuts[49] * 1000, "p90_ms": cuts[89] * 1000, "p99_ms": cuts[98] * 1000,
        "max_ms": max(latencies) * 1000,
    }


async def bench_profile(
    config: ObjectStoreConfig, cases: list[tuple[int, int]], concurrency: int
) -> list[dict]:
    results = []
    async with ObjectStore(config) as store:
        await store.ensure_buckets([])
        for size, count in cases:
            payload = os.urandom(size)
            keys = [f"bench/{uuid.uuid4().hex}/{i}" for i in range(count)]
            put_latencies, put_wall = await timed_calls(
                [functools.partial(store.put, WAL_BUCKET, key, payload) for key in keys], concurrency)
            get_latencies, get_wall = await timed_calls(
                [functools.partial(store.get, WAL_BUCKET, key) for key in keys], concurrency)
            await store.delete(WAL_BUCKET, keys)
            for op, latencies, wall in (("PUT", put_latencies, put_wall), ("GET", get_latencies, get_wall)):
                results.append({"profile": config.latency_profile, **summarize(op, size, latencies, wall)})
    return results


def print_table(results: list[dict]) -> None:
    header = (f"{'profile':<12} {'op':<4} {'size':>9} {'count':>5} {'MB/s':>8} "
              f"{'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(header)
    print("-" * len(header))
    for r in results:
        size = f"{r['size_bytes'] >> 20}MiB" if r["size_bytes"] >= 1 << 20 else f"{r['size_bytes'] >> 10}KiB"
        print(f"{r['profile']:<12} {r['op']:<4} {size:>9} {r['count']:>5} {r['mb_per_s']:>8.1f} "
              f"{r['p50_ms']:>8.1f} {r['p90_ms']:>8.1f} {r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}")


async def run(args: argparse.Namespace, endpoint: str, access_key: str, secret_key: str) -> list[dict]:
    results = []
    for profile in args.profiles.split(","):
        config = ObjectStoreConfig(endpoint_url=endpoint, access_key=access_key, secret_key=secret_key,
                                   latency_profile=profile, seed=args.seed,
                                   max_pool_connections=max(10, args.concurrency))
        results += await bench_profile(config, args.cases, args.concurrency)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", help="S3 endpoint URL; default: start the embedded server")
    parser.add_argument("--access-key", default=ACCESS_KEY)
    parser.add_argument("--secret-key", default=SECRET_KEY)
    parser.add_argument("--profiles", default="none,s3-standard", help="comma-separated latency profiles")
    parser.add_argument("--cases", type=parse_case, nargs="+",
                        default=[parse_case(c) for c in ("64KiB:256", "1MiB:64", "8MiB:16", "64MiB:4")],
                        metavar="SIZE:COUNT")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)

    with contextlib.ExitStack() as stack:
        endpoint = args.endpoint
        if endpoint is None:
            endpoint = stack.enter_context(EmbeddedS3Process()).endpoint_url
        results = asyncio.run(run(args, endpoint, args.access_key, args.secret_key))
    print_table(results)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
