"""A broker's memory stays bounded when clients send requests and never read the responses."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time

import pytest

from protocol.framing import encode_request
from support.clients import ConfluentWriter, consume_all
from support.processes import BrokerProcess
from support.raw import entity
from support.topics import create_topic

FETCH = 1
MiB = 1 << 20
ABUSERS = 4
RSS_GROWTH_LIMIT_MB = 100


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def fetch_everything(topic: str, correlation_id: int) -> bytes:
    """A Fetch (v4) of partition 0 from offset 0 asking for up to 64 MiB."""
    return encode_request(FETCH, 4, correlation_id, "never-reads", entity(
        FETCH, 4, "FetchRequest", replica_id=-1, max_wait=0, min_bytes=0,
        max_bytes=64 * MiB, isolation_level=0, topics=(entity(
            FETCH, 4, "FetchTopic", topic=topic, partitions=(entity(
                FETCH, 4, "FetchPartition", partition=0, fetch_offset=0,
                partition_max_bytes=64 * MiB),)),)))


def send_until_blocked(port: int, topic: str, stop: threading.Event,
                       sent: list[int]) -> None:
    """Pipeline Fetch requests and never read: the broker must stop reading us."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(1.0)
        request = fetch_everything(topic, 1)
        count = 0
        while not stop.is_set():
            try:
                sock.sendall(request)
                count += 1
            except socket.timeout:
                continue  # the broker no longer reads us: keep the pressure on
            except OSError:
                break
        sent.append(count)


@pytest.fixture
def broker(tmp_path):
    # 2,000 sockets on each side: the broker inherits this process's descriptor limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


def test_unread_fetch_responses_keep_the_broker_bounded(broker, topic_name):
    create_topic(broker.bootstrap, topic_name)
    writer = ConfluentWriter(broker.bootstrap)
    record = os.urandom(1000)  # incompressible: the log holds ~16 MiB
    for _ in range(16 * 1024):
        writer.send(topic_name, record)
    assert writer.flush() == 0
    baseline = rss_mb(broker.proc.pid)

    stop = threading.Event()
    sent: list[int] = []
    abusers = [threading.Thread(target=send_until_blocked,
                                args=(broker.port, topic_name, stop, sent), daemon=True)
               for _ in range(ABUSERS)]
    for thread in abusers:
        thread.start()
    try:
        peak = baseline
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            peak = max(peak, rss_mb(broker.proc.pid))
            time.sleep(0.2)
        # A real client is served while the abusers hold their connections.
        assert len(consume_all(broker.bootstrap, topic_name, 16 * 1024, timeout=60)) == 16 * 1024
        peak = max(peak, rss_mb(broker.proc.pid))
    finally:
        stop.set()
        for thread in abusers:
            thread.join(5)
    assert len(sent) == ABUSERS and min(sent) > 0, sent
    time.sleep(3)
    after_close = rss_mb(broker.proc.pid)
    print(f"broker RSS: baseline {baseline:.0f} MB, peak under {ABUSERS} unread-fetch "
          f"connections {peak:.0f} MB (+{peak - baseline:.0f}), after they closed "
          f"{after_close:.0f} MB; Fetch requests sent per connection: {sent}")
    assert peak - baseline <= RSS_GROWTH_LIMIT_MB
    assert after_close - baseline <= RSS_GROWTH_LIMIT_MB / 2


def test_idle_connections_stay_cheap(broker):
    """2,000 connections that send nothing cost the broker little memory each."""
    count = 2000
    baseline = rss_mb(broker.proc.pid)
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection(("127.0.0.1", broker.port)))
        time.sleep(2)
        per_connection_kb = (rss_mb(broker.proc.pid) - baseline) * 1024 / count
    finally:
        for sock in sockets:
            sock.close()
    print(f"broker RSS per idle connection: {per_connection_kb:.1f} KB")
    assert per_connection_kb <= 16
