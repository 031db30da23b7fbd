"""In-memory coordinator parts for the coordinators' unit tests: a ``CoordinatorLog`` over
plain lists and a ``Clock`` whose virtual time jumps to the next deadline once every task
waits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerSettings
from coordinator.coordinator_log import (
    CoordinatorLog,
    CoordinatorLogError,
    LoggedMarker,
    LoggedRecord,
    LogRecord,
    TxnProducer,
    partition_for,
)
from coordinator.group.timer import ManualTimer, sleep
from protocol.records import NO_PRODUCER_ID
from replication.cluster_metadata import BrokerInfo

# Event-loop rounds after which every task is taken to wait on the timer. The longest chain
# of work in the coordinator tests (a request, its in-memory append, the answers it resolves
# and what those tasks do next) needs 12; the margin keeps a deeper chain from seeing time
# jump early.
IDLE_ROUNDS = 50


class MemoryCoordinatorLog(CoordinatorLog):
    """Partitions as plain lists, all led by this broker until a test says otherwise;
    appends can be made to fail, their acknowledgement (the ISR's) and replays held back.
    Transactional appends keep their producer id, and ``write_marker`` ends a transaction
    as WriteTxnMarkers does."""

    def __init__(self, partitions: int = 3) -> None:
        self.logs: dict[int, list[LoggedRecord | LoggedMarker]] = {
            p: [] for p in range(partitions)}
        self.led = set(self.logs)
        self.epochs: dict[int, int] = {}
        self.failure: ErrorCode | None = None
        self.replay_gate: asyncio.Event | None = None
        self.acknowledge_gate: asyncio.Event | None = None

    async def ensure_topic(self) -> None:
        pass

    def partition_for(self, key: str) -> int:
        return partition_for(key, len(self.logs))

    def coordinator_node(self, partition: int) -> BrokerInfo | None:
        return None  # no brokers here: only FindCoordinator asks, and it is not tested here

    def is_local_leader(self, partition: int) -> bool:
        return partition in self.led

    def led_partitions(self) -> set[int]:
        return set(self.led)

    def coordinator_epoch(self, partition: int) -> int:
        return self.epochs.get(partition, 0)

    async def append(self, partition: int, records: Sequence[LogRecord], timestamp_ms: int,
                     transaction: TxnProducer | None = None) -> int:
        await asyncio.sleep(0)  # the write is asynchronous, as the replicated one is
        # As the real log: a batch holds at least one record.
        assert records, "append of no records"
        if self.failure is not None:
            raise CoordinatorLogError(self.failure, "injected")
        log = self.logs[partition]
        producer_id = NO_PRODUCER_ID if transaction is None else transaction.producer_id
        base = len(log)
        log.extend(LoggedRecord(base + i, r.key, r.value, producer_id)
                   for i, r in enumerate(records))
        last = len(log) - 1
        if self.acknowledge_gate is not None:
            await self.acknowledge_gate.wait()
        return last

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        log = self.logs[partition]
        log.append(LoggedMarker(len(log), producer_id, commit))

    async def replay(self, partition: int) -> AsyncIterator[LoggedRecord | LoggedMarker]:
        if self.replay_gate is not None:
            await self.replay_gate.wait()
        for entry in self.logs[partition]:  # the live list: up to its end when replay ends
            yield entry


class Clock:
    """A ManualTimer whose time jumps to the next deadline once every task waits."""

    def __init__(self) -> None:
        self.timer = ManualTimer()
        self._driver: asyncio.Task | None = None

    def start(self) -> None:
        self._driver = asyncio.ensure_future(self._drive())

    async def stop(self) -> None:
        self._driver.cancel()
        await asyncio.gather(self._driver, return_exceptions=True)

    async def _drive(self) -> None:
        while True:
            for _ in range(IDLE_ROUNDS):
                await asyncio.sleep(0)
            deadline = self.timer.next_deadline_ms()
            if deadline is not None:
                self.timer.advance(deadline - self.timer.now_ms())

    async def sleep(self, ms: int) -> None:
        await sleep(self.timer, ms)


@pytest.fixture
async def clock():
    """A started ``Clock``, stopped after the test."""
    clock = Clock()
    clock.start()
    yield clock
    await clock.stop()


async def controller_with_brokers(directory: Path, brokers: int,
                                  settings: ControllerSettings | None = None) -> Controller:
    """A started controller (a quorum of one) with ready brokers 0..brokers-1 registered and
    unfenced, as the controllers of the coordinator tests begin."""
    controller = Controller(directory, settings or ControllerSettings())
    await controller.start()
    for node in range(brokers):
        epoch = await controller.register_broker(node, "127.0.0.1", 9092 + node, None)
        await controller.heartbeat(node, epoch, want_fence=False, want_shut_down=False)
    return controller
