"""The transaction coordinator over an in-memory ``__transaction_state`` and an in-memory
WriteTxnMarkers sender, on virtual time (support.coordinators)."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest
from kio.schema.errors import ErrorCode
from support.coordinators import MemoryCoordinatorLog

from coordinator.transaction.markers import MarkerWriter, TxnMarkers
from coordinator.transaction.records import decode_key, decode_value
from coordinator.transaction.service import TransactionCoordinator
from coordinator.transaction.state import ProducerIdAndEpoch, TransactionState
from coordinator.transaction_config import TransactionConfig
from replication.cluster_metadata import (
    BrokerInfo,
    MetadataImage,
    PartitionInfo,
    TopicInfo,
)

# Kafka's settings but for the expiry of idle ids, shortened from 7 days so the test's
# virtual time (checks for timed-out transactions every 10 s) passes quickly.
CONFIG = TransactionConfig(retry_backoff_ms=1, transactional_id_expiration_ms=120_000,
                           remove_expired_transaction_cleanup_interval_ms=60_000)
TIMEOUT_MS = 60_000
T0, T1, U0 = ("t", 0), ("t", 1), ("u", 0)


class MemoryMarkerSender:
    """WriteTxnMarkers as the leaders would answer them; ``errors`` answers a partition with
    an error (consumed one per request) until it runs out."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, TxnMarkers]] = []
        self.errors: dict[tuple[str, int], list[ErrorCode]] = {}
        self.blocked: asyncio.Event | None = None

    async def __call__(self, broker: BrokerInfo, markers: TxnMarkers):
        if self.blocked is not None:
            await self.blocked.wait()
        self.sent.append((broker.node_id, markers))
        return {tp: (self.errors[tp].pop(0) if self.errors.get(tp) else ErrorCode.none)
                for tp in markers.partitions}

    def written(self) -> list[tuple[bool, int, frozenset]]:
        return [(m.commit, m.producer_epoch, m.partitions) for _, m in self.sent]


def cluster_image() -> MetadataImage:
    image = MetadataImage()
    for node_id in (1, 2):
        image.brokers[node_id] = BrokerInfo(node_id, "127.0.0.1", 9000 + node_id)
    for name, leaders in (("t", [1, 2]), ("u", [2])):
        image.topics[name] = TopicInfo(name, uuid.uuid4(), partitions={
            p: PartitionInfo(name, p, [leader], [leader], leader)
            for p, leader in enumerate(leaders)})
    return image


@pytest.fixture
def store():
    return MemoryCoordinatorLog()


@pytest.fixture
def sender():
    return MemoryMarkerSender()


@pytest.fixture
def image():
    return cluster_image()


@pytest.fixture
async def coordinator(store, sender, image, clock):
    coordinator = TransactionCoordinator(CONFIG, store, MarkerWriter(image, sender, 1, clock.timer),
                                         itertools.count(1000).__next__, clock.timer)
    await coordinator.start()
    await clock.sleep(10)
    yield coordinator
    await coordinator.stop()


def state_of(coordinator: TransactionCoordinator, transactional_id: str = "tx"):
    error, snapshot = coordinator.describe(transactional_id)
    assert error == ErrorCode.none
    return snapshot


def logged_states(store: MemoryCoordinatorLog, transactional_id: str = "tx") -> list:
    partition = store.partition_for(transactional_id)
    return [None if r.value is None else decode_value(r.value).state
            for r in store.logs[partition] if decode_key(r.key) == transactional_id]


async def begin(coordinator, partitions=(T0, U0), transactional_id: str = "tx",
                timeout_ms: int = TIMEOUT_MS) -> tuple[int, int]:
    result = await coordinator.init_producer_id(transactional_id, timeout_ms, None)
    assert result.error == ErrorCode.none
    assert await coordinator.add_partitions(transactional_id, result.producer_id,
                                            result.producer_epoch, partitions) == ErrorCode.none
    return result.producer_id, result.producer_epoch


async def test_commit_writes_prepare_markers_and_complete(coordinator, store, sender,
                                                          clock) -> None:
    producer_id, epoch = await begin(coordinator)
    assert (producer_id, epoch) == (1000, 0)
    assert await coordinator.end_transaction("tx", producer_id, epoch, True) == ErrorCode.none
    await clock.sleep(10)
    assert sorted((node, m.partitions) for node, m in sender.sent) == [
        (1, frozenset({T0})), (2, frozenset({U0}))]
    assert all(m.commit and m.producer_epoch == 0 and m.coordinator_epoch == 0
               for _, m in sender.sent)
    assert state_of(coordinator).state == TransactionState.COMPLETE_COMMIT
    assert logged_states(store) == [TransactionState.EMPTY, TransactionState.ONGOING,
                                    TransactionState.PREPARE_COMMIT,
                                    TransactionState.COMPLETE_COMMIT]
    # A retry of the same EndTxn succeeds; the other outcome is refused; a new one starts.
    assert await coordinator.end_transaction("tx", producer_id, epoch, True) == ErrorCode.none
    assert await coordinator.end_transaction("tx", producer_id, epoch, False) \
        == ErrorCode.invalid_txn_state
    assert await coordinator.add_partitions("tx", producer_id, epoch, [T1]) == ErrorCode.none
    assert state_of(coordinator).partitions == {T1}


async def test_end_txn_without_a_transaction_is_invalid(coordinator) -> None:
    result = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert await coordinator.end_transaction("tx", result.producer_id, 0, True) \
        == ErrorCode.invalid_txn_state
    assert await coordinator.end_transaction("unknown", 5, 0, True) \
        == ErrorCode.invalid_producer_id_mapping


async def test_a_new_instance_fences_the_zombie(coordinator, sender, clock) -> None:
    producer_id, zombie_epoch = await begin(coordinator)
    retry = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert retry.error == ErrorCode.concurrent_transactions
    await clock.sleep(10)
    assert sender.written() == [(False, 1, {T0}), (False, 1, {U0})] or \
        sorted(sender.written(), key=str) == sorted([(False, 1, frozenset({T0})),
                                                     (False, 1, frozenset({U0}))], key=str)
    fresh = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert (fresh.error, fresh.producer_id, fresh.producer_epoch) == (ErrorCode.none,
                                                                      producer_id, 2)
    assert await coordinator.add_partitions("tx", producer_id, zombie_epoch, [T1]) \
        == ErrorCode.producer_fenced
    assert await coordinator.end_transaction("tx", producer_id, zombie_epoch, True) \
        == ErrorCode.producer_fenced


async def test_a_transaction_past_its_timeout_is_aborted(coordinator, sender, clock) -> None:
    producer_id, epoch = await begin(coordinator, timeout_ms=1_000)
    await clock.sleep(CONFIG.abort_timed_out_transaction_cleanup_interval_ms + 10)
    assert {(commit, e) for commit, e, _ in sender.written()} == {(False, epoch + 1)}
    assert state_of(coordinator).state == TransactionState.COMPLETE_ABORT
    assert await coordinator.end_transaction("tx", producer_id, epoch, True) \
        == ErrorCode.producer_fenced


async def test_failover_resumes_a_prepared_commit(coordinator, store, sender, clock) -> None:
    producer_id, epoch = await begin(coordinator)
    sender.blocked = asyncio.Event()
    assert await coordinator.end_transaction("tx", producer_id, epoch, True) == ErrorCode.none
    partition = store.partition_for("tx")
    store.led.discard(partition)
    coordinator.on_metadata_change()
    assert coordinator.describe("tx")[0] == ErrorCode.not_coordinator
    sender.blocked.set()
    await clock.sleep(10)
    assert sender.sent == []  # the old coordinator gave up its markers
    # This broker leads the partition again, at a new leader epoch: it loads the prepared
    # commit and finishes it.
    store.led.add(partition)
    store.epochs[partition] = 5
    coordinator.on_metadata_change()
    await clock.sleep(10)
    assert {(m.commit, m.coordinator_epoch) for _, m in sender.sent} == {(True, 5)}
    assert state_of(coordinator).state == TransactionState.COMPLETE_COMMIT
    assert logged_states(store)[-2:] == [TransactionState.PREPARE_COMMIT,
                                         TransactionState.COMPLETE_COMMIT]


async def test_markers_retry_until_written_and_skip_deleted_topics(coordinator, sender, image,
                                                                   clock) -> None:
    producer_id, epoch = await begin(coordinator, partitions=(T0, T1, U0))
    sender.errors[T0] = [ErrorCode.not_leader_or_follower, ErrorCode.not_enough_replicas]
    del image.topics["u"]
    assert await coordinator.end_transaction("tx", producer_id, epoch, False) == ErrorCode.none
    await clock.sleep(100)
    assert state_of(coordinator).state == TransactionState.COMPLETE_ABORT
    assert [m.partitions for _, m in sender.sent].count(frozenset({T0})) == 3
    assert all(U0 not in m.partitions for _, m in sender.sent)


async def test_not_coordinator_and_loading(coordinator, store, clock) -> None:
    partition = store.partition_for("tx")
    store.led.discard(partition)
    coordinator.on_metadata_change()
    result = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert result.error == ErrorCode.not_coordinator
    store.replay_gate = asyncio.Event()
    store.led.add(partition)
    coordinator.on_metadata_change()
    result = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert result.error == ErrorCode.coordinator_load_in_progress
    store.replay_gate.set()
    await clock.sleep(10)
    assert (await coordinator.init_producer_id("tx", TIMEOUT_MS, None)).error == ErrorCode.none


async def test_bad_input(coordinator, store) -> None:
    assert (await coordinator.init_producer_id("tx", CONFIG.max_timeout_ms + 1, None)).error \
        == ErrorCode.invalid_transaction_timeout
    assert (await coordinator.init_producer_id("", TIMEOUT_MS, None)).error \
        == ErrorCode.invalid_request
    first = await coordinator.init_producer_id("tx", TIMEOUT_MS, None)
    assert (await coordinator.init_producer_id(
        "tx", TIMEOUT_MS, ProducerIdAndEpoch(first.producer_id + 1, 0))).error \
        == ErrorCode.producer_fenced
    store.failure = ErrorCode.not_coordinator
    assert await coordinator.add_partitions("tx", first.producer_id, 0, [T0]) \
        == ErrorCode.not_coordinator
    store.failure = None
    assert await coordinator.add_partitions("tx", first.producer_id, 0, [T0]) == ErrorCode.none


async def test_idle_ids_expire(coordinator, store, clock) -> None:
    await begin(coordinator, partitions=[T0], transactional_id="open")
    await coordinator.init_producer_id("idle", TIMEOUT_MS, None)
    # "open" times out and is aborted first (after TIMEOUT_MS and a check), then expires.
    await clock.sleep(TIMEOUT_MS + CONFIG.transactional_id_expiration_ms
                      + 2 * CONFIG.remove_expired_transaction_cleanup_interval_ms)
    assert coordinator.describe("idle")[0] == ErrorCode.transactional_id_not_found
    assert logged_states(store, "idle")[-1] is None
    assert logged_states(store, "open")[-3:] == [TransactionState.PREPARE_ABORT,
                                                 TransactionState.COMPLETE_ABORT, None]


async def test_list_transactions_filters(coordinator) -> None:
    await begin(coordinator, partitions=[T0], transactional_id="a")
    await coordinator.init_producer_id("b", TIMEOUT_MS, None)
    error, listed = coordinator.list_transactions([TransactionState.ONGOING], [])
    assert (error, [tid for tid, _ in listed]) == (ErrorCode.none, ["a"])
    error, listed = coordinator.list_transactions([], [1001])
    assert [tid for tid, _ in listed] == ["b"]
    assert len(coordinator.list_transactions([], [])[1]) == 2
