"""A control plane in plain dicts, for tests of the diskless engine (Inkless's
InMemoryControlPlane): no log, no database, no I/O. It applies every request at once, with
the same rules as the SQLite state machine every broker runs, and refuses the requests the
coordinator's log would refuse as too large; the contract suite
(tests/storage/diskless/test_control_plane_contract.py) holds both to the same answers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from storage.producer_state import AbortedTransaction, ProducerEntry, ProducerState

from .control_plane import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    REQUEST_DEDUP_WINDOW_MS,
    BatchCoordinate,
    BatchResult,
    CheckpointTaken,
    CheckpointTakenResult,
    CommitBatch,
    CommitFile,
    CommitFileResult,
    Compact,
    CompactResult,
    DeleteRecords,
    DeleteRecordsResult,
    DeleteTopic,
    DeleteTopicResult,
    EnforceRetention,
    EnforceRetentionResult,
    ExpireProducers,
    ExpireProducersResult,
    LogInfo,
    Merge,
    MergeResult,
    ObjectsDeleted,
    ObjectsDeletedResult,
    OpenLog,
    RecordControlPlane,
    Request,
    SealLog,
    SpanResult,
    StateStats,
    apply_commit_plan,
    batches_from,
    carried_producers,
    check_commit_batch,
    check_request_size,
    compaction_refusal,
    compaction_result,
    kept_checkpoints,
    new_log_start,
    opened_span,
    refused_commit,
    retention_keep_from,
    sealed_span,
)


@dataclass
class _Log:
    log_start_offset: int = 0
    high_watermark: int = 0
    size_bytes: int = 0
    cleaned_offset: int = 0
    tombstone_horizon_ms: int = -1
    sealed: bool = False
    batches: list[BatchCoordinate] = field(default_factory=list)  # by base offset
    producers: ProducerState = field(default_factory=ProducerState)

    def info(self) -> LogInfo:
        return LogInfo(self.log_start_offset, self.high_watermark, self.size_bytes,
                       self.cleaned_offset, self.tombstone_horizon_ms, self.sealed)

    def move_start(self, log_start_offset: int) -> None:
        self.log_start_offset = log_start_offset
        self.producers.trim(log_start_offset)  # aborted transactions go with their offsets


@dataclass
class _Object:
    size: int
    created_ms: int
    live_bytes: int = 0
    emptied_at_ms: int | None = None


class InMemoryControlPlane(RecordControlPlane):
    def __init__(self) -> None:
        self._logs: dict[tuple[str, int], _Log] = {}
        self._objects: dict[str, _Object] = {}
        self._deleted_objects: set[str] = set()
        self._deleted_topics: set[str] = set()
        # request id -> (its now_ms, the answer), oldest first
        self._requests: dict[str, tuple[int, CommitFileResult]] = {}
        self._checkpoints: list[tuple[int, str]] = []  # (offset, object key), kept ones

    async def submit(self, request: Request) -> Any:
        # As the coordinator's log would, so that engine tests find requests grown too large.
        check_request_size(request)
        return self.apply(request)

    def apply(self, request: Request) -> Any:
        return self._HANDLERS[type(request)](self, request)

    async def catch_up(self, since: float) -> None:
        pass  # one copy, changed in place: always current

    # -- commit_file -----------------------------------------------------------------------

    def _commit_file(self, request: CommitFile) -> CommitFileResult:
        stored = self._requests.get(request.request_id)
        if stored is not None:
            return stored[1]
        result = self._commit_batches(request)
        horizon = request.now_ms - REQUEST_DEDUP_WINDOW_MS
        # The oldest first, without copying the rest: a copy per commit made a test's
        # tens of thousands of commits quadratic.
        while self._requests:
            request_id, (committed_ms, _) = next(iter(self._requests.items()))
            if committed_ms >= horizon:
                break  # the rest came later (brokers' clocks: the hour covers their skew)
            del self._requests[request_id]
        self._requests[request.request_id] = (request.now_ms, result)
        return result

    def _commit_batches(self, request: CommitFile) -> CommitFileResult:
        key = request.object_key
        refused = refused_commit(request, object_deleted=key in self._deleted_objects,
                                 object_exists=key in self._objects)
        if refused is not None:
            return refused
        # Registered by the first of the object's commits (one, unless per partition).
        obj = self._objects.setdefault(key, _Object(request.object_size, request.now_ms))
        results = tuple(self._commit_batch(key, request.now_ms, batch) for batch in request.batches)
        if obj.live_bytes:  # a later partition's batches make live an object left empty
            obj.emptied_at_ms = None
        self._mark_emptied([key], request.now_ms)
        return CommitFileResult(results)

    def _commit_batch(self, key: str, now_ms: int, batch: CommitBatch) -> BatchResult:
        if batch.topic_id in self._deleted_topics:
            return BatchResult.unknown_topic_or_partition()
        log = self._logs.setdefault((batch.topic_id, batch.partition), _Log())
        verdict = check_commit_batch(log.producers, batch, log.info(), now_ms)
        if isinstance(verdict, BatchResult):
            return verdict
        apply_commit_plan(log.producers, verdict, batch, log.info())
        base_offset = log.high_watermark
        log.batches.append(BatchCoordinate(
            batch.topic_id, batch.partition, base_offset, base_offset + batch.record_count - 1,
            key, batch.byte_offset, batch.byte_size, batch.max_timestamp,
            LOG_APPEND_TIME if batch.log_append_time else CREATE_TIME,
            now_ms if batch.log_append_time else NO_TIMESTAMP))
        log.high_watermark += batch.record_count
        log.size_bytes += batch.byte_size
        self._objects[key].live_bytes += batch.byte_size
        return BatchResult.stored(base_offset, now_ms if batch.log_append_time else None,
                                  log.log_start_offset)

    # -- removing batches --------------------------------------------------------------------

    def _delete_records(self, request: DeleteRecords) -> DeleteRecordsResult:
        log = self._logs.get((request.topic_id, request.partition))
        result = new_log_start(request, None if log is None else log.info())
        if log is not None and result.low_watermark >= 0:
            # A batch straddling the new start stays: reads begin inside it, as in Kafka.
            self._remove_batches(log, lambda b: b.last_offset < result.low_watermark,
                                 request.now_ms)
            log.move_start(result.low_watermark)
        return result

    def _enforce_retention(self, request: EnforceRetention) -> EnforceRetentionResult:
        removed_batches = removed_bytes = 0
        for limits in request.topics:
            for log in self._topic_logs(limits.topic_id):
                keep_from = retention_keep_from(list(log.batches), log.info(), request.now_ms,
                                                limits)
                batches, size = self._remove_batches(
                    log, lambda b, keep_from=keep_from: b.base_offset < keep_from, request.now_ms)
                log.move_start(max(log.log_start_offset, keep_from))
                removed_batches += batches
                removed_bytes += size
        return EnforceRetentionResult(removed_batches, removed_bytes)

    def _delete_topic(self, request: DeleteTopic) -> DeleteTopicResult:
        emptied = set()
        for key in [key for key in self._logs if key[0] == request.topic_id]:
            emptied |= self._take_batches(self._logs.pop(key), lambda b: True)
        self._mark_emptied(sorted(emptied), request.now_ms)
        self._deleted_topics.add(request.topic_id)
        return DeleteTopicResult()

    def _remove_batches(self, log: _Log, remove, now_ms: int) -> tuple[int, int]:
        """Delete ``log``'s batches matching ``remove``: (batches, bytes) removed."""
        count, size = len(log.batches), log.size_bytes
        self._mark_emptied(sorted(self._take_batches(log, remove)), now_ms)
        return count - len(log.batches), size - log.size_bytes

    def _take_batches(self, log: _Log, remove) -> set[str]:
        """Drop the matching batches, taking their bytes off the log and their objects;
        the keys of those objects."""
        keys = set()
        kept = []
        for batch in log.batches:
            if not remove(batch):
                kept.append(batch)
                continue
            log.size_bytes -= batch.byte_size
            obj = self._objects.get(batch.object_key)
            if obj is not None:
                obj.live_bytes -= batch.byte_size
            keys.add(batch.object_key)
        log.batches = kept
        return keys

    def _mark_emptied(self, keys: list[str], now_ms: int) -> None:
        # The GC delay counts from the moment the last live batch left the object.
        for key in keys:
            obj = self._objects.get(key)
            if obj is not None and obj.live_bytes == 0 and obj.emptied_at_ms is None:
                obj.emptied_at_ms = now_ms

    # -- objects -------------------------------------------------------------------------------

    def _objects_deleted(self, request: ObjectsDeleted) -> ObjectsDeletedResult:
        deleted, refused = [], []
        for key in request.keys:
            obj = self._objects.get(key)
            if obj is not None and obj.live_bytes > 0:
                refused.append(key)  # a live batch still points here: the GC raced a commit
                continue
            self._objects.pop(key, None)
            self._deleted_objects.add(key)
            deleted.append(key)
        return ObjectsDeletedResult(tuple(deleted), tuple(refused))

    def _merge(self, request: Merge) -> MergeResult:
        key = request.object_key
        if self.is_known_object(key):
            # Deleted (e.g. as an orphan before this commit) or already in use: moving
            # batches there could lose them.
            return MergeResult(0, len(request.moves))
        merged = self._objects[key] = _Object(request.object_size, request.now_ms)
        moved, old_keys = 0, set()
        for move in request.moves:
            log = self._logs.get((move.topic_id, move.partition))
            for i, batch in enumerate(log.batches if log is not None else ()):
                # Skipped unless the batch is still the one that was copied, where it was
                # copied from: it may since have been removed, or moved by another merge.
                if (batch.base_offset, batch.object_key, batch.byte_size) == (
                        move.base_offset, move.old_object_key, move.byte_size):
                    log.batches[i] = replace(batch, object_key=key, byte_offset=move.byte_offset)
                    old = self._objects.get(move.old_object_key)
                    if old is not None:
                        old.live_bytes -= move.byte_size
                    merged.live_bytes += move.byte_size
                    old_keys.add(move.old_object_key)
                    moved += 1
                    break
        self._mark_emptied(sorted(old_keys | {key}), request.now_ms)
        return MergeResult(moved, len(request.moves) - moved)

    def _compact(self, request: Compact) -> CompactResult:
        key, now_ms = request.object_key, request.now_ms
        log = self._logs.get((request.topic_id, request.partition))
        by_offset = {b.base_offset: i for i, b in enumerate(log.batches)} if log else {}
        object_known = bool(key) and self.is_known_object(key)
        refusal = compaction_refusal(
            request, None if log is None else log.info(),
            lambda base_offset: (log.batches[by_offset[base_offset]]
                                 if base_offset in by_offset else None),
            object_known=object_known)
        if key and not object_known:
            # Registered even when refused: with no live batch, the GC collects it.
            self._objects[key] = _Object(request.object_size, now_ms)
        if refusal is not None:
            self._mark_emptied([key] if key and not object_known else [], now_ms)
            return CompactResult(refused=refusal)
        rewrites = {rewrite.base_offset: rewrite for rewrite in request.batches}
        kept = []
        for batch in log.batches:
            rewrite = rewrites.get(batch.base_offset)
            if rewrite is not None:
                self._objects[rewrite.old_object_key].live_bytes -= rewrite.old_byte_size
                log.size_bytes -= rewrite.old_byte_size - rewrite.byte_size
                if rewrite.dropped:
                    continue
                self._objects[key].live_bytes += rewrite.byte_size
                batch = replace(batch, object_key=key, byte_offset=rewrite.byte_offset,
                                byte_size=rewrite.byte_size)
            if batch.last_offset < request.cleaned_offset and batch.cleaned_at_ms < 0:
                batch = replace(batch, cleaned_at_ms=now_ms)
            kept.append(batch)
        log.batches = kept
        log.cleaned_offset = max(log.cleaned_offset, request.cleaned_offset)
        log.tombstone_horizon_ms = request.tombstone_horizon_ms
        self._mark_emptied(sorted({r.old_object_key for r in request.batches}
                                  | ({key} if key else set())), now_ms)
        return compaction_result(request)

    def _expire_producers(self, request: ExpireProducers) -> ExpireProducersResult:
        return ExpireProducersResult(sum(
            log.producers.remove_expired(request.now_ms, request.expiration_ms)
            for log in self._logs.values()))

    def _checkpoint_taken(self, request: CheckpointTaken) -> CheckpointTakenResult:
        self._checkpoints, result = kept_checkpoints(
            [*self._checkpoints, (request.offset, request.object_key)], request.keep)
        return result

    def _seal_log(self, request: SealLog) -> SpanResult:
        log = self._logs.get((request.topic_id, request.partition))
        if log is not None:
            log.sealed = True
        return sealed_span(None if log is None else log.info(),
                           ProducerState() if log is None else log.producers)

    def _open_log(self, request: OpenLog) -> SpanResult:
        key = (request.topic_id, request.partition)
        log = self._logs.get(key)
        unchanged = opened_span(request, None if log is None else log.info())
        if unchanged is not None:
            return unchanged
        if log is None:
            log = self._logs[key] = _Log(request.offset, request.offset)
        log.high_watermark, log.sealed = request.offset, False
        log.producers = carried_producers(request)
        return SpanResult(ErrorCode.none, request.offset)

    _HANDLERS = {
        SealLog: _seal_log,
        OpenLog: _open_log,
        CommitFile: _commit_file,
        DeleteRecords: _delete_records,
        EnforceRetention: _enforce_retention,
        ExpireProducers: _expire_producers,
        DeleteTopic: _delete_topic,
        ObjectsDeleted: _objects_deleted,
        Merge: _merge,
        Compact: _compact,
        CheckpointTaken: _checkpoint_taken,
    }

    # -- queries -------------------------------------------------------------------------------

    def log_info(self, topic_id: str, partition: int) -> LogInfo:
        log = self._logs.get((topic_id, partition))
        return LogInfo(0, 0, 0) if log is None else log.info()

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]:
        log = self._logs.get((topic_id, partition))
        if log is None or not log.log_start_offset <= offset < log.high_watermark:
            return []
        holding = [i for i, batch in enumerate(log.batches) if batch.base_offset <= offset]
        return batches_from(log.batches[holding[-1] if holding else 0:], offset, max_bytes)

    def offset_for_timestamp(self, topic_id: str, partition: int,
                             timestamp_ms: int) -> BatchCoordinate | None:
        return next((batch for batch in self._batches(topic_id, partition)
                     if batch.effective_timestamp >= timestamp_ms), None)

    def max_timestamp_batch(self, topic_id: str, partition: int) -> BatchCoordinate | None:
        # max() keeps the first of equal maxima: the earliest batch wins ties.
        return max(self._batches(topic_id, partition), key=lambda b: b.effective_timestamp,
                   default=None)

    def files_to_delete(self, now_ms: int, delay_ms: int) -> list[str]:
        return sorted(key for key, obj in self._objects.items() if obj.live_bytes == 0
                      and obj.emptied_at_ms is not None and obj.emptied_at_ms <= now_ms - delay_ms)

    def is_known_object(self, key: str) -> bool:
        return key in self._objects or key in self._deleted_objects

    def merge_candidates(self, max_object_size: int, limit: int,
                         skip_prefixes: tuple[str, ...] = (),
                         created_before_ms: int | None = None) -> list[str]:
        return sorted((key for key, obj in self._objects.items()
                       if obj.size < max_object_size and obj.live_bytes > 0
                       and not key.startswith(skip_prefixes)
                       and (created_before_ms is None or obj.created_ms <= created_before_ms)),
                      key=lambda key: (self._objects[key].created_ms, key))[:limit]

    def object_batches(self, key: str) -> list[BatchCoordinate]:
        return sorted((batch for log in self._logs.values() for batch in log.batches
                       if batch.object_key == key),
                      key=lambda b: b.log_order)

    def last_stable_offset(self, topic_id: str, partition: int) -> int:
        log = self._logs.get((topic_id, partition))
        return 0 if log is None else log.producers.last_stable_offset(log.high_watermark)

    def aborted_transactions(self, topic_id: str, partition: int, start: int,
                             end: int) -> list[AbortedTransaction]:
        log = self._logs.get((topic_id, partition))
        return [] if log is None else log.producers.aborted_between(start, end)

    def active_producers(self, topic_id: str, partition: int) -> list[ProducerEntry]:
        log = self._logs.get((topic_id, partition))
        return [] if log is None else sorted(log.producers.producers.values(),
                                             key=lambda entry: entry.producer_id)

    def logs(self) -> list[tuple[str, int]]:
        return sorted(self._logs)

    def stats(self) -> StateStats:
        live = sum(obj.live_bytes for obj in self._objects.values())
        return StateStats(len(self._logs), sum(len(log.batches) for log in self._logs.values()),
                          len(self._objects), live,
                          sum(obj.size for obj in self._objects.values()) - live,
                          sum(obj.live_bytes == 0 for obj in self._objects.values()))

    def _batches(self, topic_id: str, partition: int) -> list[BatchCoordinate]:
        log = self._logs.get((topic_id, partition))
        return [] if log is None else log.batches

    def _topic_logs(self, topic_id: str) -> list[_Log]:
        return [self._logs[key] for key in sorted(self._logs) if key[0] == topic_id]
