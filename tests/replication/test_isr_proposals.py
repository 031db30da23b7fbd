"""ISR changes go to the controller together: after a restart the leader of thousands of
partitions takes its followers back into every ISR at once, and one AlterPartition per
partition queued thousands of round trips (on the connection heartbeats used: brokers were
fenced)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kio.schema.alter_partition.v3.response import AlterPartitionResponse, PartitionData, TopicData
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.static_configs import dynamic_configs
from protocol.apis import ApiKey
from protocol.build import make
from protocol.internal import ClusterCredentials
from protocol.records import build_batch, validate_produce_records
from replication.cluster_metadata import MetadataImage
from replication.node_client import NodeClient
from replication.replica_manager import ISR_PROPOSALS_PER_REQUEST, ReplicaManager
from storage.manager import LogManager

LEADER, FOLLOWER, SECOND_FOLLOWER = 1, 2, 3
TOPIC = "isr-proposals"


class Controller:
    """Accepts every ISR change, as the controller would (or refuses each with ``error``),
    and keeps the requests."""

    def __init__(self, error: ErrorCode = ErrorCode.none) -> None:
        self.requests: list = []
        self.error = error

    async def call(self, api_key, request, timeout: float):
        assert api_key == ApiKey.ALTER_PARTITION
        self.requests.append(request)
        await asyncio.sleep(0.01)
        return make(AlterPartitionResponse, throttle_time=0, error_code=ErrorCode.none, topics=tuple(
            make(TopicData, topic_id=topic.topic_id, partitions=tuple(
                make(PartitionData, partition_index=asked.partition_index,
                     error_code=self.error, leader_id=LEADER,
                     leader_epoch=asked.leader_epoch,
                     isr=tuple(b.broker_id for b in asked.new_isr_with_epochs),
                     leader_recovery_state=0, partition_epoch=asked.partition_epoch + 1)
                for asked in topic.partitions))
            for topic in request.topics))


class Leader:
    """Broker LEADER's ReplicaManager fed metadata records as its follower would apply them:
    the brokers registered (``fenced``: those fenced), one topic of ``partitions``
    partitions replicated on the leader and ``followers``, led here, the followers not in
    the ISR yet."""

    def __init__(self, tmp_path: Path, partitions: int,
                 fenced: frozenset[int] = frozenset(),
                 controller: Controller | None = None,
                 replica_lag_time_max_ms: int = 30_000,
                 followers: tuple[int, ...] = (FOLLOWER,)) -> None:
        self.in_sync = [LEADER, *followers]
        self.image = MetadataImage()
        self.controller = controller or Controller()
        config = BrokerConfig(node_id=LEADER, data_dir=tmp_path)
        self.replicas = ReplicaManager(
            LEADER, self.image, LogManager(tmp_path), dynamic_configs(config, self.image),
            NodeClient("test", ClusterCredentials(LEADER, "unused"), traffic=None),
            self.controller, replica_lag_time_max_ms)
        self.apply(*({"type": "broker", "node_id": node, "host": "127.0.0.1",
                      "port": 9000 + node, "epoch": 1, "fenced": node in fenced}
                     for node in self.in_sync),
                   {"type": "topic", "name": TOPIC, "id": str(uuid.uuid4()), "configs": {}},
                   *({"type": "partition", "topic": TOPIC, "partition": index,
                      "replicas": self.in_sync, "isr": [LEADER], "leader": LEADER,
                      "leader_epoch": 0, "partition_epoch": 0} for index in range(partitions)))
        self.partitions = [self.replicas.get(TOPIC, index) for index in range(partitions)]

    def apply(self, *records: dict) -> None:
        for record in records:
            self.image.apply(self.image.next_offset, record)
            self.replicas.on_metadata_record(record)

    async def until_in_sync(self, timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            while any(partition.isr != self.in_sync for partition in self.partitions):
                await asyncio.sleep(0.01)


async def test_caught_up_followers_of_many_partitions_join_their_isrs_in_few_requests(
        tmp_path: Path):
    leader = Leader(tmp_path, ISR_PROPOSALS_PER_REQUEST + 100)
    try:
        for partition in leader.partitions:  # the follower fetches at the leader's log end
            partition.record_follower_fetch(FOLLOWER, partition.log.log_end_offset)
        await leader.until_in_sync(10)
        assert [sum(len(t.partitions) for t in r.topics) for r in leader.controller.requests] == [
            ISR_PROPOSALS_PER_REQUEST, 100]
        assert all(partition.partition_epoch == 1 for partition in leader.partitions)
    finally:
        await leader.replicas.close()


async def test_an_expansion_waiting_its_turn_takes_in_every_follower_caught_up_meanwhile(
        tmp_path: Path):
    """After a restart both followers of each partition catch up at about the same time,
    the second while the first one's ISR change waits to be sent: it is sent with both,
    one change per partition rather than one per follower (20,000 of them for 10,000
    partitions RF=3, on the broker that also answered the clients)."""
    partitions = ISR_PROPOSALS_PER_REQUEST + 100
    leader = Leader(tmp_path, partitions, followers=(FOLLOWER, SECOND_FOLLOWER))
    try:
        for follower in (FOLLOWER, SECOND_FOLLOWER):  # before any change is sent
            for partition in leader.partitions:
                partition.record_follower_fetch(follower, partition.log.log_end_offset)
        await leader.until_in_sync(10)
        assert sum(len(t.partitions) for r in leader.controller.requests
                   for t in r.topics) == partitions
    finally:
        await leader.replicas.close()


async def test_a_fenced_follower_is_not_proposed_for_the_isr(tmp_path: Path):
    """A fenced broker's empty replica of an empty partition holds "everything": the leader
    proposed it, the controller refused (INELIGIBLE_REPLICA), every round while it stayed
    fenced. As in Kafka, the leader proposes only eligible replicas, and proposes them as
    soon as their broker is unfenced."""
    leader = Leader(tmp_path, 1, fenced=frozenset({FOLLOWER}))
    try:
        (partition,) = leader.partitions
        partition.record_follower_fetch(FOLLOWER, 0)
        partition.maybe_expand_isr(30)
        await asyncio.sleep(0.05)
        assert leader.controller.requests == [] and partition.isr == [LEADER]
        # Unfenced: the leader proposes it at once, not at its next periodic check.
        leader.apply({"type": "unfence_broker", "node_id": FOLLOWER})
        await leader.until_in_sync(5)
    finally:
        await leader.replicas.close()


async def test_refused_changes_of_many_partitions_are_logged_in_one_line(
        tmp_path: Path, caplog):
    """A cluster that stops refuses the ISR changes of thousands of partitions at once
    (NOT_LEADER_OR_FOLLOWER): one line per answer and error, not one per partition."""
    leader = Leader(tmp_path, 50, controller=Controller(ErrorCode.not_leader_or_follower))
    try:
        caplog.set_level("INFO", "replication.replica_manager")
        for partition in leader.partitions:
            partition.record_follower_fetch(FOLLOWER, partition.log.log_end_offset)
        async with asyncio.timeout(10):
            while not leader.controller.requests:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(refused) == 1, refused
        assert refused[0].startswith(
            "ISR change of 50 partition(s) refused (not_leader_or_follower): isr-proposals-")
        assert refused[0].endswith(", ...")
        assert all(partition.isr == [LEADER] for partition in leader.partitions)
    finally:
        await leader.replicas.close()


async def test_the_periodic_isr_check_skips_settled_partitions_yet_shrinks_what_it_must(
        tmp_path: Path):
    """With 10,000 partitions, walking every one led here each replica_lag_time_max_ms / 2
    was a sixth of an idle broker's CPU. Only partitions that may need an ISR change are
    looked at: a follower stuck behind on one partition still leaves its ISR, and one that
    stops fetching altogether still leaves every ISR, caught up or not, and is not proposed
    back while it stays silent (it was, at every check after the one that removed it)."""
    lag_ms = 400
    leader = Leader(tmp_path, 3, replica_lag_time_max_ms=lag_ms)
    replicas = leader.replicas
    try:
        for partition in leader.partitions:
            partition.record_follower_fetch(FOLLOWER, partition.log.log_end_offset)
        replicas.follower_fetched(FOLLOWER)
        await leader.until_in_sync(10)
        replicas.start()
        behind, *idle = leader.partitions
        records = build_batch([(None, b"v")], 0)
        await behind.append_as_leader(records, validate_produce_records(records), 1)
        behind.record_follower_fetch(FOLLOWER, 0)  # fetches, never gets past the append

        async def fetching(seconds: float) -> None:  # the follower broker fetches on
            for _ in range(int(seconds / 0.05)):
                replicas.follower_fetched(FOLLOWER)
                await asyncio.sleep(0.05)

        await fetching(3 * lag_ms / 1000)
        assert behind.isr == [LEADER]
        assert [partition.isr for partition in idle] == [[LEADER, FOLLOWER]] * 2
        assert replicas._isr_unsettled == {behind}  # the idle ones are no longer looked at
        await asyncio.sleep(3 * lag_ms / 1000)  # it stops fetching: out of every ISR
        assert [partition.isr for partition in idle] == [[LEADER]] * 2
    finally:
        await leader.replicas.close()
