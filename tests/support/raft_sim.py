"""A simulated quorum for replication.raft's unit tests: in-memory logs and quorum states that
survive a node's crash, a network whose messages the test delivers, drops, duplicates or
reorders, and a clock the test advances (no sleeps, no sockets)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from replication.raft import QuorumSettings, QuorumState, RaftNode, SnapshotId
from storage.log import EpochEndOffset


class MemoryLog:
    """A RaftLog of (epoch, record) entries; every append counts as durable."""

    def __init__(self) -> None:
        self.start = 0
        self.entries: list[tuple[int, dict]] = []
        self.snapshot: SnapshotId | None = None
        self.snapshot_records: list[tuple[int, dict]] = []  # the entries it replaced

    @property
    def log_start_offset(self) -> int:
        return self.start

    @property
    def log_end_offset(self) -> int:
        return self.start + len(self.entries)

    def epoch_at(self, offset: int) -> int:
        return self.entries[offset - self.start][0]

    def last_epoch(self) -> int:
        if self.entries:
            return self.entries[-1][0]
        return self.snapshot.epoch if self.snapshot else 0

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """Kafka's endOffsetFor, as storage.classic.leader_epoch answers it."""
        runs: list[tuple[int, int]] = []  # (epoch, start offset)
        for index, (entry_epoch, _) in enumerate(self.entries):
            if not runs or runs[-1][0] != entry_epoch:
                runs.append((entry_epoch, self.start + index))
        if epoch < 0 or not runs:
            return EpochEndOffset(-1, -1)
        if epoch == runs[-1][0]:
            return EpochEndOffset(epoch, self.log_end_offset)
        higher = next((i for i, (e, _) in enumerate(runs) if e > epoch), None)
        if higher is None:
            return EpochEndOffset(-1, -1)
        if higher == 0:
            return EpochEndOffset(epoch, runs[0][1])
        return EpochEndOffset(runs[higher - 1][0], runs[higher][1])

    def latest_snapshot(self) -> SnapshotId | None:
        return self.snapshot

    async def append_as_leader(self, records: list[dict], epoch: int) -> int:
        offset = self.log_end_offset
        self.entries += [(epoch, record) for record in records]
        return offset

    async def append_as_follower(self, data: bytes) -> None:
        for offset, epoch, record in json.loads(data):
            assert offset == self.log_end_offset, (offset, self.log_end_offset)
            self.entries.append((epoch, record))

    async def truncate_to(self, offset: int) -> None:
        del self.entries[max(offset - self.start, 0):]

    async def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        # A few entries per answer, so that catching up takes several fetches.
        end = min(max_offset, offset + 3)
        return json.dumps([[o, *self.entries[o - self.start]] for o in range(offset, end)]).encode()

    def take_snapshot(self, end_offset: int) -> None:
        """Snapshot the committed prefix up to ``end_offset`` and drop the log below it."""
        self.snapshot = SnapshotId(end_offset, self.epoch_at(end_offset - 1))
        self.snapshot_records = self.committed_prefix(end_offset)
        del self.entries[:end_offset - self.start]
        self.start = end_offset

    def snapshot_bytes(self, snapshot: SnapshotId) -> bytes:
        assert snapshot == self.snapshot
        return json.dumps(self.snapshot_records).encode()

    async def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        self.snapshot = snapshot
        self.snapshot_records = [tuple(entry) for entry in json.loads(data)]
        self.entries, self.start = [], snapshot.end_offset

    def committed_prefix(self, end: int) -> list[tuple[int, dict]]:
        """(epoch, record) of offsets [0, end), from the snapshot and the log."""
        whole = list(self.snapshot_records) + self.entries
        return [tuple(entry) for entry in whole[:end]]


class MemoryStateStore:
    def __init__(self) -> None:
        self.state = QuorumState()

    def read(self) -> QuorumState:
        return QuorumState(self.state.epoch, self.state.voted_for, self.state.leader_id)

    def write(self, state: QuorumState) -> None:
        self.state = state


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Message:
    source: int
    destination: int
    request: object
    response: object | None = None  # set: the answer travelling back

    @property
    def is_answer(self) -> bool:
        return self.response is not None


class SimTransport:
    def __init__(self, network: "SimNetwork", node_id: int) -> None:
        self.network = network
        self.node_id = node_id

    def send(self, destination: int, request: object) -> None:
        self.network.in_flight.append(Message(self.node_id, destination, request))

    async def fetch_snapshot(self, leader: int, snapshot: SnapshotId) -> bytes:
        return self.network.logs[leader].snapshot_bytes(snapshot)


@dataclass
class SimNetwork:
    voters: list[int]
    seed: int = 0
    settings: QuorumSettings = QuorumSettings()
    clock: FakeClock = field(default_factory=FakeClock)
    in_flight: list[Message] = field(default_factory=list)
    nodes: dict[int, RaftNode] = field(default_factory=dict)
    logs: dict[int, MemoryLog] = field(default_factory=dict)
    stores: dict[int, MemoryStateStore] = field(default_factory=dict)
    # Every (epoch, leader) seen: election safety is one leader per epoch.
    leaders: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        for node in self.voters:
            self.logs[node] = MemoryLog()
            self.stores[node] = MemoryStateStore()

    async def start(self, node: int) -> RaftNode:
        """Start (or restart after a crash: what is durable survives) a voter."""
        raft = RaftNode(node, set(self.voters), self.logs[node], self.stores[node],
                        SimTransport(self, node), self.clock, self.settings,
                        random.Random(self.rng.random()))
        self.nodes[node] = raft
        await raft.start()
        self.note_leaders()
        return raft

    def crash(self, node: int) -> None:
        del self.nodes[node]

    async def start_all(self) -> None:
        for node in self.voters:
            await self.start(node)

    async def deliver(self, message: Message) -> None:
        self.in_flight.remove(message)
        if message.is_answer:
            node = self.nodes.get(message.destination)
            if node is not None:
                await node.on_response(message.source, message.request, message.response)
        else:
            node = self.nodes.get(message.destination)
            if node is None:
                sender = self.nodes.get(message.source)
                if sender is not None:  # connection refused
                    await sender.on_response(message.destination, message.request, None)
                return
            response = await node.handle(message.request)
            self.in_flight.append(Message(message.destination, message.source,
                                          message.request, response))
        self.note_leaders()

    async def deliver_all(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            if not self.in_flight:
                return
            await self.deliver(self.in_flight[0])

    async def tick(self, seconds: float) -> None:
        self.clock.now += seconds
        for node in list(self.nodes.values()):
            await node.tick()
        self.note_leaders()

    def note_leaders(self) -> None:
        for node in self.nodes.values():
            if node.is_leader:
                previous = self.leaders.setdefault(node.epoch, node.node_id)
                assert previous == node.node_id, \
                    f"two leaders in epoch {node.epoch}: {previous} and {node.node_id}"

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n.is_leader]
        return max(leaders, key=lambda n: n.epoch) if leaders else None

    async def until_a_leader(self, step: float = 0.01, limit: float = 5.0,
                             ) -> tuple[RaftNode | None, float]:
        """Tick ``step`` at a time, delivering everything, until a voter leads (or
        ``limit`` seconds passed): that leader, and the simulated seconds it took."""
        elapsed = 0.0
        while (leader := self.leader()) is None and elapsed < limit:
            await self.tick(step)
            await self.deliver_all()
            elapsed += step
        return leader, elapsed

    async def run_until_stable(self, max_steps: int = 2000) -> RaftNode:
        """Deliver everything and tick until every live voter follows one leader and holds
        its whole log, committed."""
        for _ in range(max_steps):
            await self.deliver_all()
            leader = self.leader()
            if leader is not None and all(
                    node.leader_id == leader.node_id and node.epoch == leader.epoch
                    and node.log.log_end_offset == leader.log.log_end_offset
                    and node.high_watermark == leader.log.log_end_offset
                    for node in self.nodes.values()):
                return leader
            await self.tick(0.05)
        raise AssertionError("the quorum did not settle")
