"""A hung object store (issue #13, section 5): the S3 server's process is stopped (SIGSTOP:
connections are accepted, nothing answers) for 10 s under an idempotent acks=all producer.

- active-tiered: uploads and downloads that do not answer in time are abandoned and the
  followers fetch the records from the leader, so acks go on (>= 50 % of the rate before);
- diskless: a produce request is answered with a retriable error within its timeout (there
  is no other place to put the records), and acks resume within 2 s of the store's return.

Either way every acknowledged record is read back once afterwards.

    PYTHONPATH=$PWD python -m pytest tests/system/test_object_store_hang.py -s -q
prints the measured rates.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from support.clients import AckedProducer, assert_acked_exactly_once, produce_once
from support.diskless import DisklessCluster
from support.tiered import TieredCluster, create_tiered_topic
from support.topics import create_topic
from support.wait import wait_until

HANG_S = 10.0
WINDOW_S = 5.0
RECOVERY_S = 2.0
PROBE_TIMEOUT_MS = 8_000
# The set-up: acks=all with min.insync.replicas=2 (NOT_ENOUGH_REPLICAS once the
# followers leave the ISR).
TIERED_TOPIC = {"min.insync.replicas": "2"}


def start_cluster(mode: str, root, endpoint):
    if mode == "active-tiered":
        return TieredCluster(root, endpoint).start()
    return DisklessCluster(root, endpoint).start()


def create(mode: str, cluster, topic: str) -> None:
    if mode == "active-tiered":
        create_tiered_topic(cluster, topic, **TIERED_TOPIC)
    else:
        create_topic(cluster.bootstrap, topic)


@pytest.mark.parametrize("mode", ["active-tiered", "diskless"])
def test_hung_object_store(mode, tmp_path, pausable_s3, topic_name):
    endpoint, s3 = pausable_s3
    cluster = start_cluster(mode, tmp_path, endpoint)
    writer = None
    try:
        create(mode, cluster, topic_name)
        writer = AckedProducer(cluster.bootstrap, topic_name, "az1")
        writer.start()
        wait_until(lambda: len(writer.acked) >= 200, 60)
        time.sleep(WINDOW_S)
        hung_at = time.monotonic()
        s3.pause()
        try:
            probe_s, probe_error = produce_once(cluster.bootstrap, topic_name, PROBE_TIMEOUT_MS)
            time.sleep(max(0.0, hung_at + HANG_S - time.monotonic()))
        finally:
            s3.resume()
        resumed_at = time.monotonic()
        time.sleep(WINDOW_S)
        before = writer.acks_per_second(hung_at - WINDOW_S, hung_at)
        during = writer.acks_per_second(hung_at, resumed_at)
        after = writer.acks_per_second(resumed_at + RECOVERY_S, resumed_at + WINDOW_S)
        first_after = min((at for at, _, _ in writer.acked if at >= resumed_at), default=None)
        print(f"\n{mode}: S3 hung {resumed_at - hung_at:.1f} s; acks/s before {before:.0f}, "
              f"during {during:.0f} ({during / before:.0%} of before), after {after:.0f}; "
              f"probe answered in {probe_s:.2f} s with {probe_error}; first ack "
              f"{(first_after or float('nan')) - resumed_at:.2f} s after the hang")
        writer.finish()
        assert not writer.errors, writer.errors[:5]
        assert probe_s < PROBE_TIMEOUT_MS / 1000
        if mode == "active-tiered":
            assert probe_error is None
            assert during >= 0.5 * before
        else:
            # Both retriable in the Kafka protocol (the writer retried them without an
            # error): KAFKA_STORAGE_ERROR (the object was not stored, nothing committed) or
            # REQUEST_TIMED_OUT (the request's time ran out first; maybe committed).
            assert probe_error is not None and probe_error.code() in (KafkaError.KAFKA_STORAGE_ERROR,
                                          KafkaError.REQUEST_TIMED_OUT)
            assert first_after is not None and first_after - resumed_at < RECOVERY_S
        assert after >= 0.5 * before
        assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
    finally:
        if writer is not None and writer.is_alive():
            writer.stopping.set()
        cluster.stop()
