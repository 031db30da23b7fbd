"""One voter of the metadata quorum (KIP-595's KafkaRaftClient, reduced to what kipper needs).

Roles, as KIP-595 names them:

- **unattached / voted**: an epoch with no known leader (having voted, or not, in it); when
  the election timeout passes, the voter becomes prospective.
- **prospective** (KIP-996's pre-vote): asks every voter whether it would win (Vote with
  ``pre_vote``), changing no epoch; a voter that still hears from its leader says no, so a
  voter that is only slow or cut off cannot depose a working leader. A majority of yeses
  makes it a candidate; it keeps fetching from the leader it knows meanwhile.
- **candidate**: epoch + 1, votes for itself, asks every voter (Vote); a majority of grants
  makes it leader, otherwise it is prospective again after a randomised timeout.
- **leader**: appends a ``leader_change`` record, tells the voters (BeginQuorumEpoch) and
  answers their fetches. A record is committed once a majority of voters hold it and the
  leader has committed one record of its own epoch: the high watermark. A leader that has
  not heard from a majority for ``check_quorum_timeout`` resigns (so a leader cut off, or
  stopped and resumed, never keeps accepting writes it cannot commit).
- **follower**: fetches from the leader (a fetch offset and the epoch of the record before
  it: the leader answers a *diverging epoch* when the logs differ there, and the follower
  truncates), or a snapshot when it is below the leader's log start; a fetch timeout makes
  it a candidate.

Election safety holds by persisting (epoch, voted for) before answering a vote, and log
matching by the leader's divergence check (tests/replication/test_raft.py runs both under
message loss, reordering and crashes). The node owns no task and no socket: ``tick`` is
called by its driver (replication.raft.driver), requests reach it through ``handle`` and the
answers to its own requests through ``on_response``; ``Transport.send`` carries its requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from kio.schema.errors import ErrorCode

from storage.log import EpochEndOffset

from .messages import (
    BeginQuorumEpoch,
    DivergingEpoch,
    EndQuorumEpoch,
    QuorumAck,
    RaftFetch,
    RaftFetchResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

log = logging.getLogger(__name__)


class Role(enum.Enum):
    UNATTACHED = "unattached"
    VOTED = "voted"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    FOLLOWER = "follower"
    LEADER = "leader"


class NotLeader(Exception):
    """This voter is not the leader (any more): the write is not taken, or its commit is not
    known. ``leader_id``: the leader it knows of (-1: none)."""

    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the quorum leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """Kafka's ``controller.quorum.voters``: ``id@host:port,id@host:port,...``."""
    voters: dict[int, tuple[str, int]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        node, sep, address = entry.partition("@")
        host, colon, port = address.rpartition(":")
        if not (sep and colon and node.isdigit() and port.isdigit() and host):
            raise ValueError(f"voter {entry!r} is not of the form id@host:port")
        if int(node) in voters:
            raise ValueError(f"voter {node} named twice")
        voters[int(node)] = (host.strip("[]"), int(port))
    return voters


# A tick this late means the event loop was held (see RaftNode.stalled); less is the
# scheduling noise of a busy machine (tens of ms on two loaded cores).
STALL_S = 0.2


@dataclass(frozen=True)
class QuorumSettings:
    # A follower that fetched nothing from its leader for this long starts an election
    # (controller.quorum.fetch.timeout.ms); plus up to fetch_jitter_s, drawn each time, so
    # that two followers of a dead leader rarely stand at once (a split vote).
    fetch_timeout_s: float = 1.0
    fetch_jitter_s: float = 0.3
    # A candidate that did not win tries again after a time drawn from [1, 2) × this
    # (controller.quorum.election.timeout.ms; the same wait for an unattached voter).
    election_timeout_s: float = 0.3
    # A leader that heard no fetch from a majority of voters for this long resigns.
    check_quorum_timeout_s: float = 1.5
    # How long a follower's fetch may be unanswered before it is sent again; a leader's
    # long poll of a fetch with nothing new.
    request_timeout_s: float = 2.0
    fetch_max_wait_s: float = 0.5
    # After a failed request, before the next one to the same voter.
    retry_backoff_s: float = 0.05


@dataclass
class QuorumState:
    """What a voter must remember across restarts (Kafka's ``quorum-state`` file): the epoch,
    whom it voted for in it, the leader it knew."""

    epoch: int = 0
    voted_for: int = -1
    leader_id: int = -1


class QuorumStateStore(Protocol):
    def read(self) -> QuorumState: ...

    def write(self, state: QuorumState) -> None: ...


# Its name in the voter's metadata directory.
QUORUM_STATE_FILE = "quorum-state"


class QuorumStateFile:
    """The quorum state as a JSON file, replaced atomically (written, fsynced, renamed)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> QuorumState:
        try:
            return QuorumState(**json.loads(self.path.read_text()))
        except FileNotFoundError:
            return QuorumState()

    def write(self, state: QuorumState) -> None:
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "w") as out:
            json.dump(asdict(state), out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


class RaftLog(Protocol):
    """The replicated log as the quorum sees it (coordinator.metadata_log implements it)."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def last_epoch(self) -> int:
        """Epoch of the last record (or of the snapshot the log starts at; 0 if none)."""

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset: ...

    def latest_snapshot(self) -> SnapshotId | None: ...

    async def append_as_leader(self, records: list[dict], epoch: int) -> int:
        """Append durably; return the offset of the first record."""

    async def append_as_follower(self, data: bytes) -> None:
        """Append what the leader's ``read`` returned, durably."""

    async def truncate_to(self, offset: int) -> None: ...

    async def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes: ...

    async def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Keep the leader's snapshot and restart the log empty at its end offset."""


class Transport(Protocol):
    def send(self, destination: int, request: object) -> None:
        """Send a request to voter ``destination``; its answer (or None if it failed) comes
        back through ``RaftNode.on_response``."""

    async def fetch_snapshot(self, leader: int, snapshot: SnapshotId) -> bytes:
        """The whole snapshot from the leader (FetchSnapshot, chunk by chunk)."""


@dataclass(frozen=True)
class VoterState:
    """A voter as its leader sees it (DescribeQuorum)."""

    node_id: int
    log_end_offset: int  # -1: not heard from in this epoch
    seconds_since_fetch: float | None  # None: never, in this epoch


@dataclass(frozen=True)
class QuorumDescription:
    leader_id: int
    epoch: int
    high_watermark: int
    voters: tuple[VoterState, ...]


# The record a new leader appends first: committing it commits everything before it.
LEADER_CHANGE = "leader_change"


@dataclass
class _LeaderState:
    epoch_start: int  # offset of this epoch's leader_change record
    # Per voter: the log end offset its latest fetch showed, and when it fetched.
    end_offsets: dict[int, int] = field(default_factory=dict)
    fetched_at: dict[int, float] = field(default_factory=dict)
    began: set[int] = field(default_factory=set)  # voters that acknowledged BeginQuorumEpoch
    begin_sent_at: float = 0.0
    # Per voter: the high watermark the latest answer to its long-polled fetch carried (as
    # replication.partition's FollowerState.high_watermark_sent for a partition's followers).
    high_watermark_sent: dict[int, int] = field(default_factory=dict)


class RaftNode:
    def __init__(self, node_id: int, voters: set[int], raft_log: RaftLog,
                 store: QuorumStateStore, transport: Transport, clock: Callable[[], float],
                 settings: QuorumSettings = QuorumSettings(),
                 rng: random.Random | None = None) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not one of the voters {sorted(voters)}")
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.log = raft_log
        self.store = store
        self.transport = transport
        self.clock = clock
        self.settings = settings
        self.rng = rng or random.Random()
        self.role = Role.UNATTACHED
        self.epoch = 0
        self.voted_for = -1
        self.leader_id = -1
        self.high_watermark = 0
        # The leader this voter last followed, and when (clock time) it last answered a
        # fetch: when it was last known alive.
        self.last_leader_heard: tuple[int, float] | None = None
        # The leader followed said it resigns (EndQuorumEpoch): it no longer counts as working.
        self._leader_resigned = False
        # Called with (leader_id, epoch) whenever either changes.
        self.leader_listeners: list[Callable[[int, int], None]] = []
        # Called with the new high watermark when it moves up.
        self.commit_listeners: list[Callable[[int], None]] = []
        # Woken on every append, high watermark move and role change (long polls).
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._deadline = 0.0  # election (unattached, voted, candidate) or fetch (follower)
        self._votes: set[int] = set()
        self._prevotes: set[int] = set()
        self._leader: _LeaderState | None = None
        self._fetch_in_flight: RaftFetch | None = None
        self._fetch_sent_at = 0.0
        self._next_fetch_at = 0.0

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def epoch_start_offset(self) -> int:
        """The offset of the leader_change record of this leader's epoch (-1: not leader)."""
        return self._leader.epoch_start if self._leader is not None else -1

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Resume from the stored state: never as leader (a restarted leader lost what it had
        in memory; KIP-595's resigned state), a follower of the leader it knew otherwise."""
        state = self.store.read()
        self.epoch, self.voted_for = state.epoch, state.voted_for
        if state.leader_id >= 0 and state.leader_id != self.node_id:
            self._follow(state.leader_id, state.epoch)
        else:
            self.role = Role.VOTED if self.voted_for >= 0 else Role.UNATTACHED
            self.leader_id = -1
            self._deadline = self.clock() + (0 if len(self.voters) == 1
                                             else self._election_timeout())
        log.info("quorum voter %d starts in epoch %d as %s (voters %s)", self.node_id,
                 self.epoch, self.role.value, sorted(self.voters))
        await self.tick()

    async def resign(self) -> None:
        """A graceful stop of the leader: it stops leading (its appends and the fetches it is
        sent are refused from now on, so no answer of it keeps a follower waiting for it) and
        asks the others to elect one of them now. The caller stops ticking it first: a
        stopping voter never stands again."""
        async with self._lock:
            if self.role is not Role.LEADER or self._leader is None:
                return
            followers = sorted(self.voters - {self.node_id},
                               key=lambda v: -self._leader.end_offsets.get(v, -1))
            for voter in followers:
                self.transport.send(voter, EndQuorumEpoch(self.node_id, self.epoch,
                                                          tuple(followers)))
            log.info("voter %d resigns the leadership of epoch %d", self.node_id, self.epoch)
            self._become_unattached(self.epoch)

    # --- timers -----------------------------------------------------------------------

    def _election_timeout(self) -> float:
        return self.settings.election_timeout_s * (1 + self.rng.random())

    def _fetch_timeout(self) -> float:
        return self.settings.fetch_timeout_s + self.settings.fetch_jitter_s * self.rng.random()

    def stalled(self, seconds: float) -> None:
        """This voter's event loop was held ``seconds`` longer than a tick (by the broker
        sharing it: a topic of thousands of partitions created). What its peers sent
        meanwhile waited unread in its sockets, so the stall does not count as their
        silence: a follower gives its leader a whole fetch timeout from now, a leader gives
        each follower as long to be heard before it counts them for its quorum check.
        Kafka's raft client has a thread of its own, which a busy broker does not hold up;
        without this, creating 5,000 partitions set off an election. Lateness below
        ``STALL_S`` is a busy machine's scheduling noise: counting it stretched every fetch
        timeout, and an election after a real death with it."""
        if seconds < STALL_S:
            return
        now = self.clock()
        if self.role is Role.FOLLOWER:
            self._deadline = max(self._deadline, now + self._fetch_timeout())
        elif self.role is Role.LEADER:
            heard_by = now - self.settings.check_quorum_timeout_s + self.settings.fetch_timeout_s
            fetched_at = self._leader.fetched_at
            for voter, at in fetched_at.items():
                fetched_at[voter] = max(at, heard_by)

    async def tick(self) -> None:
        """Act on what the clock says: elections, a follower's next fetch, a leader's
        check that a majority still follows it."""
        async with self._lock:
            now = self.clock()
            if self.role is Role.LEADER:
                self._leader_tick(now)
                return
            if now >= self._deadline:
                if self.role is Role.FOLLOWER:
                    log.warning("voter %d: no fetch answered by leader %d for %.1f s: "
                                "asking the voters for an election", self.node_id,
                                self.leader_id,
                                now - self._deadline + self.settings.fetch_timeout_s)
                await self._prospect()
                return
            if self.role in (Role.FOLLOWER, Role.PROSPECTIVE) and self.leader_id >= 0:
                self._maybe_fetch(now)

    def _leader_tick(self, now: float) -> None:
        leader = self._leader
        if len(self.voters) > 1:
            recent = {v for v, at in leader.fetched_at.items()
                      if now - at < self.settings.check_quorum_timeout_s} | {self.node_id}
            if len(recent) < self.majority:
                log.warning("voter %d resigns the leadership of epoch %d: no fetch from a "
                            "majority for %.1f s", self.node_id, self.epoch,
                            self.settings.check_quorum_timeout_s)
                self._become_unattached(self.epoch)
                return
        if now - leader.begin_sent_at >= self.settings.election_timeout_s:
            leader.begin_sent_at = now
            for voter in self.voters - leader.began - {self.node_id}:
                self.transport.send(voter, BeginQuorumEpoch(self.node_id, self.epoch))

    def _maybe_fetch(self, now: float) -> None:
        if self._fetch_in_flight is not None:
            if now - self._fetch_sent_at < self.settings.request_timeout_s:
                return
            self._fetch_in_flight = None  # lost: ask again
        if now < self._next_fetch_at:
            return
        end = self.log.log_end_offset
        request = RaftFetch(self.node_id, self.epoch, end,
                            self.log.last_epoch() if end > 0 else -1)
        self._fetch_in_flight, self._fetch_sent_at = request, now
        self.transport.send(self.leader_id, request)

    # --- transitions ------------------------------------------------------------------

    def _persist(self) -> None:
        self.store.write(QuorumState(self.epoch, self.voted_for, self.leader_id))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _leader_changed(self) -> None:
        self._notify()
        for listener in self.leader_listeners:
            listener(self.leader_id, self.epoch)

    def _become_unattached(self, epoch: int) -> None:
        """No known leader in ``epoch``; a vote already cast in it stands."""
        if epoch != self.epoch:
            self.voted_for = -1
        self.epoch = epoch
        self.role = Role.VOTED if self.voted_for >= 0 else Role.UNATTACHED
        self.leader_id = -1
        self._leader = None
        self._fetch_in_flight = None
        self._persist()
        self._deadline = self.clock() + self._election_timeout()
        self._leader_changed()

    def _follow(self, leader_id: int, epoch: int) -> None:
        if epoch != self.epoch:
            self.voted_for = -1
        changed = (leader_id, epoch) != (self.leader_id, self.epoch) or self.role is not Role.FOLLOWER
        self.epoch, self.leader_id, self.role = epoch, leader_id, Role.FOLLOWER
        self._leader = None
        self._deadline = self.clock() + self._fetch_timeout()
        if changed:
            self._fetch_in_flight = None
            self._next_fetch_at = 0.0
            self._leader_resigned = False
            self._persist()
            log.info("voter %d follows leader %d in epoch %d", self.node_id, leader_id, epoch)
            self._leader_changed()

    async def _prospect(self) -> None:
        """Ask the voters whether this one would be elected in the next epoch (a pre-vote:
        no epoch, vote or leader changes)."""
        if len(self.voters) == 1:
            await self._stand()
            return
        self.role = Role.PROSPECTIVE
        self._prevotes = {self.node_id}
        self._deadline = self.clock() + self._election_timeout()
        request = VoteRequest(self.epoch + 1, self.node_id, self.log.last_epoch(),
                              self.log.log_end_offset, pre_vote=True)
        for voter in sorted(self.voters - {self.node_id}):
            self.transport.send(voter, request)

    async def _stand(self) -> None:
        """Become a candidate of the next epoch."""
        self.epoch += 1
        self.role, self.voted_for, self.leader_id = Role.CANDIDATE, self.node_id, -1
        self._leader = None
        self._fetch_in_flight = None
        self._persist()
        self._votes = {self.node_id}
        self._deadline = self.clock() + self._election_timeout()
        self._leader_changed()
        if len(self._votes) >= self.majority:
            await self._lead()
            return
        request = VoteRequest(self.epoch, self.node_id, self.log.last_epoch(),
                              self.log.log_end_offset)
        for voter in sorted(self.voters - {self.node_id}):
            self.transport.send(voter, request)

    async def _lead(self) -> None:
        self.role, self.leader_id = Role.LEADER, self.node_id
        self._persist()
        now = self.clock()
        self._leader = _LeaderState(epoch_start=self.log.log_end_offset,
                                    fetched_at={v: now for v in self.voters},
                                    began={self.node_id})
        log.info("voter %d leads epoch %d from offset %d", self.node_id, self.epoch,
                 self._leader.epoch_start)
        await self.log.append_as_leader(
            [{"type": LEADER_CHANGE, "leader_id": self.node_id, "epoch": self.epoch,
              "voters": sorted(self.voters)}], self.epoch)
        self._leader.end_offsets[self.node_id] = self.log.log_end_offset
        self._leader_changed()
        self._advance_high_watermark()
        self._leader_tick(now)

    def _advance_high_watermark(self) -> None:
        leader = self._leader
        ends = sorted((leader.end_offsets.get(v, -1) for v in self.voters), reverse=True)
        committed = ends[self.majority - 1]
        # Only a record of its own epoch commits what came before it (Raft §5.4.2).
        if committed > leader.epoch_start and committed > self.high_watermark:
            self._set_high_watermark(committed)

    def _set_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset
        self._notify()
        for listener in self.commit_listeners:
            listener(offset)

    def _observe(self, leader_id: int, epoch: int) -> bool:
        """Learn of a newer epoch (and its leader) from any message; True if it was newer."""
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._follow(leader_id, epoch)
            else:
                self._become_unattached(epoch)
            return True
        if (epoch == self.epoch and leader_id >= 0 and leader_id != self.node_id
                and self.role is not Role.FOLLOWER
                and not (self.role is Role.PROSPECTIVE and leader_id == self.leader_id)):
            self._follow(leader_id, epoch)
            return True
        return False

    def describe(self) -> QuorumDescription:
        """The quorum as this voter sees it; only a leader knows the others' positions."""
        now = self.clock()
        leader = self._leader
        voters = []
        for voter in sorted(self.voters):
            if voter == self.node_id:
                voters.append(VoterState(voter, self.log.log_end_offset, 0.0))
            elif leader is not None and voter in leader.end_offsets:
                voters.append(VoterState(voter, leader.end_offsets[voter],
                                         now - leader.fetched_at[voter]))
            else:
                voters.append(VoterState(voter, -1, None))
        return QuorumDescription(self.leader_id, self.epoch, self.high_watermark, tuple(voters))

    # --- the leader's writes ----------------------------------------------------------

    async def append(self, records: list[dict]) -> int:
        """Append as leader; return the offset of the first record (committed once the high
        watermark passes the last one). Raises NotLeader."""
        async with self._lock:
            if self.role is not Role.LEADER:
                raise NotLeader(self.leader_id, self.epoch)
            offset = await self.log.append_as_leader(records, self.epoch)
            self._leader.end_offsets[self.node_id] = self.log.log_end_offset
            self._notify()
            self._advance_high_watermark()
            return offset

    async def wait_for_change(self, timeout_s: float) -> None:
        event = self._changed
        # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancellation that
        # arrives as the event is set, and the waiting task (the controller's applier,
        # stopped as its voter resigns) would wait on instead of ending.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()

    # --- requests from other voters ---------------------------------------------------

    async def handle(self, request: object) -> object:
        async with self._lock:
            if isinstance(request, RaftFetch):
                return await self._handle_fetch(request)
            if isinstance(request, VoteRequest):
                return self._handle_vote(request)
            if isinstance(request, BeginQuorumEpoch):
                return self._handle_begin(request)
            if isinstance(request, EndQuorumEpoch):
                return self._handle_end(request)
        raise TypeError(f"not a quorum request: {request!r}")

    def _handle_vote(self, request: VoteRequest) -> VoteResponse:
        if request.candidate_id not in self.voters:
            return VoteResponse(ErrorCode.inconsistent_voter_set, self.leader_id, self.epoch,
                                False)
        if request.epoch < self.epoch:
            return VoteResponse(ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch, False)
        mine = (self.log.last_epoch(), self.log.log_end_offset)
        if request.pre_vote:
            # Changes nothing here. No while this voter leads, or follows a leader that
            # works (answered a fetch within the fetch timeout); the leader itself asking
            # does not work: it stopped leading (restarted, it never resumes its epoch), and
            # waiting out the fetch timeout for it cost every restarted cluster a second.
            leader_asks = request.candidate_id == self.leader_id
            granted = (request.epoch > self.epoch
                       and (leader_asks or not self._leader_works())
                       and (request.last_epoch, request.end_offset) >= mine)
            return VoteResponse(ErrorCode.none, self.leader_id, self.epoch, granted)
        if request.epoch > self.epoch:
            self._become_unattached(request.epoch)
        granted = False
        if self.leader_id < 0 and self.voted_for in (-1, request.candidate_id):
            if (request.last_epoch, request.end_offset) >= mine:
                granted = True
                if self.voted_for != request.candidate_id:
                    self.voted_for, self.role = request.candidate_id, Role.VOTED
                    self._persist()  # before the answer: one vote per epoch, even across a crash
                self._deadline = self.clock() + self._election_timeout()
        return VoteResponse(ErrorCode.none, self.leader_id, self.epoch, granted)

    def _leader_works(self) -> bool:
        """This voter leads, or its leader answered a fetch within the fetch timeout (not
        the jittered one: a follower that timed out asks the others, which heard from the
        leader as long ago, and they agree at once); one it has not fetched from yet gets
        its first fetch timeout."""
        if self.role is Role.LEADER:
            return True
        if self.role is not Role.FOLLOWER or self._leader_resigned:
            return False
        if self.last_leader_heard is not None and self.last_leader_heard[0] == self.leader_id:
            return self.clock() - self.last_leader_heard[1] < self.settings.fetch_timeout_s
        return self.clock() < self._deadline

    def _handle_begin(self, request: BeginQuorumEpoch) -> QuorumAck:
        if request.epoch < self.epoch:
            return QuorumAck(ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch)
        if request.leader_id != self.node_id:
            self._follow(request.leader_id, request.epoch)
        return QuorumAck(ErrorCode.none, self.leader_id, self.epoch)

    def _handle_end(self, request: EndQuorumEpoch) -> QuorumAck:
        if request.epoch < self.epoch:
            return QuorumAck(ErrorCode.fenced_leader_epoch, self.leader_id, self.epoch)
        self._observe(request.leader_id, request.epoch)
        if (self.role is Role.FOLLOWER and self.leader_id == request.leader_id
                and self.epoch == request.epoch):
            # The most caught-up successor stands first; the others give it a head start.
            rank = (request.successors.index(self.node_id)
                    if self.node_id in request.successors else len(request.successors))
            self._deadline = self.clock() + rank * self.settings.election_timeout_s
            self._leader_resigned = True  # pre-votes for a successor are granted at once
        return QuorumAck(ErrorCode.none, self.leader_id, self.epoch)

    async def _handle_fetch(self, request: RaftFetch) -> RaftFetchResponse:
        def refuse(error: ErrorCode) -> RaftFetchResponse:
            return RaftFetchResponse(error, self.leader_id, self.epoch, self.high_watermark)

        if request.epoch > self.epoch:
            return refuse(ErrorCode.unknown_leader_epoch)
        if self.role is not Role.LEADER:
            return refuse(ErrorCode.not_leader_or_follower)
        if 0 <= request.epoch < self.epoch:
            return refuse(ErrorCode.fenced_leader_epoch)
        is_voter = request.replica_id in self.voters
        snapshot = self.log.latest_snapshot()
        start = self.log.log_start_offset
        if snapshot is not None and (request.fetch_offset < start or (
                request.fetch_offset == 0 and snapshot.end_offset > 0)):
            return RaftFetchResponse(ErrorCode.none, self.node_id, self.epoch,
                                     self.high_watermark, snapshot=snapshot,
                                     log_start_offset=start)
        if request.last_fetched_epoch >= 0 and request.fetch_offset > start:
            end = self.log.end_offset_for_epoch(request.last_fetched_epoch)
            if (end.leader_epoch != request.last_fetched_epoch
                    or end.end_offset < request.fetch_offset):
                return RaftFetchResponse(
                    ErrorCode.none, self.node_id, self.epoch, self.high_watermark,
                    diverging=DivergingEpoch(end.leader_epoch, max(end.end_offset, start)),
                    log_start_offset=start)
        if request.fetch_offset > self.log.log_end_offset:
            if is_voter:  # more than the leader and no epoch to compare: start again here
                return RaftFetchResponse(
                    ErrorCode.none, self.node_id, self.epoch, self.high_watermark,
                    diverging=DivergingEpoch(self.log.last_epoch(), self.log.log_end_offset),
                    log_start_offset=start)
            return refuse(ErrorCode.offset_out_of_range)
        if is_voter and request.replica_id != self.node_id:
            self._leader.end_offsets[request.replica_id] = request.fetch_offset
            self._leader.fetched_at[request.replica_id] = self.clock()
            self._leader.began.add(request.replica_id)
            self._advance_high_watermark()
        # Voters get the uncommitted tail too; observers (brokers) only what is committed,
        # so they never have anything to truncate.
        upper = self.log.log_end_offset if is_voter else self.high_watermark
        records = b""
        if request.fetch_offset < upper:
            records = await self.log.read(request.fetch_offset, request.max_bytes, upper)
        return RaftFetchResponse(ErrorCode.none, self.node_id, self.epoch, self.high_watermark,
                                 records, log_start_offset=start)

    async def long_poll_fetch(self, request: RaftFetch, max_wait_s: float) -> RaftFetchResponse:
        """A fetch answered at once when it has news (records, an error, a divergence, a
        snapshot, or a high watermark moved, by this very fetch too), otherwise held until
        something changes or ``max_wait_s`` passes."""
        known = self.high_watermark
        leader = self._leader
        voter = request.replica_id in self.voters and request.replica_id != self.node_id
        if leader is not None and voter:
            # A voter learns the high watermark only from the answers to its fetches. One
            # told less than the current one (the commit it helped make came with another
            # voter's fetch) is answered at once rather than held: its node's broker
            # applies the metadata from that voter's replica. KIP-1166 has the fetch carry
            # the follower's high watermark for this; kipper's Fetch v12 has no such field.
            known = min(known, leader.high_watermark_sent.get(request.replica_id, -1))
        deadline = self.clock() + max_wait_s
        while True:
            response = await self.handle(request)
            if (response.records or response.error != ErrorCode.none or response.diverging
                    or response.snapshot or response.high_watermark != known):
                if voter and self._leader is not None and response.epoch == self.epoch:
                    self._leader.high_watermark_sent[request.replica_id] = \
                        response.high_watermark
                return response
            remaining = deadline - self.clock()
            if remaining <= 0:
                return response
            await self.wait_for_change(remaining)

    async def read_committed(self, offset: int, max_bytes: int,
                             max_wait_s: float) -> RaftFetchResponse:
        """What this voter's own replica holds committed from ``offset`` (up to its high
        watermark, so nothing read is ever truncated), or the snapshot to load first when
        ``offset`` is below the log start; held up to ``max_wait_s`` for news. The broker of
        a combined node applies its metadata from here, as KRaft's does from its local raft
        client, rather than fetching the same records again from the leader."""
        deadline = self.clock() + max_wait_s
        while True:
            async with self._lock:
                start = self.log.log_start_offset
                snapshot = self.log.latest_snapshot()
                if snapshot is not None and (offset < start or (
                        offset == 0 and snapshot.end_offset > 0)):
                    return RaftFetchResponse(ErrorCode.none, self.leader_id, self.epoch,
                                             self.high_watermark, snapshot=snapshot,
                                             log_start_offset=start)
                if offset < self.high_watermark:
                    return RaftFetchResponse(
                        ErrorCode.none, self.leader_id, self.epoch, self.high_watermark,
                        await self.log.read(offset, max_bytes, self.high_watermark),
                        log_start_offset=start)
            remaining = deadline - self.clock()
            if remaining <= 0:
                return RaftFetchResponse(ErrorCode.none, self.leader_id, self.epoch,
                                         self.high_watermark, log_start_offset=start)
            await self.wait_for_change(remaining)

    # --- answers to this voter's requests ---------------------------------------------

    async def on_response(self, source: int, request: object, response: object | None) -> None:
        async with self._lock:
            if isinstance(request, RaftFetch):
                await self._on_fetch_response(source, request, response)
            elif response is None:
                return
            elif isinstance(response, VoteResponse):
                await self._on_vote_response(source, request, response)
            elif isinstance(response, QuorumAck):
                if self._observe(response.leader_id, response.epoch):
                    return
                if (isinstance(request, BeginQuorumEpoch) and self._leader is not None
                        and request.epoch == self.epoch and response.error == ErrorCode.none):
                    self._leader.began.add(source)

    async def _on_vote_response(self, source: int, request: VoteRequest,
                                response: VoteResponse) -> None:
        if request.pre_vote:
            # A newer epoch is followed; a leader named in this one is not: the voter still
            # believes in the leader this one stopped hearing from (it keeps fetching it).
            if response.epoch > self.epoch:
                self._observe(response.leader_id, response.epoch)
            elif (self.role is Role.PROSPECTIVE and request.epoch == self.epoch + 1
                  and response.granted):
                self._prevotes.add(source)
                if len(self._prevotes) >= self.majority:
                    await self._stand()
            return
        if self._observe(response.leader_id, response.epoch):
            return
        if (self.role is Role.CANDIDATE and request.epoch == self.epoch
                and response.epoch == self.epoch and response.granted):
            self._votes.add(source)
            if len(self._votes) >= self.majority:
                await self._lead()

    async def _on_fetch_response(self, source: int, request: RaftFetch,
                                 response: RaftFetchResponse | None) -> None:
        if request is not self._fetch_in_flight:
            return  # an answer to a fetch given up on, or of an earlier leadership
        self._fetch_in_flight = None
        if response is None:
            self._next_fetch_at = self.clock() + self.settings.retry_backoff_s
            return
        if self._observe(response.leader_id, response.epoch):
            return
        if (response.error != ErrorCode.none
                or self.role not in (Role.FOLLOWER, Role.PROSPECTIVE)
                or source != self.leader_id or response.epoch != self.epoch):
            self._next_fetch_at = self.clock() + self.settings.retry_backoff_s
            return
        self.role = Role.FOLLOWER  # a prospective voter's leader answered: it works
        self._deadline = self.clock() + self._fetch_timeout()
        self.last_leader_heard = (self.leader_id, self.clock())
        if request.fetch_offset != self.log.log_end_offset:
            return  # the log changed since it was asked (cannot while one is in flight)
        if response.diverging is not None:
            # Where this log's copy of the diverging epoch ends (Kafka's truncateToEndOffset):
            # the leader's end of it, or less if this log holds less of it.
            own = self.log.end_offset_for_epoch(response.diverging.epoch)
            target = min(response.diverging.end_offset, own.end_offset, self.log.log_end_offset)
            target = max(target, self.log.log_start_offset)
            if target < self.high_watermark:
                log.error("voter %d: leader %d asks to truncate to %d, below the committed "
                          "offset %d: refused", self.node_id, source, target,
                          self.high_watermark)
                return
            log.info("voter %d: log diverges from leader %d's after offset %d (epoch %d): "
                     "truncating from %d", self.node_id, source, target,
                     response.diverging.epoch, self.log.log_end_offset)
            await self.log.truncate_to(target)
            self._notify()
            return
        if response.snapshot is not None:
            await self._install_snapshot(source, response.snapshot)
            return
        if response.records:
            await self.log.append_as_follower(response.records)
            self._notify()
        committed = min(response.high_watermark, self.log.log_end_offset)
        if committed > self.high_watermark:
            self._set_high_watermark(committed)
        self._maybe_fetch(self.clock())

    async def _install_snapshot(self, leader: int, snapshot: SnapshotId) -> None:
        log.info("voter %d loads leader %d's snapshot ending at %d", self.node_id, leader,
                 snapshot.end_offset)
        # The lock is held while the snapshot arrives: nothing else changes this log.
        try:
            data = await self.transport.fetch_snapshot(leader, snapshot)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.warning("voter %d: snapshot not fetched (%s): asking again", self.node_id, e)
            self._next_fetch_at = self.clock() + self.settings.retry_backoff_s
            return
        await self.log.install_snapshot(snapshot, data)
        self._notify()
        if snapshot.end_offset > self.high_watermark:
            self._set_high_watermark(snapshot.end_offset)
