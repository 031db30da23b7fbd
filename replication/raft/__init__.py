"""KRaft's replication of the cluster metadata log (KIP-595): a quorum of voters elects a
leader, which appends; followers fetch from it; a record is committed (and only then
applied, coordinator.controller) once a majority of voters hold it (the high watermark).

``messages`` are the typed records the voters exchange (carried on the Kafka protocol by
``wire``), ``quorum`` the state machine of one voter, driven by a clock and a transport that
are injected, so tests run it without a network or sleeps.
"""

from .messages import (
    BeginQuorumEpoch,
    EndQuorumEpoch,
    QuorumAck,
    RaftFetch,
    RaftFetchResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from .quorum import (
    QUORUM_STATE_FILE,
    NotLeader,
    QuorumSettings,
    QuorumState,
    QuorumStateFile,
    RaftLog,
    RaftNode,
    Role,
    Transport,
    parse_voters,
)

__all__ = [
    "BeginQuorumEpoch", "EndQuorumEpoch", "QuorumAck", "RaftFetch", "RaftFetchResponse",
    "SnapshotId", "VoteRequest", "VoteResponse", "QUORUM_STATE_FILE", "NotLeader", "QuorumSettings", "QuorumState",
    "QuorumStateFile", "RaftLog", "RaftNode", "Role", "Transport", "parse_voters",
]
