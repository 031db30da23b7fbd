"""What voters say to each other (KIP-595), as typed records; ``wire`` maps them to and
from the Kafka protocol's Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode


@dataclass(frozen=True, order=True)
class SnapshotId:
    """KIP-630's snapshot id: the offset its state reaches (exclusive) and the epoch of
    the record before it."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}.checkpoint"


@dataclass(frozen=True)
class VoteRequest:
    epoch: int  # the candidate's epoch
    candidate_id: int
    last_epoch: int  # epoch of the candidate's last record
    end_offset: int  # the candidate's log end offset
    # KIP-996: "would you vote for me in this epoch?", which changes nothing at the voter.
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error: ErrorCode
    leader_id: int  # -1: unknown
    epoch: int
    granted: bool


@dataclass(frozen=True)
class BeginQuorumEpoch:
    """A new leader tells the voters (they learn it from a fetch or a vote otherwise)."""

    leader_id: int
    epoch: int


@dataclass(frozen=True)
class EndQuorumEpoch:
    """A leader stepping down (a graceful stop) asks the voters to elect another at once,
    ``successors`` first (the most caught up first)."""

    leader_id: int
    epoch: int
    successors: tuple[int, ...]


@dataclass(frozen=True)
class QuorumAck:
    """The answer to BeginQuorumEpoch and EndQuorumEpoch."""

    error: ErrorCode
    leader_id: int
    epoch: int


@dataclass(frozen=True)
class RaftFetch:
    """A Fetch of the metadata log: from a voter (``replica_id`` one of them), whose fetch
    offset tells the leader what it holds, or an observer (a broker, -1 or its id)."""

    replica_id: int
    epoch: int  # the leader epoch the fetcher knows (-1: any)
    fetch_offset: int
    last_fetched_epoch: int  # epoch of the record before fetch_offset (-1: none/unchecked)
    max_bytes: int = 1 << 20


@dataclass(frozen=True)
class DivergingEpoch:
    """The fetcher's log diverges from the leader's after ``end_offset``: truncate there."""

    epoch: int
    end_offset: int


@dataclass(frozen=True)
class RaftFetchResponse:
    error: ErrorCode
    leader_id: int
    epoch: int
    high_watermark: int = -1
    records: bytes = b""
    diverging: DivergingEpoch | None = None
    # The fetch offset is below the log's start (or 0 with a snapshot): load this first.
    snapshot: SnapshotId | None = None
    log_start_offset: int = 0
