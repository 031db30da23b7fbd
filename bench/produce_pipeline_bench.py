"""Broker CPU per acks=all Produce request on a local cluster, few partitions against many.

librdkafka sends one request per partition batch and sizes its batches by how fast the
brokers take its requests, so over 10,000 partitions the same 500 MB took it 18,000 to
37,000 requests from one run to the next (bench/README.md, sessions 24-25), and the
throughput followed the count. This bench takes the client out: it encodes ``--requests``
one-partition Produce v9 requests of ``--records`` 1 KiB records, round robin over the
partitions, and writes them down one connection per partition leader, all at once
(pipelined, as librdkafka does), then reads every answer. What is left is the brokers' cost
of a request, replication included, at each partition count:

    python -m bench.produce_pipeline_bench --brokers 3 --partitions 10,10000

prints, per round, the brokers' CPU seconds per request (user and system), the MB/s, the
page faults, and at the end the ratio of the many-partition cost per request to the
10-partition one.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from protocol.apis import ApiKey
from protocol.framing import decode_response
from protocol.records import build_batch

from .broker_bench import process_counters, wait_until_listable
from .local_cluster import LocalCluster
from .request_cost_bench import PRODUCE_VERSION, produce_frame
from .scale_bench import create

# At most this many rounds of warm_up before giving up.
WARM_UP_ATTEMPTS = 10
# Frames written to the socket at a time.
FRAMES_PER_WRITE = 64
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Round:
    requests: int
    seconds: float
    mb_per_s: float
    user_s: float
    system_s: float
    page_faults: int
    errors: dict[str, int]

    @property
    def us_per_request(self) -> float:
        return (self.user_s + self.system_s) / self.requests * 1e6


def _counters(pids: list[int]) -> tuple[float, float, int]:
    user, system, faults = zip(*(process_counters(pid) for pid in pids))
    return sum(user), sum(system), sum(faults)


def _frames_by_leader(admin: AdminClient, topic: str, partitions: int, requests: int,
                      records: int, acks: int) -> tuple[dict[tuple[str, int], list[bytes]], int]:
    metadata = admin.list_topics(topic, timeout=30)
    leaders = {p: metadata.topics[topic].partitions[p].leader for p in range(partitions)}
    addresses = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
    batch = bytes(build_batch([(None, os.urandom(1024))] * records, int(time.time() * 1000)))
    frames: dict[tuple[str, int], list[bytes]] = {}
    for i in range(requests):
        partition = i % partitions
        frames.setdefault(addresses[leaders[partition]], []).append(
            produce_frame(topic, partition, batch, acks, correlation_id=i))
    return frames, len(batch)


def _pipeline(address: tuple[str, int], frames: list[bytes], errors: Counter) -> None:
    """Write every frame down one connection while reading the answers."""
    def write(sock: socket.socket) -> None:
        for start in range(0, len(frames), FRAMES_PER_WRITE):
            sock.sendall(b"".join(frames[start:start + FRAMES_PER_WRITE]))

    with socket.create_connection(address) as sock:
        writer = threading.Thread(target=write, args=(sock,))
        writer.start()
        with sock.makefile("rb", buffering=1 << 20) as answers:
            for _ in frames:
                (size,) = _SIZE.unpack(answers.read(_SIZE.size))
                _, body = decode_response(answers.read(size), ApiKey.PRODUCE, PRODUCE_VERSION)
                for topic in body.responses:
                    for partition in topic.partition_responses:
                        if partition.error_code != 0:
                            errors[partition.error_code.name] += 1
        writer.join()


def _send_all(frames: dict[tuple[str, int], list[bytes]]) -> Counter:
    errors: Counter = Counter()
    threads = [threading.Thread(target=_pipeline, args=(address, leader_frames, errors))
               for address, leader_frames in frames.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def warm_up(admin: AdminClient, topic: str, partitions: int, acks: int) -> None:
    """One acks=all request to every partition, again until all succeed: a new topic's
    leaders answer before its followers have made their replicas (a log each, in the
    background), and the first round after creating 10,000 partitions had 180 requests time
    out waiting for them (30 s), which measured log creation, not requests."""
    frames, _ = _frames_by_leader(admin, topic, partitions, partitions, 1, acks)
    for _ in range(WARM_UP_ATTEMPTS):
        errors = _send_all(frames)
        if not errors:
            return
        print(f"warming up {topic}: {dict(errors)}; again", flush=True)
    raise RuntimeError(f"{topic}: requests still fail after {WARM_UP_ATTEMPTS} rounds")


def measure(cluster: LocalCluster, topic: str, partitions: int, args: argparse.Namespace,
            ) -> list[Round]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, topic, partitions, args.brokers)
    wait_until_listable(cluster.bootstrap, topic, partitions, 300)
    warm_up(admin, topic, partitions, args.acks)
    frames, batch_size = _frames_by_leader(admin, topic, partitions, args.requests,
                                           args.records, args.acks)
    pids = [int(cluster.broker(node)["pid"]) for node in range(args.brokers)]
    rounds = []
    for _ in range(args.rounds):
        os.sync()  # each round starts with the page cache written back
        before, started = _counters(pids), time.perf_counter()
        errors = _send_all(frames)
        seconds = time.perf_counter() - started
        user, system, faults = (a - b for a, b in zip(_counters(pids), before))
        result = Round(args.requests, seconds, args.requests * batch_size / seconds / 1e6,
                       user, system, faults, dict(errors))
        print(f"{partitions:>6} partitions: {result.us_per_request:6.0f} us a request "
              f"(user {user:.2f} s, system {system:.2f} s), {result.mb_per_s:6.1f} MB/s, "
              f"{faults} page faults, errors {result.errors or 'none'}", flush=True)
        rounds.append(result)
    return rounds


def run(args: argparse.Namespace) -> dict[int, list[Round]]:
    sizes = [int(n) for n in args.partitions.split(",")]
    root = Path(tempfile.mkdtemp(prefix="kipper-pipeline-"))
    cluster = LocalCluster(root, brokers=args.brokers).start()
    try:
        results = {n: measure(cluster, f"pipeline-{n}", n, args) for n in sizes}
    finally:
        cluster.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)
    print(f"{args.requests} requests of {args.records} x 1 KiB, acks={args.acks}, "
          f"{args.brokers} broker(s), RF={args.brokers}; median of {args.rounds} rounds:")
    medians = {n: statistics.median(r.us_per_request for r in rounds)
               for n, rounds in results.items()}
    for n, median in medians.items():
        ratio = f" ({median / medians[sizes[0]]:.2f}x the {sizes[0]}-partition cost)" \
            if n != sizes[0] else ""
        print(f"  {n:>6} partitions: {median:6.0f} us of brokers' CPU a request{ratio}")
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="produce_pipeline_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=3, help="brokers, and the replication factor")
    p.add_argument("--partitions", default="10,10000", help="partition counts, the first the base")
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--records", type=int, default=26,
                   help="1 KiB records a request (26: what librdkafka sent on average over "
                        "10,000 partitions)")
    p.add_argument("--acks", type=int, default=-1, choices=(-1, 1))
    p.add_argument("--rounds", type=int, default=3)
    results = run(p.parse_args(argv))
    return 1 if any(r.errors for rounds in results.values() for r in rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
