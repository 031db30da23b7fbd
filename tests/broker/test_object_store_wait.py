"""A broker started before its object store (`kipper cluster up` starts the embedded S3
server together with the brokers): it waits for the store, then serves diskless topics."""

from __future__ import annotations

import socket

from confluent_kafka import Producer

from storage.objectstore import embedded
from support.clients import consume_all
from support.processes import BrokerProcess
from support.wait import wait_until


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_broker_started_before_its_object_store_waits_for_it(tmp_path):
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", [
        "--default-storage-mode", "diskless", "--s3-endpoint", f"http://127.0.0.1:{port}",
        "--s3-access-key", embedded.ACCESS_KEY, "--s3-secret-key", embedded.SECRET_KEY])
    broker.launch()
    try:
        # Nothing listens on the store's port yet: the broker says so and keeps waiting.
        wait_until(lambda: "object store not reachable yet" in broker.log_tail(), timeout=90)
        assert broker.alive()
        with embedded.EmbeddedS3Process(port=port, data_dir=tmp_path / "s3"):
            broker.wait_ready()
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
            for i in range(3):
                producer.produce("late-store", f"v{i}".encode(), partition=0)
            assert producer.flush(60) == 0
            assert consume_all(broker.bootstrap, "late-store", 3) == [b"v0", b"v1", b"v2"]
            broker.stop()
    finally:
        broker.kill()
