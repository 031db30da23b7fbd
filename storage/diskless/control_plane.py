"""The diskless control plane (KIP-1164's batch coordinator) as the engine sees it: typed
request and result records, their wire shape, and one method per operation (Inkless's
ControlPlane, CommitBatchRequest/CommitBatchResponse and AbstractControlPlane).

Every state change is a request record. The replicated coordinator
(coordinator/diskless/) appends its wire dict to the topic ``__diskless-metadata`` and
every replica applies it in log order; the internal API DISKLESS_COORDINATOR_APPEND
carries the same dict to the coordinator. A record's wire shape is its fields by name
(nested records as lists of dicts) plus, for requests, a ``type`` discriminator: the
names are the ones every kipper version has written to ``__diskless-metadata``, so keep
them, and give any new field a default so that older records still decode.

A request record must fit a record of ``__diskless-metadata`` (``MAX_REQUEST_BYTES``,
under the topic's max.message.bytes): the writers of requests whose lists grow with the
data cut them into several (``split_to_fit``, ``BoundedList``), and the WAL writer closes
a buffer at ``COMMIT_MAX_BATCHES`` batches.

Two implementations apply these records: the SQLite state machine every broker runs
(coordinator/diskless/batch_state.py) and ``InMemoryControlPlane`` for engine tests; the
rules both follow are the functions at the end of this module.
"""

from __future__ import annotations

import abc
import base64
import functools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from protocol.records import TxnMarker
from storage.producer_state import (
    AbortedTransaction,
    AppendPlan,
    InvalidSequence,
    ProducerEntry,
    ProducerState,
    ProducerStateError,
)

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
GARBAGE_COLLECTED = "object was garbage-collected before its commit"
ALREADY_COMMITTED = "object was already committed"
TOPIC_DELETED = "topic was deleted"


class WireRecord:
    """A record whose wire shape is its fields by name. ``NESTED`` names the fields that
    hold a sequence of records of another type; sequences decode as tuples."""

    __slots__ = ()
    NESTED: ClassVar[dict[str, type[WireRecord]]] = {}

    def to_wire(self) -> dict[str, Any]:
        wire = {}
        for f in _wire_fields(type(self)):
            value = getattr(self, f.name)
            if f.omit_default and value == f.default:
                continue  # written as by kipper versions before the field existed
            if f.nested is not None:
                value = [item.to_wire() for item in value]
            elif isinstance(value, tuple):
                value = list(value)
            wire[f.name] = value
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> Any:
        """Raises KeyError (a field is missing) or TypeError (not a dict) on malformed input."""
        values = {}
        for f in _wire_fields(cls):
            if f.name not in wire and f.default is not MISSING:
                continue
            value = wire[f.name]
            if f.nested is not None:
                value = tuple(f.nested.from_wire(item) for item in value)
            elif isinstance(value, list):
                value = tuple(value)
            elif f.is_error_code:
                value = ErrorCode(value)
            values[f.name] = value
        return cls(**values)


class _WireField(NamedTuple):
    name: str
    default: Any
    omit_default: bool
    nested: type[WireRecord] | None
    is_error_code: bool


@functools.cache
def _wire_fields(cls: type[WireRecord]) -> tuple[_WireField, ...]:
    """The fields of ``cls`` as its wire shape needs them, worked out once per class:
    ``dataclasses.fields`` on every record took half of encoding a commit of 2,352 batches
    and a sixth of decoding it, which every broker does."""
    return tuple(_WireField(f.name, f.default, bool(f.metadata.get("omit_default")),
                            cls.NESTED.get(f.name),
                            f.type == "ErrorCode")  # annotations are strings (__future__)
                 for f in fields(cls))


class Request(WireRecord):
    """A state change: one record of the coordinator's log."""

    __slots__ = ()
    TYPE: ClassVar[str]
    RESULT: ClassVar[type[WireRecord]]

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.TYPE, **super().to_wire()}


class RecordRejected(Exception):
    """A request record that cannot be applied (malformed): every replica skips it."""


# --- commit file (the produce path) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitBatch(WireRecord):
    """One producer batch inside an uploaded WAL object, to be given offsets; or one
    transaction marker (a control batch the broker wrote for WriteTxnMarkers), which takes
    its offset like any batch and ends the producer's transaction in the partition."""

    topic_id: str
    partition: int
    byte_offset: int
    byte_size: int
    record_count: int
    max_timestamp: int
    log_append_time: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool = field(default=False, metadata={"omit_default": True})
    # A marker batch: True commits the transaction, False aborts it; None for data.
    marker_commit: bool | None = field(default=None, metadata={"omit_default": True})
    # The epoch of the transaction coordinator that wrote the marker.
    coordinator_epoch: int = field(default=-1, metadata={"omit_default": True})

    @property
    def last_offset_delta(self) -> int:  # with the fields above: a producer_state.ProducerBatch
        return self.record_count - 1

    @property
    def marker(self) -> TxnMarker | None:
        if self.marker_commit is None:
            return None
        return TxnMarker(self.producer_id, self.producer_epoch, self.marker_commit,
                         self.coordinator_epoch)


@dataclass(frozen=True, slots=True)
class BatchResult(WireRecord):
    """The outcome of one CommitBatch, in Produce response terms."""

    error_code: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = -1
    error_message: str | None = None

    @classmethod
    def stored(cls, base_offset: int, append_time_ms: int | None,
               log_start_offset: int) -> BatchResult:
        return cls(ErrorCode.none, base_offset,
                   NO_TIMESTAMP if append_time_ms is None else append_time_ms, log_start_offset)

    @classmethod
    def duplicate(cls, first_offset: int, timestamp: int, log_append_time: bool,
                  log_start_offset: int) -> BatchResult:
        """A retry of a batch already stored: its original offsets; nothing is stored again."""
        return cls.stored(first_offset, timestamp if log_append_time else None, log_start_offset)

    @classmethod
    def out_of_order_sequence(cls, message: str) -> BatchResult:
        return cls(ErrorCode.out_of_order_sequence_number, error_message=message)

    @classmethod
    def rejected(cls, error: ProducerStateError) -> BatchResult:
        """Refused by producer state: a fenced epoch, a sequence gap, a transaction state."""
        return cls(error.error_code, error_message=str(error))

    @classmethod
    def invalid_record(cls, message: str) -> BatchResult:
        return cls(ErrorCode.invalid_record, error_message=message)

    @classmethod
    def unknown_topic_or_partition(cls, message: str = TOPIC_DELETED) -> BatchResult:
        return cls(ErrorCode.unknown_topic_or_partition, error_message=message)

    @classmethod
    def storage_error(cls, message: str) -> BatchResult:
        return cls(ErrorCode.kafka_storage_error, error_message=message)


@dataclass(frozen=True, slots=True)
class CommitFileResult(WireRecord):
    NESTED: ClassVar = {"batches": BatchResult}
    batches: tuple[BatchResult, ...]


# How long a CommitFile's answer is kept for its retries (by the request's own now_ms, so every
# replica forgets the same answers). A broker retries a commit for seconds before it gives the
# object up as an orphan; an hour covers that and any clock skew between brokers. A whole-object
# commit retried later still stores nothing (the object exists: ALREADY_COMMITTED).
REQUEST_DEDUP_WINDOW_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class CommitFile(Request):
    """A broker uploaded WAL object ``object_key``: give its batches offsets. Retries carry
    the same ``request_id`` and get the first answer."""

    TYPE: ClassVar = "commit_file"
    RESULT: ClassVar = CommitFileResult
    NESTED: ClassVar = {"batches": CommitBatch}
    request_id: str
    object_key: str
    object_size: int
    uploader: int
    now_ms: int
    batches: tuple[CommitBatch, ...]
    # One partition's batches of the object, committed on their own (the naive fan-out of
    # diskless_append_commit_per_partition, kept for comparison): another partition's
    # CommitFile may have registered the object already.
    one_partition_of_object: bool = field(default=False, metadata={"omit_default": True})


# --- removing batches -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult(WireRecord):
    error_code: ErrorCode
    low_watermark: int = -1

    @classmethod
    def done(cls, low_watermark: int) -> DeleteRecordsResult:
        return cls(ErrorCode.none, low_watermark)

    @classmethod
    def unknown_topic_or_partition(cls) -> DeleteRecordsResult:
        return cls(ErrorCode.unknown_topic_or_partition)

    @classmethod
    def offset_out_of_range(cls) -> DeleteRecordsResult:
        return cls(ErrorCode.offset_out_of_range)


@dataclass(frozen=True, slots=True)
class DeleteRecords(Request):
    """Move a log's start to ``offset`` (-1: its high watermark), as DeleteRecords does."""

    TYPE: ClassVar = "delete_records"
    RESULT: ClassVar = DeleteRecordsResult
    topic_id: str
    partition: int
    offset: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class RetentionLimits(WireRecord):
    """A topic's retention.ms and retention.bytes (-1: no limit)."""

    topic_id: str
    retention_ms: int
    retention_bytes: int


@dataclass(frozen=True, slots=True)
class EnforceRetentionResult(WireRecord):
    removed_batches: int
    removed_bytes: int


@dataclass(frozen=True, slots=True)
class EnforceRetention(Request):
    TYPE: ClassVar = "retention"
    RESULT: ClassVar = EnforceRetentionResult
    NESTED: ClassVar = {"topics": RetentionLimits}
    now_ms: int
    topics: tuple[RetentionLimits, ...]


@dataclass(frozen=True, slots=True)
class ExpireProducersResult(WireRecord):
    expired: int


@dataclass(frozen=True, slots=True)
class ExpireProducers(Request):
    """Forget, in every diskless log, the producers idle for ``expiration_ms`` at ``now_ms``
    with no open transaction (producer.id.expiration.ms): the time is in the record, so
    every replica of the coordinator's state forgets the same ones."""

    TYPE: ClassVar = "expire_producers"
    RESULT: ClassVar = ExpireProducersResult
    now_ms: int
    expiration_ms: int


@dataclass(frozen=True, slots=True)
class DeleteTopicResult(WireRecord):
    pass


@dataclass(frozen=True, slots=True)
class DeleteTopic(Request):
    """Drop a deleted topic's batches; later commits for it fail as unknown."""

    TYPE: ClassVar = "delete_topic"
    RESULT: ClassVar = DeleteTopicResult
    topic_id: str
    now_ms: int


# --- live storage-mode switches (docs/mode-switch.md) ------------------------------------------


@dataclass(frozen=True, slots=True)
class SpanResult(WireRecord):
    """Where the log's diskless span ends (SealLog) or starts (OpenLog), and the producer
    state there (a storage.producer_state snapshot, base64: SealLog only)."""

    error_code: ErrorCode
    offset: int = -1
    producer_state: str = ""


@dataclass(frozen=True, slots=True)
class SealLog(Request):
    """End the log's diskless span at its high watermark: every later commit of a batch to
    it is refused, retriably (NOT_LEADER_OR_FOLLOWER: the partition moves to another mode).
    Sealing a sealed log answers the same end, so a retry or a new leader gets it again."""

    TYPE: ClassVar = "seal_log"
    RESULT: ClassVar = SpanResult
    topic_id: str
    partition: int


@dataclass(frozen=True, slots=True)
class OpenLog(Request):
    """Start the log's diskless span at ``offset`` (a new log, or a sealed one continuing
    above its high watermark) with ``producer_state`` (base64 snapshot), and take commits
    again. Repeating it changes nothing once batches were committed from ``offset`` on."""

    TYPE: ClassVar = "open_log"
    RESULT: ClassVar = SpanResult
    topic_id: str
    partition: int
    offset: int
    producer_state: str


def sealed_span(info: LogInfo | None, producers: ProducerState) -> SpanResult:
    return SpanResult(ErrorCode.none, 0 if info is None else info.high_watermark,
                      base64.b64encode(producers.snapshot()).decode("ascii"))


def opened_span(request: OpenLog, info: LogInfo | None) -> SpanResult | None:
    """The answer to an OpenLog that changes nothing (a repeat, or refused), else None."""
    if info is not None and not info.sealed:
        if info.high_watermark >= request.offset:
            return SpanResult(ErrorCode.none, request.offset)  # opened already
    if info is not None and info.high_watermark > request.offset:
        return SpanResult(ErrorCode.invalid_request)  # would overlap the sealed span
    return None


def carried_producers(request: OpenLog) -> ProducerState:
    return ProducerState.restore(base64.b64decode(request.producer_state, validate=True))


# --- objects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectsDeletedResult(WireRecord):
    deleted: tuple[str, ...]
    # Keys a live batch still points to (the GC raced a commit or a merge): kept.
    refused: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ObjectsDeleted(Request):
    """The GC is about to delete these WAL objects (files to delete, then deleted); only
    the keys in the result may go, and a later commit of any of them fails."""

    TYPE: ClassVar = "objects_deleted"
    RESULT: ClassVar = ObjectsDeletedResult
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BatchMove(WireRecord):
    """A batch copied from ``old_object_key`` to ``byte_offset`` of the merged object."""

    topic_id: str
    partition: int
    base_offset: int
    old_object_key: str
    byte_offset: int
    byte_size: int


@dataclass(frozen=True, slots=True)
class MergeResult(WireRecord):
    moved: int
    skipped: int


@dataclass(frozen=True, slots=True)
class Merge(Request):
    """KIP-1165: repoint batches to the merged object ``object_key``."""

    TYPE: ClassVar = "merge"
    RESULT: ClassVar = MergeResult
    NESTED: ClassVar = {"moves": BatchMove}
    object_key: str
    object_size: int
    now_ms: int
    moves: tuple[BatchMove, ...]


# --- compaction -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchRewrite(WireRecord):
    """One batch of a compacted partition: the coordinates it had when the cleaner read it
    (the swap is refused if they changed since) and where its rewritten bytes are in the
    compacted object. ``byte_size`` 0: every record of it went, the batch is dropped."""

    base_offset: int
    old_object_key: str
    old_byte_offset: int
    old_byte_size: int
    byte_offset: int
    byte_size: int

    @property
    def dropped(self) -> bool:
        return self.byte_size == 0


@dataclass(frozen=True, slots=True)
class CompactResult(WireRecord):
    rewritten: int = 0
    dropped: int = 0
    # Sizes of the rewritten and dropped batches before and after the swap.
    bytes_before: int = 0
    bytes_after: int = 0
    # Why nothing was swapped (None: applied).
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class Compact(Request):
    """The log cleaner's swap for one partition: repoint the rewritten batches to the
    compacted object ``object_key`` ("" when no batch kept a record) and drop the emptied
    ones, all or nothing, then move the partition's cleaner checkpoint to
    ``cleaned_offset`` and record ``tombstone_horizon_ms``. Offsets never change."""

    TYPE: ClassVar = "compact"
    RESULT: ClassVar = CompactResult
    NESTED: ClassVar = {"batches": BatchRewrite}
    topic_id: str
    partition: int
    object_key: str
    object_size: int
    now_ms: int
    cleaned_offset: int
    batches: tuple[BatchRewrite, ...]
    # The earliest delete horizon of a tombstone this pass kept (-1: it kept none): the
    # log is cleaned again then, even without new dirty data, by whichever coordinator
    # runs housekeeping by that time.
    tombstone_horizon_ms: int = -1


# --- checkpoints of the coordinator's state -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointTakenResult(WireRecord):
    # Where the coordinator's log may start now: one past the oldest checkpoint kept, once
    # ``keep`` of them exist (-1: keep the whole log).
    log_start: int


@dataclass(frozen=True, slots=True)
class CheckpointTaken(Request):
    """A copy of the state as of the coordinator's log offset ``offset`` (every record up
    to it applied) is in object storage at ``object_key``: the ``keep`` newest checkpoints
    are kept, and the log below the oldest of them is no longer needed to rebuild the state
    (coordinator/diskless/checkpoints.py)."""

    TYPE: ClassVar = "checkpoint_taken"
    RESULT: ClassVar = CheckpointTakenResult
    offset: int
    object_key: str
    keep: int


_REQUEST_TYPES: dict[str, type[Request]] = {
    cls.TYPE: cls for cls in (CommitFile, DeleteRecords, EnforceRetention, ExpireProducers,
                              DeleteTopic, ObjectsDeleted, Merge, Compact, CheckpointTaken,
                              SealLog, OpenLog)}


def decode_request(wire: dict[str, Any]) -> Request:
    """The typed request of a wire dict. Raises ValueError, KeyError or TypeError."""
    request_type = _REQUEST_TYPES.get(wire.get("type"))
    if request_type is None:
        raise ValueError(f"unknown coordinator record type {wire.get('type')!r}")
    return request_type.from_wire(wire)


# --- the size of a request record ----------------------------------------------------------------

# The max.message.bytes the coordinator's topic is created with (Kafka's default: 1 MiB and
# 12 bytes). Its log refuses a larger record, so every writer of a request whose list grows
# with the data (a commit's batches, a merge's moves, a compaction's rewrites, deleted keys,
# retention's topics) cuts it to fit; a record of tens of MB would also stall every replica
# of the coordinator that applies it.
COORDINATOR_MAX_MESSAGE_BYTES = 1_048_588
# A request's JSON may take all of that but the record batch around its one record (74
# bytes at 1 MiB: the 61-byte batch header and the record's varints).
MAX_REQUEST_BYTES = COORDINATOR_MAX_MESSAGE_BYTES - 128
# What the list of one request may take of it; the rest is for the request's other fields
# (object key, request id, times: a few hundred bytes).
MAX_REQUEST_LIST_BYTES = MAX_REQUEST_BYTES - 4096
_LIST_SEPARATOR_BYTES = len(", ")  # json.dumps's, between list items


# An entry of a request's list: a record, or a string (an object key).
_Entry = TypeVar("_Entry", WireRecord, str)


class RequestTooLarge(RecordRejected):
    """A request record larger than the coordinator's log takes: refused before anything is
    written, and never retried (the same record would be refused again)."""


def wire_size(value: WireRecord | str) -> int:
    """Bytes of ``value``'s JSON in the coordinator's log (protocol.records'
    encode_json_records; json.dumps escapes non-ASCII, so characters are bytes)."""
    return len(json.dumps(value.to_wire() if isinstance(value, WireRecord) else value,
                          sort_keys=True))


def check_request_size(request: Request) -> None:
    """Raise RequestTooLarge if ``request`` is larger than the coordinator's log takes."""
    size = wire_size(request)
    if size > MAX_REQUEST_BYTES:
        raise RequestTooLarge(f"{request.TYPE} request of {size} bytes exceeds the "
                              f"{MAX_REQUEST_BYTES} a record of the batch coordinator's log "
                              f"takes")


class BoundedList(Generic[_Entry]):
    """The list of one request being filled: entries go in while the request stays within
    MAX_REQUEST_LIST_BYTES, measured entry by entry."""

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self._bytes = 0

    def add(self, entry: _Entry) -> bool:
        """Add ``entry``; False, adding nothing, when it would not fit (it goes into another
        request). Raises RequestTooLarge when it would not fit even alone."""
        size = wire_size(entry) + (_LIST_SEPARATOR_BYTES if self.entries else 0)
        if self._bytes + size <= MAX_REQUEST_LIST_BYTES:
            self.entries.append(entry)
            self._bytes += size
            return True
        if not self.entries:
            raise RequestTooLarge(f"one {type(entry).__name__} of {size} bytes exceeds the "
                                  f"{MAX_REQUEST_LIST_BYTES} a request's list may take")
        return False


def split_to_fit(entries: Iterable[_Entry]) -> list[tuple[_Entry, ...]]:
    """``entries`` in order, cut into as few lists as fit one request each."""
    lists = [BoundedList()]
    for entry in entries:
        if not lists[-1].add(entry):
            lists.append(BoundedList())
            lists[-1].add(entry)
    return [tuple(bounded.entries) for bounded in lists if bounded.entries]


_INT16_MIN, _INT32_MIN, _INT64_MIN = -(1 << 15), -(1 << 31), -(1 << 63)
# A CommitBatch as wide as its fields' types allow (a topic id is a UUID's 36 characters;
# a new field gets its widest value here too): a WAL object of at most COMMIT_MAX_BATCHES
# batches (2,352) commits in one record, without the produce path encoding every batch to
# measure it (8 µs a batch). A typical batch takes 279 bytes with its separator, the
# widest 444.
_WIDEST_COMMIT_BATCH = CommitBatch(
    "00000000-0000-0000-0000-000000000000", _INT32_MIN, _INT64_MIN, _INT32_MIN, _INT32_MIN,
    _INT64_MIN, False, _INT64_MIN, _INT16_MIN, _INT32_MIN, _INT32_MIN, True, False, _INT32_MIN)
COMMIT_MAX_BATCHES = MAX_REQUEST_LIST_BYTES // (wire_size(_WIDEST_COMMIT_BATCH)
                                                + _LIST_SEPARATOR_BYTES)


# --- queries ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogInfo:
    log_start_offset: int
    high_watermark: int
    size_bytes: int
    # The cleaner checkpoint: batches below it were compacted at least once.
    cleaned_offset: int = 0
    # When a tombstone the last cleaning kept may go (-1: none kept; Compact's).
    tombstone_horizon_ms: int = -1
    # Its diskless span was ended by a live storage-mode switch (SealLog): no commits.
    sealed: bool = False


@dataclass(frozen=True, slots=True)
class BatchCoordinate:
    """Where a committed batch's bytes are, and the offsets it was given."""

    topic_id: str
    partition: int
    base_offset: int
    last_offset: int
    object_key: str
    byte_offset: int
    byte_size: int
    max_timestamp: int
    timestamp_type: int
    append_time_ms: int
    # When the cleaner first reached the batch (-1: not yet): its tombstones and
    # transaction markers may go delete.retention.ms later (Kafka's delete horizon).
    cleaned_at_ms: int = -1

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1

    @property
    def log_order(self) -> tuple[str, int, int]:
        """Its place among every log's batches: by log, then offset (``object_batches``)."""
        return self.topic_id, self.partition, self.base_offset

    @property
    def effective_timestamp(self) -> int:
        # LogAppendTime batches are stamped by the coordinator; client timestamps do not count.
        return self.append_time_ms if self.timestamp_type == LOG_APPEND_TIME else self.max_timestamp


@dataclass(frozen=True, slots=True)
class StateStats:
    logs: int
    batches: int
    objects: int
    live_bytes: int
    # Bytes of objects no live batch points to (rejected, duplicate, removed, moved away).
    dead_bytes: int
    # Objects no live batch points to any more: garbage, deleted from object storage once
    # the broker setting diskless_object_delete_delay_ms has passed.
    empty_objects: int = 0


class ControlPlane(Protocol):
    """One method per operation. State changes go to the writable coordinator and answer
    with the result of applying them; queries are answered from a materialised copy."""

    async def commit_file(self, request: CommitFile) -> Sequence[BatchResult]: ...

    async def delete_records(self, request: DeleteRecords) -> DeleteRecordsResult: ...

    async def enforce_retention(self, request: EnforceRetention) -> EnforceRetentionResult: ...

    async def expire_producers(self, request: ExpireProducers) -> ExpireProducersResult: ...

    async def delete_topic(self, request: DeleteTopic) -> None: ...

    async def objects_deleted(self, request: ObjectsDeleted) -> ObjectsDeletedResult: ...

    async def merge(self, request: Merge) -> MergeResult: ...

    async def compact(self, request: Compact) -> CompactResult: ...

    async def checkpoint_taken(self, request: CheckpointTaken) -> CheckpointTakenResult: ...

    async def seal_log(self, request: SealLog) -> SpanResult: ...

    async def open_log(self, request: OpenLog) -> SpanResult: ...

    async def catch_up(self, since: float) -> None:
        """Return once the queries below include every state change acknowledged before
        ``since`` (time.monotonic()), wherever it was submitted; raises
        storage.log.NotCaughtUp if that cannot be done in the implementation's time bound."""

    def log_info(self, topic_id: str, partition: int) -> LogInfo:
        """The log's offsets and size. The same object twice means no batch of this log
        changed in between (a cache of them forgets each log a change touches), so what
        was found under it still holds; an implementation may return a new one every
        time."""

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]:
        """Batches from the first ending at or after ``offset`` on (compaction may have
        dropped the one that held it); always one if any, else up to max_bytes."""

    def offset_for_timestamp(self, topic_id: str, partition: int,
                             timestamp_ms: int) -> BatchCoordinate | None:
        """The first batch whose (effective) max timestamp is at least ``timestamp_ms``."""

    def max_timestamp_batch(self, topic_id: str, partition: int) -> BatchCoordinate | None:
        """The batch holding the log's greatest timestamp (the first, on ties)."""

    def files_to_delete(self, now_ms: int, delay_ms: int) -> list[str]:
        """Objects without live batches since at least ``delay_ms``, by key."""

    def is_known_object(self, key: str) -> bool:
        """Committed, or deleted: either way not an orphan to collect."""

    def merge_candidates(self, max_object_size: int, limit: int,
                         skip_prefixes: tuple[str, ...] = (),
                         created_before_ms: int | None = None) -> list[str]:
        """The keys of up to ``limit`` live objects smaller than ``max_object_size`` that
        start with none of ``skip_prefixes`` (and were created at or before
        ``created_before_ms``, if given), oldest first."""

    def object_batches(self, key: str) -> list[BatchCoordinate]:
        """The live batches in object ``key``, by (topic id, partition, offset)."""

    def last_stable_offset(self, topic_id: str, partition: int) -> int:
        """The log's high watermark, or the first offset of its oldest open transaction if
        that is lower (a marker is readable once committed, as any batch)."""

    def aborted_transactions(self, topic_id: str, partition: int, start: int,
                             end: int) -> list[AbortedTransaction]:
        """The aborted transactions with records in [start, end), oldest marker first; kept
        while any of their offsets is at or above the log start."""

    def active_producers(self, topic_id: str, partition: int) -> list[ProducerEntry]:
        """The producers the log keeps state for, by producer id (DescribeProducers)."""

    def logs(self) -> list[tuple[str, int]]:
        """Every (topic id, partition) with state, sorted."""

    def stats(self) -> StateStats: ...


class RecordControlPlane(abc.ABC):
    """The ControlPlane state changes of an implementation that applies request records
    in order: it supplies ``submit`` (and the queries)."""

    @abc.abstractmethod
    async def submit(self, request: Request) -> Any:
        """Apply ``request`` (through whatever log orders them); its typed result."""

    async def commit_file(self, request: CommitFile) -> Sequence[BatchResult]:
        return (await self.submit(request)).batches

    async def delete_records(self, request: DeleteRecords) -> DeleteRecordsResult:
        return await self.submit(request)

    async def enforce_retention(self, request: EnforceRetention) -> EnforceRetentionResult:
        return await self.submit(request)

    async def expire_producers(self, request: ExpireProducers) -> ExpireProducersResult:
        return await self.submit(request)

    async def delete_topic(self, request: DeleteTopic) -> None:
        await self.submit(request)

    async def objects_deleted(self, request: ObjectsDeleted) -> ObjectsDeletedResult:
        return await self.submit(request)

    async def merge(self, request: Merge) -> MergeResult:
        return await self.submit(request)

    async def compact(self, request: Compact) -> CompactResult:
        return await self.submit(request)

    async def checkpoint_taken(self, request: CheckpointTaken) -> CheckpointTakenResult:
        return await self.submit(request)

    async def seal_log(self, request: SealLog) -> SpanResult:
        return await self.submit(request)

    async def open_log(self, request: OpenLog) -> SpanResult:
        return await self.submit(request)


# --- rules every implementation applies ----------------------------------------------------------


def refused_commit(request: CommitFile, *, object_deleted: bool,
                   object_exists: bool) -> CommitFileResult | None:
    """A commit of an object the GC already deleted, or of one committed before under
    another request id (unless each partition of it is committed on its own), stores
    nothing: every batch fails with a retriable error."""
    if object_deleted:
        message = GARBAGE_COLLECTED
    elif object_exists and not request.one_partition_of_object:
        message = ALREADY_COMMITTED
    else:
        return None
    return CommitFileResult(tuple(BatchResult.storage_error(message) for _ in request.batches))


def check_commit_batch(producers: ProducerState, batch: CommitBatch, info: LogInfo,
                       now_ms: int) -> BatchResult | AppendPlan:
    """The producer-state verdict (idempotence, transactions, markers) on a batch that would
    take offsets from the high watermark on: a result if it is rejected or a duplicate,
    else the plan to apply with ``apply_commit_plan``. A rejected batch (e.g. of a producer
    whose epoch a marker fenced) takes no offset: its bytes stay dead in its object."""
    append_time = now_ms if batch.log_append_time else None
    if info.sealed:
        return BatchResult(ErrorCode.not_leader_or_follower,
                           error_message="the partition is switching to another storage mode")
    try:
        plan = producers.check_append([batch], info.high_watermark, append_time, batch.marker)
    except ProducerStateError as e:
        return BatchResult.rejected(e)
    except InvalidSequence as e:  # a producer id without a sequence
        return BatchResult.invalid_record(str(e))
    if plan.duplicate is not None:
        return BatchResult.duplicate(plan.duplicate.first_offset, plan.duplicate.timestamp,
                                     batch.log_append_time, info.log_start_offset)
    return plan


def apply_commit_plan(producers: ProducerState, plan: AppendPlan, batch: CommitBatch,
                      info: LogInfo) -> None:
    """Apply the plan of ``batch``, committed at the high watermark of ``info``. Committed
    is readable here (the new high watermark is past the batch), so a marker's transaction
    never waits to be replicated, as it would on a classic leader."""
    producers.apply(plan)
    producers.forget_replicated(info.high_watermark + batch.record_count)


def new_log_start(request: DeleteRecords, info: LogInfo | None) -> DeleteRecordsResult:
    """The log start DeleteRecords sets (it never moves back), or why it fails; ``info`` is
    None for a log without state."""
    if info is None:
        return DeleteRecordsResult.unknown_topic_or_partition()
    offset = info.high_watermark if request.offset == -1 else request.offset
    if not 0 <= offset <= info.high_watermark:
        return DeleteRecordsResult.offset_out_of_range()
    return DeleteRecordsResult.done(max(info.log_start_offset, offset))


def retention_keep_from(oldest_first: Iterable[BatchCoordinate], info: LogInfo, now_ms: int,
                        limits: RetentionLimits) -> int:
    """The base offset of the first batch both limits keep (the high watermark: none);
    the oldest batches breaching either limit go."""
    size = info.size_bytes
    for batch in oldest_first:
        too_old = limits.retention_ms >= 0 and batch.effective_timestamp < now_ms - limits.retention_ms
        too_big = limits.retention_bytes >= 0 and size > limits.retention_bytes
        if not (too_old or too_big):
            return batch.base_offset
        size -= batch.byte_size
    return info.high_watermark


def batches_from(batches: Iterable[BatchCoordinate], offset: int,
                 max_bytes: int) -> list[BatchCoordinate]:
    """``find_batches`` over a log's batches from the last one starting at or before
    ``offset``, in offset order: that one is skipped if it ends before ``offset`` (the
    batches holding ``offset`` were all compacted away)."""
    found, total = [], 0
    for batch in batches:
        if batch.last_offset < offset:
            continue
        if found and total + batch.byte_size > max_bytes:
            break
        found.append(batch)
        total += batch.byte_size
    return found


COMPACTED_OBJECT_KNOWN = "the compacted object is already known (a replay, or collected)"
LOG_GONE = "the partition has no state (its topic was deleted)"


def compaction_refusal(request: Compact, info: LogInfo | None,
                       current: Callable[[int], BatchCoordinate | None], *,
                       object_known: bool) -> str | None:
    """Why ``request`` cannot be applied (None: it can): its log is gone, its object is
    known already, or a batch it rewrites is no longer where the cleaner read it (removed
    by retention or DeleteRecords, moved by a merge). ``current`` gives the log's live
    batch at a base offset."""
    if info is None:
        return LOG_GONE
    if request.object_key and object_known:
        return COMPACTED_OBJECT_KNOWN
    if request.cleaned_offset > info.high_watermark:
        return f"cleaned offset {request.cleaned_offset} is past the log end"
    for rewrite in request.batches:
        batch = current(rewrite.base_offset)
        if batch is None or (batch.object_key, batch.byte_offset, batch.byte_size) != (
                rewrite.old_object_key, rewrite.old_byte_offset, rewrite.old_byte_size):
            return f"the batch at offset {rewrite.base_offset} changed since it was read"
    return None


def compaction_result(request: Compact) -> CompactResult:
    """The result of applying ``request`` (not refused)."""
    dropped = sum(rewrite.dropped for rewrite in request.batches)
    return CompactResult(len(request.batches) - dropped, dropped,
                         sum(rewrite.old_byte_size for rewrite in request.batches),
                         sum(rewrite.byte_size for rewrite in request.batches))


def kept_checkpoints(checkpoints: Iterable[tuple[int, str]],
                     keep: int) -> tuple[list[tuple[int, str]], CheckpointTakenResult]:
    """Of the (offset, object key) checkpoints recorded, the ``keep`` newest, and the
    result of recording the newest of them."""
    kept = sorted(dict(checkpoints).items())[-keep:]
    return kept, CheckpointTakenResult(kept[0][0] + 1 if len(kept) == keep else -1)
