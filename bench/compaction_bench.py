"""Log compaction: the cleaner's throughput and what it costs appends running alongside.

In one process and one event loop, as in a broker, on a local log (the cleaner of classic and
active-tiered logs is the same code; active-tiered only adds uploads):

1. a compacted log of --keys keys x --versions versions (--record-bytes values, one record
   per batch as a keyed changelog produces them, --segment-bytes segments) is written;
2. appends of single records to a second log, --appends of them, timed one by one, with no
   cleaner running: the baseline P50/P99;
3. the same appends while the cleaner cleans the first log (its reading, hashing and writing
   in a thread, the segment swaps on the loop): P50/P99, and the cleaner's MB/s (bytes read
   by the cleaning over its wall time).

Printed: the cleaner's MB/s, records removed, bytes before and after, and the appends' P99
with the cleaner over without (the ratio to watch).

    python -m bench.compaction_bench                       # ~20 s
    python -m bench.compaction_bench --keys 10000 --versions 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from protocol.records import validate_produce_records
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.log_cleaner import CleanerSettings, LogCleaner


def _record(key: bytes, value: bytes) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=time.time_ns() // 1_000_000, key=key, value=value, headers=[])
    return builder.build()


async def _append(log: ClassicLog, key: bytes, value: bytes) -> float:
    records = _record(key, value)
    started = time.perf_counter()
    await log.append(records, validate_produce_records(records), 0)
    return time.perf_counter() - started


def _percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def _timed_appends(log: ClassicLog, count: int, value: bytes) -> list[float]:
    latencies = []
    for i in range(count):
        latencies.append(await _append(log, b"a%d" % i, value))
        await asyncio.sleep(0)  # let the cleaner's swaps in, as a broker's loop would
    return latencies


async def run(args: argparse.Namespace, root: Path) -> None:
    config = LogConfig(compact=True, delete_policy=False, segment_bytes=args.segment_bytes,
                       min_cleanable_dirty_ratio=0.0)
    changelog = ClassicLog("changelog", 0, config, root / "changelog-0")
    value = os.urandom(args.record_bytes)
    for version in range(args.versions):
        for k in range(args.keys):
            await _append(changelog, b"key-%06d" % k, value)
    changelog._local.roll()
    changelog.on_high_watermark_updated(changelog.log_end_offset)
    before = changelog.size_bytes

    target = ClassicLog("appends", 0, LogConfig(segment_bytes=args.segment_bytes),
                        root / "appends-0")
    alone = await _timed_appends(target, args.appends, value)

    cleaner = LogCleaner(root, lambda: {("changelog", 0): changelog},
                         CleanerSettings(dedupe_buffer_size=args.dedupe_buffer_bytes))
    started = time.perf_counter()
    cleaning = asyncio.create_task(cleaner.clean_filthiest())
    during: list[float] = []
    while not cleaning.done():
        during += await _timed_appends(target, 100, value)
    await cleaning
    elapsed = time.perf_counter() - started
    stats = cleaner.metrics.totals

    print(f"log: {args.keys} keys x {args.versions} versions of {args.record_bytes} B, "
          f"{before / 1e6:.1f} MB in {args.segment_bytes >> 10} KiB segments")
    print(f"cleaner: {stats.bytes_read / 1e6 / elapsed:.1f} MB/s read "
          f"({stats.bytes_read / 1e6:.1f} MB in {elapsed:.2f} s), "
          f"{stats.records_removed} of {stats.records_read} records removed, "
          f"{before / 1e6:.1f} MB -> {changelog.size_bytes / 1e6:.2f} MB")
    p50a, p99a = _percentile(alone, 0.5), _percentile(alone, 0.99)
    p50d, p99d = _percentile(during, 0.5), _percentile(during, 0.99)
    print(f"appends alone:        P50 {p50a * 1e6:.0f} us  P99 {p99a * 1e6:.0f} us "
          f"({len(alone)} appends)")
    print(f"appends while cleaning: P50 {p50d * 1e6:.0f} us  P99 {p99d * 1e6:.0f} us "
          f"({len(during)} appends)")
    print(f"ratio with/without cleaner: P50 x{p50d / p50a:.2f}  P99 x{p99d / p99a:.2f}")
    await changelog.close()
    await target.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20)
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--dedupe-buffer-bytes", type=int, default=128 << 20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as root:
        asyncio.run(run(args, Path(root)))


if __name__ == "__main__":
    main()
