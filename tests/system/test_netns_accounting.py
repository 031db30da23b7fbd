"""Cross-AZ bytes counted twice, by kipper and by the kernel, on a cluster whose AZs are
network namespaces (`kipper cluster up --netns`, broker/az_network.py). About 50 s: one
3-broker cluster for the four modes, 4 MiB through each. Root only.

Three brokers in az1..az3, a topic of each storage mode (RF=3, one partition). A real client
(confluent-kafka) inside the leader's AZ namespace produces PAYLOAD bytes acks=all; one inside
another AZ's namespace, with client.rack, reads them back. Between the counter reads:

- the kernel's counters of each inter-AZ link, less 66 bytes of Ethernet, IP and TCP headers
  per frame (``LinkBytes.tcp_payload``), must match what kipper's brokers counted for that
  pair of AZs (server rows: every connection once, clients' and other nodes') within 1 %
  plus 4 KiB: both count the same Kafka frames; the rest is the heartbeats and long polls
  (a few hundred bytes a second) that fall between the reads of the two sets of counters,
  SYN options and ARP. Measured: within 300 bytes per pair. A TCP segment the kernel sent
  again crossed the link twice but reached kipper once: on a loaded machine a veth may drop
  one (once 65 KB over in a CI run), so each retransmission the namespaces count widens the
  margin by the largest offloaded frame, 64 KiB. The headers themselves are
  0.4 % here, as the veths pass 64 KiB offloaded frames; on a 1,500-byte MTU link they
  would be about 4.5 %;
- what crossed AZs for PAYLOAD: classic ≈ 2 × PAYLOAD (the followers' copies), active-tiered
  and diskless ≈ 0 (followers and the consumer read object storage, which is not on an
  inter-AZ link; diskless clients use a broker of their AZ), shared ≈ 1 × PAYLOAD (no
  replication, but the consumer in another AZ can only read from the leader: KIP-1183 does
  not make reads AZ-local).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from confluent_kafka import Producer

from support.az_network import (in_az, kernel_az_pair_bytes, kipper_az_pair_bytes,
                                namespaced_cluster, tcp_retransmitted_segments)
from support.clients import consume_all
from support.storage_modes import MODES
from support.topics import create_topic, partition_metadata

RECORDS = 2000
RECORD_SIZE = 2048
PAYLOAD = RECORDS * RECORD_SIZE
# Kernel less headers vs kipper, per AZ pair: a fraction of kipper's count, plus bytes.
TOLERANCE = 0.01
TOLERANCE_BYTES = 4096
RETRANSMITTED_SEGMENT_BYTES = 64 * 1024
# Cross-AZ bytes per produced byte, by mode: (at least, at most).
EXPECTED_CROSS_AZ = {"classic": (1.95, 2.1), "active-tiered": (0.0, 0.1),
                     "diskless": (0.0, 0.1), "shared": (0.95, 1.1)}

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with namespaced_cluster(tmp_path_factory.mktemp("netns")) as cluster:
        yield cluster


def produce(bootstrap: str, topic: str, az: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "client.id": f"prod,az={az}",
                         "linger.ms": 20})
    for value in values:
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(30) == 0


@pytest.mark.parametrize("mode", MODES)
def test_kernel_and_kipper_agree_on_cross_az_bytes(cluster, mode, topic_name):
    layout = cluster.layout()
    create_topic(cluster.bootstrap, topic_name, replication_factor=3, in_sync=True,
                 config={"kipper.storage.mode": mode})
    leader_az = layout.brokers[partition_metadata(cluster.bootstrap, topic_name).leader]
    consumer_az = next(az for az in layout.azs if az != leader_az)
    values = [os.urandom(RECORD_SIZE) for _ in range(RECORDS)]

    retransmitted_before = tcp_retransmitted_segments(layout)
    kipper_before, kernel_before = kipper_az_pair_bytes(cluster), kernel_az_pair_bytes(layout)
    in_az(layout, leader_az, produce, cluster.bootstrap, topic_name, leader_az, values)
    received = in_az(layout, consumer_az, consume_all, cluster.bootstrap, topic_name, RECORDS,
                     config={"client.id": f"cons,az={consumer_az}", "client.rack": consumer_az})
    kernel_after, kipper_after = kernel_az_pair_bytes(layout), kipper_az_pair_bytes(cluster)
    retransmitted = tcp_retransmitted_segments(layout) - retransmitted_before
    assert received == values

    kipper: Counter = kipper_after - kipper_before
    print(f"\n{mode}: payload {PAYLOAD} B, leader in {leader_az}, consumer in {consumer_az}, "
          f"{retransmitted} TCP segments retransmitted")
    margin_bytes = TOLERANCE_BYTES + retransmitted * RETRANSMITTED_SEGMENT_BYTES
    for pair, after in kernel_after.items():
        before = kernel_before[pair]
        kernel_bytes = after.total - before.total
        kernel_payload = after.tcp_payload - before.tcp_payload
        print(f"{pair[0]}<->{pair[1]}: kernel {kernel_bytes} B in {after.frames - before.frames}"
              f" frames, {kernel_payload} B less headers; kipper {kipper[pair]} B")
        assert abs(kernel_payload - kipper[pair]) <= TOLERANCE * kipper[pair] + margin_bytes, \
            (pair, kernel_payload, kipper[pair])
    low, high = EXPECTED_CROSS_AZ[mode]
    total = sum(kipper.values())
    assert low * PAYLOAD <= total <= high * PAYLOAD, (total, total / PAYLOAD)
