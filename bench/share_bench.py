"""Share groups (KIP-932): delivery throughput and redelivery latency, per storage mode.

One `kipper cluster up` (3 brokers in az1..az3, the embedded S3 server), all on loopback,
everything measured in one run so the ratios compare like with like. Per storage mode
(classic RF=3, active-tiered RF=3, diskless), on a 2-partition topic filled beforehand with
--records records of --record-bytes:

1. Throughput: --members confluent-kafka ShareConsumers (implicit acknowledgement: each
   poll accepts the previous one's records) in one share group read every record; distinct
   records/s from their start to the last record, and the deliveries it took (a record whose
   lock expired before its member's acknowledgement is delivered again). For scale, one classic Consumer of a consumer group
   reads the same topic: the ratio share/consumer is what queue semantics (acquisition,
   acknowledgement written to __share_group_state) cost here.
2. Release → redelivery: one ShareConsumer in explicit mode releases every record at its
   first delivery (commit_sync), accepts it at the second; latency from the release's
   confirmation to the record's next delivery, P50/P99 (nearest rank).
3. Lock expiry → redelivery: on a topic of 100 records, a member takes records and never
   answers; another member's delivery of them comes --lock-ms later plus this latency
   (P50/P99 of delivery time minus the lock duration).

    python -m bench.share_bench                      # ~3 minutes
    python -m bench.share_bench --records 20000 --modes diskless --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.local_cluster import LocalCluster

MODES = ("classic", "active-tiered", "diskless")
REPLICATION = {"classic": 3, "active-tiered": 3, "diskless": 1}
PARTITIONS = 2
HELD_RECORDS = 100


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def create(admin: AdminClient, topic: str, mode: str) -> None:
    admin.create_topics([NewTopic(topic, PARTITIONS, REPLICATION[mode],
                                  config={"kipper.storage.mode": mode})])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = admin.list_topics(topic, timeout=5).topics.get(topic)
        if info and info.error is None and all(p.leader >= 0 for p in info.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} has no leaders")


def fill(bootstrap: str, topic: str, records: int, record_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    value = os.urandom(record_bytes)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def share_throughput(bootstrap: str, topic: str, members: int, records: int) -> dict:
    group = f"bench-share-{uuid.uuid4().hex[:6]}"
    seen: set[tuple[int, int]] = set()
    per_member = [0] * members
    redelivered = [0]
    lock = threading.Lock()
    done = threading.Event()
    last = [0.0]

    def member(i: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "client.id": f"bench,az=az{i % 3 + 1}",
                                  "client.rack": f"az{i % 3 + 1}"})
        consumer.subscribe([topic])
        while not done.is_set():
            for message in consumer.poll(0.5):
                if message.error() is None:
                    with lock:
                        seen.add((message.partition(), message.offset()))
                        per_member[i] += 1
                        redelivered[0] += message.delivery_count() > 1
                        last[0] = time.monotonic()
                        if len(seen) >= records:
                            done.set()
        consumer.close()

    started = time.monotonic()
    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for thread in threads:
        thread.start()
    done.wait(600)
    done.set()
    for thread in threads:
        thread.join(60)
    seconds = last[0] - started
    return {"records": len(seen), "seconds": round(seconds, 2),
            "records_per_s": round(len(seen) / seconds), "per_member": per_member,
            "deliveries": sum(per_member), "redeliveries": redelivered[0]}


def consumer_throughput(bootstrap: str, topic: str, records: int) -> dict:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    started, count, last = time.monotonic(), 0, 0.0
    while count < records and time.monotonic() - started < 600:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                count += 1
                last = time.monotonic()
    consumer.close()
    seconds = last - started
    return {"records": count, "seconds": round(seconds, 2), "records_per_s": round(count / seconds)}


def release_latency(bootstrap: str, topic: str, records: int) -> dict:
    """Release every record once; time from the release's confirmation to its redelivery."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap,
                              "group.id": f"bench-release-{uuid.uuid4().hex[:6]}",
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": "50"})
    consumer.subscribe([topic])
    released_at: dict[tuple[int, int], float] = {}
    latencies: list[float] = []
    started = time.monotonic()
    while len(latencies) < records and time.monotonic() - started < 300:
        now_released = []
        for message in consumer.poll(0.5):
            if message.error() is not None:
                continue
            key = (message.partition(), message.offset())
            if message.delivery_count() == 1:
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
                now_released.append(key)
            else:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                if key in released_at:
                    latencies.append((time.monotonic() - released_at.pop(key)) * 1000)
        if now_released or latencies:
            consumer.commit_sync(30)
        confirmed = time.monotonic()
        for key in now_released:
            released_at[key] = confirmed
    consumer.close()
    return {"redelivered": len(latencies), "p50_ms": _ms(nearest_rank(latencies, 0.5)),
            "p99_ms": _ms(nearest_rank(latencies, 0.99))}


def expiry_latency(bootstrap: str, topic: str, lock_ms: int) -> dict:
    """A holder takes records and never answers; how long after its lock expires another
    member gets each of them."""
    group = f"bench-expiry-{uuid.uuid4().hex[:6]}"
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "max.poll.records": "100"})
    holder.subscribe([topic])
    held: dict[tuple[int, int], float] = {}
    while not held:
        for message in holder.poll(0.5):
            if message.error() is None:
                held[(message.partition(), message.offset())] = time.monotonic()
    other = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    other.subscribe([topic])
    late: list[float] = []
    started = time.monotonic()
    while held and time.monotonic() - started < lock_ms / 1000 + 60:
        for message in other.poll(0.5):
            key = (message.partition(), message.offset())
            if message.error() is None and key in held:
                late.append((time.monotonic() - held.pop(key)) * 1000 - lock_ms)
    other.close()
    holder.close()
    return {"redelivered": len(late), "p50_ms_after_lock": _ms(nearest_rank(late, 0.5)),
            "p99_ms_after_lock": _ms(nearest_rank(late, 0.99))}


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--release-records", type=int, default=500)
    # Long enough that a loaded machine's members answer within their locks.
    parser.add_argument("--lock-ms", type=int, default=5000)
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args(argv)

    # Inherited by the cluster's brokers.
    os.environ.update({"KIPPER_GROUP_SHARE_RECORD_LOCK_DURATION_MS": str(args.lock_ms),
                       "KIPPER_GROUP_SHARE_AUTO_OFFSET_RESET": "earliest"})
    report: dict = {"settings": {k: v for k, v in vars(args).items() if k != "json"},
                    "modes": {}}
    with tempfile.TemporaryDirectory(prefix="kipper-share-bench-") as root:
        cluster = LocalCluster(Path(root), brokers=3).start()
        try:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for mode in args.modes.split(","):
                topic = f"bench-share-{mode}-{uuid.uuid4().hex[:6]}"
                create(admin, topic, mode)
                fill(cluster.bootstrap, topic, args.records, args.record_bytes)
                # Lock expiry on a topic of its own: only the held records are left to deliver.
                held_topic = f"{topic}-held"
                create(admin, held_topic, mode)
                fill(cluster.bootstrap, held_topic, HELD_RECORDS, args.record_bytes)
                share = share_throughput(cluster.bootstrap, topic, args.members, args.records)
                plain = consumer_throughput(cluster.bootstrap, topic, args.records)
                figures = {
                    "share_throughput": share, "consumer_throughput": plain,
                    "share_vs_consumer": round(share["records_per_s"] / plain["records_per_s"], 2),
                    "release_redelivery": release_latency(cluster.bootstrap, topic,
                                                          args.release_records),
                    "lock_expiry_redelivery": expiry_latency(cluster.bootstrap, held_topic,
                                                             args.lock_ms)}
                report["modes"][mode] = figures
                print(mode, json.dumps(figures), flush=True)
        finally:
            cluster.stop()
    print(_table(report["modes"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _table(modes: dict) -> str:
    rows = ["| mode | share records/s | deliveries / records | consumer records/s | "
            "share/consumer | release→redelivery P50 / P99 ms | lock expiry→redelivery "
            "P50 / P99 ms after the lock |",
            "|---|---|---|---|---|---|---|"]
    for mode, f in modes.items():
        r, e = f["release_redelivery"], f["lock_expiry_redelivery"]
        t = f["share_throughput"]
        rows.append(f"| {mode} | {t['records_per_s']} | {t['deliveries']} / {t['records']} | "
                    f"{f['consumer_throughput']['records_per_s']} | {f['share_vs_consumer']} | "
                    f"{r['p50_ms']} / {r['p99_ms']} | "
                    f"{e['p50_ms_after_lock']} / {e['p99_ms_after_lock']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
