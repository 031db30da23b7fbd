"""Network partitions of a cluster whose AZs are network namespaces (`kipper cluster up
--netns`; cuts are the relay's drop rules, broker/az_partition.py). Root only. About 2.5
minutes: one 3-broker cluster (az1..az3; brokers 0-2, one per AZ, are also the three voters
of the controller quorum) for the five scenarios, run in order, each healed before the next
(each ~15-20 s, the start ~40-60 s).

Each scenario runs an idempotent acks=all producer (confluent-kafka) in an AZ that stays
connected, cuts, waits, heals, and checks after healing that every acknowledged record is
stored exactly once and no offset was given twice. It prints the longest gap between two
acknowledgements (the unavailability that producer saw) and the records lost (always 0).

A cut is silent: packets are dropped, connections neither fail nor close, requests hang.
Whichever AZ is cut, the two others hold a majority of the voters, so the cluster keeps
deciding: an active controller on the majority side (elected there within a few seconds if
the old one was cut off: it resigns, check-quorum) fences the cut broker and its leaderships
move. The last scenario cuts the active controller's AZ and stops the cluster to compare the
voters' metadata, so it runs last.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from bench.controller_failover_bench import active_controller, describe_quorum, voter_checksums
from broker import az_partition
from support.az_network import cut, heal, in_az, namespaced_cluster
from support.clients import AckedProducer, assert_acked_exactly_once
from support.topics import partition_metadata
from support.wait import wait_until

pytestmark = pytest.mark.system

COORDINATOR_LOG = "__diskless-metadata"
SESSION_TIMEOUT_MS = 3000
CUT_S = 10.0
# librdkafka gives up on a request (a produce, or any other: socket.timeout.ms) after this
# long: in a partition, a connection is not closed, its packets are just lost.
REQUEST_TIMEOUT_MS = 3000
# A new active controller is elected within this of a cut of the active one's AZ: a fetch
# timeout (1 s) and an election round, as after its kill -9 (test_controller_quorum.py).
QUORUM_FAILOVER_BOUND_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {"KIPPER_BROKER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
           "KIPPER_AUTO_LEADER_REBALANCE_ENABLE": "false"}
    with namespaced_cluster(tmp_path_factory.mktemp("partitions"), env=env) as cluster:
        yield cluster


def create(cluster, topic: str, mode: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config={
        "kipper.storage.mode": mode, "min.insync.replicas": "2"})])[topic].result(30)
    wait_until(lambda: len(getattr(partition_metadata(cluster.bootstrap, topic), "isrs", []))
               == len(replicas), timeout=30, interval=0.2)


def writer_in(cluster, az: str, topic: str) -> AckedProducer:
    """An AckedProducer inside ``az``'s namespace, already sending."""
    writer = in_az(cluster.layout(), az, AckedProducer, cluster.bootstrap, topic, az, {
        "request.timeout.ms": REQUEST_TIMEOUT_MS, "socket.timeout.ms": REQUEST_TIMEOUT_MS,
        "message.timeout.ms": 120_000})
    writer.start()
    return writer


def all_in_sync(cluster, topic: str, replicas: int) -> None:
    wait_until(lambda: len(partition_metadata(cluster.bootstrap, topic).isrs) == replicas,
               timeout=60, interval=0.5)


@dataclass
class CutWindow:
    """When a cut began and was healed (time.monotonic), and what writers saw in between."""

    started: float
    ended: float = 0.0

    def longest_gap(self, writer: AckedProducer) -> float:
        """Seconds of the longest wait between the writer's acknowledgements in the cut."""
        times = [self.started] + sorted(at for at, _, _ in writer.acked
                                        if self.started <= at <= self.ended) + [self.ended]
        return max(b - a for a, b in zip(times, times[1:]))

    def acking_again_after(self, writer: AckedProducer) -> float:
        """Seconds from healing to the writer's first acknowledgement after it."""
        wait_until(lambda: any(at > self.ended for at, _, _ in writer.acked), timeout=60,
                   interval=0.2)
        return min(at for at, _, _ in writer.acked if at > self.ended) - self.ended


@contextlib.contextmanager
def cut_for_a_while(cluster, make_cut, *args) -> Iterator[CutWindow]:
    """After 2 s of writing, cut; the body runs during the cut, healed CUT_S after it began."""
    time.sleep(2)
    window = CutWindow(time.monotonic())
    cut(cluster, make_cut, *args)
    try:
        yield window
        time.sleep(max(0.0, CUT_S - (time.monotonic() - window.started)))
    finally:
        heal(cluster)
        window.ended = time.monotonic()


def test_classic_leader_az_cut_off(cluster, topic_name):
    """Leader broker 1 in az2, replicas in every AZ, min.insync.replicas=2. With az2 cut off,
    the controller fences broker 1 and an in-sync follower leads; a producer inside az2,
    which reaches only broker 1, gets no acknowledgement: broker 1 cannot shrink the ISR
    without the controller, so it cannot acknowledge alone."""
    create(cluster, topic_name, "classic", [1, 2, 0])
    writer = writer_in(cluster, "az3", topic_name)
    stranded = in_az(cluster.layout(), "az2", Producer, {
        "bootstrap.servers": cluster.bootstrap, "client.id": "stranded az=az2", "acks": "all",
        "enable.idempotence": True, "message.timeout.ms": int(CUT_S * 1000 - 2000)})
    stranded_acks: list = []
    with cut_for_a_while(cluster, az_partition.cut_az, "az2") as window:
        time.sleep(1)
        for i in range(20):
            stranded.produce(topic_name, f"stranded-{i}".encode(), partition=0,
                             on_delivery=lambda error, message: stranded_acks.append(error))
        stranded.flush(CUT_S)
        leader_during_cut = partition_metadata(cluster.bootstrap, topic_name).leader
    gap = window.longest_gap(writer)
    all_in_sync(cluster, topic_name, 3)
    writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
    acknowledged_alone = sum(error is None for error in stranded_acks)
    print(f"\nclassic, leader's AZ az2 cut off {CUT_S:.0f} s: leader during the cut "
          f"{leader_during_cut}; writer in az3: longest ack gap {gap:.1f} s, "
          f"{len(writer.acked)} acked, 0 lost; producer in az2: {acknowledged_alone} of "
          f"{len(stranded_acks)} acknowledged")
    assert leader_during_cut in (0, 2)
    assert acknowledged_alone == 0
    assert gap < CUT_S, "the partition was unavailable for the whole cut"


def coordinator_broker(cluster, topic: str) -> int:
    """The broker leading __diskless-metadata-0 (created with the first diskless commit,
    here one to ``topic``)."""
    first = Producer({"bootstrap.servers": cluster.bootstrap})
    first.produce(topic, b"first")
    assert first.flush(30) == 0

    def leader() -> int | None:
        metadata = partition_metadata(cluster.bootstrap, COORDINATOR_LOG)
        return metadata.leader if metadata is not None and metadata.leader >= 0 else None
    return wait_until(leader, timeout=30, interval=0.2)


def move_coordinator(cluster, broker: int) -> None:
    """``broker`` first among the coordinator log's replicas (KIP-455, a reordering
    completes at once), then a preferred-leader election (KIP-460) makes it lead."""
    replicas = list(partition_metadata(cluster.bootstrap, COORDINATOR_LOG).replicas)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        partition = TopicPartition(COORDINATOR_LOG, 0)
        target = [broker] + [r for r in replicas if r != broker]
        assert admin.alter_partition_reassignments({partition: target})[partition] is None
    finally:
        admin.close()
    wait_until(lambda: list(partition_metadata(cluster.bootstrap, COORDINATOR_LOG).replicas)
               == target, timeout=30, interval=0.2)
    asked = [ConfluentPartition(COORDINATOR_LOG, 0)]
    elector = AdminClient({"bootstrap.servers": cluster.bootstrap})  # outlives the future
    elector.elect_leaders(ElectionType.PREFERRED, asked).result(30)
    wait_until(lambda: partition_metadata(cluster.bootstrap, COORDINATOR_LOG).leader == broker,
               timeout=30, interval=0.2)


def test_diskless_coordinator_az_cut_off(cluster, topic_name):
    """The diskless batch coordinator is the leader of __diskless-metadata-0, moved to
    broker 1 (az2) first; with az2 cut off, the controller fences broker 1, another replica
    leads the coordinator and commits resume there; no offset is given twice."""
    create(cluster, topic_name, "diskless", [1, 2, 0])
    if coordinator_broker(cluster, topic_name) != 1:
        move_coordinator(cluster, 1)
    writer = writer_in(cluster, "az3", topic_name)
    with cut_for_a_while(cluster, az_partition.cut_az, "az2") as window:
        time.sleep(CUT_S - 1)
        moved_to = partition_metadata(cluster.bootstrap, COORDINATOR_LOG).leader
    gap = window.longest_gap(writer)
    writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
    print(f"\ndiskless, the coordinator's AZ az2 cut off {CUT_S:.0f} s: coordinator on broker "
          f"{moved_to} at the end of the cut; writer in az3: longest ack gap {gap:.1f} s, "
          f"{len(writer.acked)} acked, 0 lost")
    assert moved_to in (0, 2)
    assert gap < CUT_S, "commits did not resume during the cut"


def test_az_cut_off_from_object_storage(cluster, topic_name):
    """az2 loses object storage only. A diskless producer in az3 goes on; one in az2 (its
    broker cannot upload) waits until the cut heals and then goes on; nothing acknowledged
    is lost on either."""
    topics = {az: f"{topic_name}-{az}" for az in ("az2", "az3")}
    for topic in topics.values():
        create(cluster, topic, "diskless", [1, 2, 0])
    inside, outside = (writer_in(cluster, az, topic) for az, topic in topics.items())
    with cut_for_a_while(cluster, az_partition.cut_object_storage, "az2") as window:
        pass
    resumed_after = window.acking_again_after(inside)
    gaps = {"az2": window.longest_gap(inside), "az3": window.longest_gap(outside)}
    for writer in (inside, outside):
        writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topics["az2"], inside)
    assert_acked_exactly_once(cluster.bootstrap, topics["az3"], outside)
    print(f"\ndiskless, az2 cut off from object storage {CUT_S:.0f} s: longest ack gap of "
          f"the writer in az2 {gaps['az2']:.1f} s (resumed {resumed_after:.1f} s after "
          f"healing), in az3 {gaps['az3']:.1f} s; 0 lost")
    # Not held up by az2's cut (a 2 s gap happens on a loaded machine; the cut is 10 s).
    assert gaps["az3"] < CUT_S / 2


def test_controller_az_cut_off(cluster, topic_name):
    """az1 cut off: broker 0, a voter of the controller quorum (perhaps the active
    controller), and the diskless batch coordinator (moved back there). The two voters of
    az2 and az3 are a majority: they keep (or elect) an active controller, which fences
    broker 0, so the classic partition led by broker 2 drops it from its ISR and the
    coordinator moves to another replica. The writers in az3 go on during the cut, and
    nothing acknowledged is lost or stored twice."""
    topics = {"classic": f"{topic_name}-classic", "diskless": f"{topic_name}-diskless"}
    create(cluster, topics["classic"], "classic", [2, 0, 1])
    create(cluster, topics["diskless"], "diskless", [2, 0, 1])
    if coordinator_broker(cluster, topics["diskless"]) != 0:
        move_coordinator(cluster, 0)
    writers = {mode: writer_in(cluster, "az3", topic) for mode, topic in topics.items()}
    with cut_for_a_while(cluster, az_partition.cut_az, "az1") as window:
        time.sleep(CUT_S - 1)
        isr_during_cut = sorted(partition_metadata(cluster.bootstrap, topics["classic"]).isrs)
        coordinator_during_cut = partition_metadata(cluster.bootstrap, COORDINATOR_LOG).leader
    gaps = {mode: window.longest_gap(writer) for mode, writer in writers.items()}
    for mode, writer in writers.items():
        writer.finish()
        assert_acked_exactly_once(cluster.bootstrap, topics[mode], writer)
    print(f"\naz1 (broker 0: a voter, the coordinator) cut off {CUT_S:.0f} s: classic ISR "
          f"{isr_during_cut}, coordinator on broker {coordinator_during_cut} at the end of the "
          "cut; writers in az3, longest ack gap "
          + ", ".join(f"{mode} {gaps[mode]:.1f} s ({len(writer.acked)} acked)"
                      for mode, writer in writers.items()) + "; 0 lost")
    assert isr_during_cut == [1, 2]
    assert coordinator_during_cut in (1, 2)
    for mode in writers:
        assert gaps[mode] < CUT_S, f"{mode}: the writer waited for the whole cut"


def test_active_controller_az_cut_off(cluster, topic_name):
    """The active controller's AZ cut off (silent drops: its requests hang, nothing fails):
    the voters of the two other AZs elect a new active controller within a few seconds; the
    cut one resigns (check-quorum: no fetch from a majority); the partition led outside it
    shrinks its ISR through the new controller and its writer in another AZ goes on. After
    healing the old controller follows the new epoch and every voter holds the same metadata
    (checked last: it stops the cluster)."""
    before = active_controller(cluster, set(range(cluster.brokers)))
    cut_off = before.leader_id
    majority_side = sorted(set(range(cluster.brokers)) - {cut_off})
    az = cluster.layout().brokers[cut_off]
    writer_az = cluster.layout().brokers[majority_side[-1]]
    create(cluster, topic_name, "classic", [*majority_side, cut_off])
    log_start = cluster.log_size()
    writer = writer_in(cluster, writer_az, topic_name)
    with cut_for_a_while(cluster, az_partition.cut_az, az) as window:
        # Asked of the new leader itself: it answers once it is the active controller.
        after = wait_until(lambda: next(
            (view for node in majority_side
             if (view := describe_quorum(cluster.broker(node)["address"])) is not None
             and view.leader_id == node and view.epoch > before.epoch), None),
            timeout=CUT_S, interval=0.05)
        elected_in = time.monotonic() - window.started
        wait_until(lambda: sorted(getattr(partition_metadata(cluster.bootstrap, topic_name),
                                          "isrs", [])) == majority_side,
                   timeout=CUT_S, interval=0.2)
        shrunk_in = time.monotonic() - window.started
    gap = window.longest_gap(writer)
    rejoined = f"voter {cut_off} follows leader {after.leader_id} in epoch {after.epoch}"
    wait_until(lambda: rejoined in cluster.log_since(log_start), timeout=30, interval=0.2)
    rejoined_in = time.monotonic() - window.ended
    # Every broker answers DescribeQuorum alike again, the two others forwarding it.
    wait_until(lambda: all(
        (view := describe_quorum(cluster.broker(node)["address"])) is not None
        and (view.leader_id, view.epoch) == (after.leader_id, after.epoch)
        for node in range(cluster.brokers)), timeout=10, interval=0.2)
    all_in_sync(cluster, topic_name, 3)
    writer.finish()
    assert_acked_exactly_once(cluster.bootstrap, topic_name, writer)
    print(f"\nthe active controller's AZ {az} (controller {cut_off}) cut off {CUT_S:.0f} s: "
          f"controller {after.leader_id} active {elected_in:.1f} s after the cut, the ISR "
          f"without broker {cut_off} after {shrunk_in:.1f} s; writer in {writer_az}: longest "
          f"ack gap {gap:.1f} s, {len(writer.acked)} acked, 0 lost; the old controller "
          f"follows epoch {after.epoch} {rejoined_in:.1f} s after healing")
    assert elected_in < QUORUM_FAILOVER_BOUND_S
    assert gap < CUT_S / 2
    log = cluster.log_since(log_start)
    assert f"voter {cut_off} resigns the leadership of epoch {before.epoch}" in log
    assert f"controller {cut_off} is no longer active" in log
    cluster.stop()
    checksums = voter_checksums(cluster.root / "data")
    assert len({checksum for _, checksum in checksums.values()}) == 1, checksums
