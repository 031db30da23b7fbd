"""Stream metadata of shared partitions (KIP-1183): which object holds which offsets.

A shared partition's *stream* is the list of ranges, in offset order and without gaps, that
make up its committed records: each range names an object in object storage (a WAL object
of the broker that led it, or a per-partition data object) and the bytes of it that hold
offsets [base_offset, last_offset]. The stream's end is the partition's committed end: what
acks wait for, what consumers may read up to, where a new leader continues.

The stream lives in the cluster metadata log (``shared_stream`` records). Each commit goes
through the active controller (``Controller.commit_shared_streams``), which checks it
against the partition as the metadata has it now, under the same lock that moves
leaderships:

- the committing broker leads the partition in the commit's leader epoch: a deposed leader
  (a zombie still uploading) is refused, so none of its writes is acknowledged;
- an append starts exactly at the stream's end: two leaders never commit different records
  at the same offsets;
- a compaction replaces a run of ranges by one data object covering exactly their offsets.

``SharedStreams`` is the state those records build, applied by every node's metadata image
(replication.cluster_metadata) and checked by the controller before it commits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

SHARED_STREAM_RECORD = "shared_stream"
WAL = "wal"
DATA = "data"


@dataclass(frozen=True, slots=True)
class StreamRange:
    """Offsets [base_offset, last_offset] of one partition at bytes [position, position +
    length) of ``bucket``/``key``, written by its leader in ``leader_epoch``."""

    bucket: str
    key: str
    base_offset: int
    last_offset: int
    position: int
    length: int
    leader_epoch: int
    kind: str  # WAL or DATA

    def to_wire(self) -> dict:
        return asdict(self)

    @classmethod
    def from_wire(cls, wire: dict) -> "StreamRange":
        return cls(**wire)


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """One partition's part of a commit: ``ranges`` appended at the stream's end (a WAL
    upload), or, with ``compaction``, one data-object range replacing the ranges it covers."""

    topic: str
    partition: int
    leader_epoch: int
    ranges: tuple[StreamRange, ...]
    compaction: bool = False

    def to_wire(self) -> dict:
        return {"topic": self.topic, "partition": self.partition,
                "leader_epoch": self.leader_epoch, "compaction": self.compaction,
                "ranges": [r.to_wire() for r in self.ranges]}

    @classmethod
    def from_wire(cls, wire: dict) -> "StreamCommit":
        return cls(wire["topic"], wire["partition"], wire["leader_epoch"],
                   tuple(StreamRange.from_wire(r) for r in wire["ranges"]),
                   bool(wire["compaction"]))

    def record(self) -> dict:
        """The metadata record that applies this commit."""
        return {"type": SHARED_STREAM_RECORD, **self.to_wire()}


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """The controller's answer for one StreamCommit; ``freed``: the objects the committer
    deletes, as no stream refers to them: those an accepted compaction replaced, or a refused
    commit's own (unless an earlier attempt of it landed)."""

    error_code: ErrorCode
    message: str = ""
    freed: tuple[tuple[str, str], ...] = ()

    def to_wire(self) -> dict:
        return {"error_code": int(self.error_code), "message": self.message,
                "freed": [list(f) for f in self.freed]}

    @classmethod
    def from_wire(cls, wire: dict) -> "CommitOutcome":
        return cls(ErrorCode(wire["error_code"]), wire["message"],
                   tuple((bucket, key) for bucket, key in wire["freed"]))


class StreamMetadata(Protocol):
    """What the engine needs of the broker around it (replication.shared_streams)."""

    async def commit(self, commits: list[StreamCommit]) -> list[CommitOutcome]:
        """Commit through the active controller; one outcome per commit, in order. Raises
        on no answer (the commit may or may not have happened)."""

    def stream(self, topic: str, partition: int) -> list[StreamRange]:
        """The partition's committed ranges as this broker's metadata image has them."""

    def stream_epochs(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """(leader epoch, first offset) of each leadership that committed to the stream."""


class SharedStreams:
    """Every shared partition's stream, and how many ranges refer to each object."""

    def __init__(self) -> None:
        self._streams: dict[tuple[str, int], list[StreamRange]] = {}
        # Per stream, (leader epoch, first offset) of each leadership that appended to it,
        # as a local log's leader-epoch cache: a new leader keeps what of its local log
        # agrees with them (storage.shared.log).
        self._epochs: dict[tuple[str, int], list[tuple[int, int]]] = {}
        self._references: Counter[tuple[str, str]] = Counter()

    def stream(self, topic: str, partition: int) -> list[StreamRange]:
        return list(self._streams.get((topic, partition), ()))

    def stream_epochs(self, topic: str, partition: int) -> list[tuple[int, int]]:
        return list(self._epochs.get((topic, partition), ()))

    def end_offset(self, topic: str, partition: int) -> int:
        ranges = self._streams.get((topic, partition))
        return ranges[-1].last_offset + 1 if ranges else 0

    def referenced(self, bucket: str, key: str) -> bool:
        return (bucket, key) in self._references

    def replaced_objects(self, commit: StreamCommit) -> set[tuple[str, str]]:
        """The objects of the ranges a (checked) compaction replaces."""
        if not commit.compaction:
            return set()
        stream = self._streams[(commit.topic, commit.partition)]
        i, j = self._covered(stream, commit.ranges[0])
        return {(r.bucket, r.key) for r in stream[i:j]}

    def check(self, commit: StreamCommit) -> tuple[ErrorCode, str]:
        """Whether ``commit`` continues the stream (the controller checks leadership)."""
        ranges = commit.ranges
        if not ranges or any(b.base_offset != a.last_offset + 1
                             for a, b in zip(ranges, ranges[1:])):
            return ErrorCode.invalid_request, "ranges must be contiguous"
        stream = self._streams.get((commit.topic, commit.partition), [])
        if not commit.compaction:
            end = self.end_offset(commit.topic, commit.partition)
            if ranges[0].base_offset != end:
                return (ErrorCode.out_of_order_sequence_number if ranges[0].base_offset > end
                        else ErrorCode.invalid_request,
                        f"the stream ends at {end}, not {ranges[0].base_offset}")
            return ErrorCode.none, ""
        if len(ranges) != 1 or self._covered(stream, ranges[0]) is None:
            return ErrorCode.invalid_request, "a compaction must cover whole committed ranges"
        return ErrorCode.none, ""

    @staticmethod
    def _covered(stream: list[StreamRange], data: StreamRange) -> tuple[int, int] | None:
        """Indexes [i, j) of the ranges ``data`` replaces exactly, if it does."""
        starts = [i for i, r in enumerate(stream) if r.base_offset == data.base_offset]
        ends = [j + 1 for j, r in enumerate(stream) if r.last_offset == data.last_offset]
        if not starts or not ends or ends[0] <= starts[0]:
            return None
        return starts[0], ends[0]

    def apply(self, record: dict) -> list[tuple[str, str]]:
        """Apply a checked ``shared_stream`` record; return the objects it freed."""
        commit = StreamCommit.from_wire(record)
        key = (commit.topic, commit.partition)
        stream = self._streams.setdefault(key, [])
        epochs = self._epochs.setdefault(key, [])
        if record.get("whole"):  # a snapshot's: the stream as it is, replacing any copy
            removed, stream[:] = list(stream), list(commit.ranges)
            epochs[:] = [(epoch, start) for epoch, start in record["epochs"]]
        elif commit.compaction:
            i, j = self._covered(stream, commit.ranges[0])
            removed, stream[i:j] = stream[i:j], list(commit.ranges)
        else:
            removed = []
            stream.extend(commit.ranges)
            if not epochs or epochs[-1][0] != commit.leader_epoch:
                epochs.append((commit.leader_epoch, commit.ranges[0].base_offset))
        for r in commit.ranges:
            self._references[r.bucket, r.key] += 1
        return self._release(removed)

    def remove_topic(self, topic: str) -> list[tuple[str, str]]:
        removed = []
        for key in [k for k in self._streams if k[0] == topic]:
            removed += self._streams.pop(key)
            self._epochs.pop(key, None)
        return self._release(removed)

    def _release(self, removed: list[StreamRange]) -> list[tuple[str, str]]:
        freed = []
        for r in removed:
            self._references[r.bucket, r.key] -= 1
            if self._references[r.bucket, r.key] <= 0:
                del self._references[r.bucket, r.key]
                freed.append((r.bucket, r.key))
        return sorted(set(freed))

    def snapshot_records(self) -> list[dict]:
        """One record per stream, each replacing the stream it names: rebuilds the same
        state in an empty image, or in a lagging one (MetadataImage.snapshot_delta)."""
        return [{**StreamCommit(topic, partition, ranges[-1].leader_epoch,
                                tuple(ranges)).record(), "whole": True,
                 "epochs": [list(e) for e in self._epochs.get((topic, partition), ())]}
                for (topic, partition), ranges in self._streams.items() if ranges]
