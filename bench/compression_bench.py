"""The CPU cost of broker-side recompression (a topic's compression.type), in one run.

One kipper broker (classic storage, started here on a loopback ephemeral port, stopped by
pid). confluent-kafka produces the same records (compressible JSON-like text by default) to
two topics: one with compression.type=producer, which stores the producer's batches as sent,
and one with compression.type=CODEC, which has the broker decompress and recompress every
batch. Printed: produce throughput and the broker's CPU seconds for each, and the ratios.

    python -m bench.compression_bench                         # 50 MB, lz4 -> zstd
    python -m bench.compression_bench --mb 100 --producer-codec none --topic-codec gzip
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

try:
    from bench.broker_bench import KipperBroker, create_topic, process_cpu, produce
except ImportError:  # run as a plain script: python bench/compression_bench.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.broker_bench import KipperBroker, create_topic, process_cpu, produce


def _payloads(size: int) -> list[bytes]:
    """16 records of ``size`` bytes that compress the way event data does (~3-5x)."""
    out = []
    for i in range(16):
        text = "".join(f'{{"user":{i * 1000 + j},"event":"page_view","path":"/item/{j % 97}",'
                       f'"ms":{j * 7919 % 100000}}}' for j in range(size // 40 + 1))
        out.append(text.encode()[:size])
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="compression_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=50, help="payload megabytes per topic (1e6 B)")
    p.add_argument("--record-size", type=int, default=1024)
    p.add_argument("--producer-codec", default="lz4", help="the producer's compression.type")
    p.add_argument("--topic-codec", default="zstd", help="the recompressing topic's codec")
    p.add_argument("--random", action="store_true", help="incompressible random payloads")
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args(argv)
    args.records = int(args.mb * 1e6 / args.record_size)
    # What broker_bench.produce reads.
    args.acks, args.linger_ms, args.batch_size, args.timeout = "1", 5, 1_000_000, 600
    args.producer_config = [f"compression.type={args.producer_codec}"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    payloads = None if args.random else _payloads(args.record_size)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="kipper-compression-bench-") as tmp:
        broker = KipperBroker(data_dir=Path(tmp) / "data").start()
        try:
            for label, codec in (("producer", "producer"), ("recompress", args.topic_codec)):
                topic = f"bench-{label}-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap, topic, 1, config={"compression.type": codec})
                before = process_cpu(broker.pid)
                result = produce(args, broker.bootstrap, topic, payloads)
                result.broker_cpu = process_cpu(broker.pid) - before
                if result.errors:
                    raise RuntimeError(f"{label}: delivery errors {result.errors}")
                figures[label] = result.as_dict()
                print(f"{label:>10} (compression.type={codec}): {result.mb_per_s:7.1f} MB/s, "
                      f"{result.records_per_s:9.0f} records/s, broker CPU "
                      f"{result.broker_cpu:.1f} s")
        finally:
            broker.stop()
    plain, recompressed = figures["producer"], figures["recompress"]
    figures["throughput_ratio"] = recompressed["mb_per_s"] / plain["mb_per_s"]
    figures["broker_cpu_ratio"] = recompressed["broker_cpu"] / max(plain["broker_cpu"], 1e-9)
    print(f"recompression {args.producer_codec} -> {args.topic_codec}: throughput "
          f"{figures['throughput_ratio']:.2f}x, broker CPU {figures['broker_cpu_ratio']:.2f}x "
          f"of storing the producer's batches")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
