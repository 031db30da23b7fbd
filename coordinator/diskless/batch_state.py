"""Materialised state of the diskless batch coordinator (KIP-1164), in SQLite.

The coordinator's log is a replicated topic of request records
(storage/diskless/control_plane.py); every broker applies the same records in log order
through ``BatchCoordinatorState.apply``. Applying must therefore be deterministic: it reads
only the record (which carries ``now_ms`` where time matters) and the database, never the
clock, and every query orders its rows explicitly.

Offsets are assigned here: a committed batch takes the log's high watermark as its base
offset. Rejected batches take no offset; their bytes stay in the object as dead bytes.

The database is one file, so a checkpoint of the state is a copy of it (``copy_state``,
coordinator/diskless/checkpoints.py): the ``applied`` row in the copy is the log offset it
reflects.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sqlite3
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storage.diskless.control_plane import (
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
    RecordControlPlane,
    Request,
    OpenLog,
    RetentionLimits,
    SealLog,
    SpanResult,
    StateStats,
    apply_commit_plan,
    batches_from,
    carried_producers,
    check_commit_batch,
    compaction_refusal,
    compaction_result,
    kept_checkpoints,
    new_log_start,
    opened_span,
    refused_commit,
    retention_keep_from,
    sealed_span,
)
from kio.schema.errors import ErrorCode

from storage.producer_state import AbortedTransaction, ProducerEntry, ProducerState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (id INTEGER PRIMARY KEY CHECK (id = 0), offset INTEGER);
CREATE TABLE IF NOT EXISTS logs (
    topic_id TEXT, partition INTEGER, log_start_offset INTEGER, high_watermark INTEGER,
    size_bytes INTEGER, cleaned_offset INTEGER DEFAULT 0,
    tombstone_horizon_ms INTEGER DEFAULT -1,
    PRIMARY KEY (topic_id, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    topic_id TEXT, partition INTEGER, base_offset INTEGER, last_offset INTEGER,
    object_key TEXT, byte_offset INTEGER, byte_size INTEGER, max_timestamp INTEGER,
    timestamp_type INTEGER, append_time_ms INTEGER, cleaned_at_ms INTEGER DEFAULT -1,
    PRIMARY KEY (topic_id, partition, base_offset)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS batches_by_object ON batches (object_key);
CREATE TABLE IF NOT EXISTS objects (
    key TEXT PRIMARY KEY, size INTEGER, live_bytes INTEGER, created_ms INTEGER,
    emptied_at_ms INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deleted_objects (key TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deleted_topics (topic_id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS producer_state (
    topic_id TEXT, partition INTEGER, snapshot BLOB,
    PRIMARY KEY (topic_id, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS requests (request_id TEXT PRIMARY KEY, result TEXT,
    committed_ms INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (offset INTEGER PRIMARY KEY, object_key TEXT);
"""
# Columns added since the first schema, with their defaults: added to older databases.
_ADDED_COLUMNS = (("logs", "cleaned_offset", 0), ("batches", "cleaned_at_ms", -1),
                  ("logs", "tombstone_horizon_ms", -1), ("logs", "sealed", 0),
                  ("requests", "committed_ms", 0))
# Indexes on added columns: made once the columns exist.
_ADDED_INDEXES = "CREATE INDEX IF NOT EXISTS requests_by_time ON requests (committed_ms);"
_TABLES = ("applied", "logs", "batches", "objects", "deleted_objects", "deleted_topics",
           "producer_state", "requests", "checkpoints")

_BATCH_COLUMNS = ("topic_id, partition, base_offset, last_offset, object_key, byte_offset, "
                  "byte_size, max_timestamp, timestamp_type, append_time_ms, cleaned_at_ms")
# LogAppendTime batches are stamped by the coordinator; their client timestamps do not count.
_EFFECTIVE_TIMESTAMP = "CASE timestamp_type WHEN 1 THEN append_time_ms ELSE max_timestamp END"
_NO_BOUND = (1 << 63) - 1  # SQLite's largest integer
log = logging.getLogger(__name__)


class BatchCoordinatorState(RecordControlPlane):
    """The state machine. Driven directly (``submit`` applies at the next offset) it is a
    ControlPlane without a replicated log, as the contract tests use it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Decoded producer state per (topic_id, partition); only valid while it matches the
        # database, so it is dropped whenever a transaction rolls back.
        self._producer_states: dict[tuple[str, int], ProducerState] = {}
        # Each partition's LogInfo as last read, until the next change of any: a consumer's
        # fetch of thousands of idle diskless partitions asks for it several times each.
        self._log_infos: dict[tuple[str, int], LogInfo] = {}
        try:
            self._open()
        except sqlite3.DatabaseError as e:
            # Not a database (a torn or overwritten file): set it aside and start empty; the
            # coordinator then rebuilds the state from a checkpoint and the log.
            log.error("%s is unreadable (%s): moved to %s.corrupt, starting empty", path, e,
                      path.name)
            os.replace(path, path.with_name(path.name + ".corrupt"))
            _remove_journal(path)
            self._open()

    def _open(self) -> None:
        # Autocommit mode: every apply opens its own transaction explicitly.
        self._db = sqlite3.connect(self.path, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            for table, column, default in _ADDED_COLUMNS:
                if column not in {row[1] for row in
                                  self._db.execute(f"PRAGMA table_info({table})")}:
                    self._db.execute(
                        f"ALTER TABLE {table} ADD COLUMN {column} INTEGER DEFAULT {default}")
            self._db.executescript(_ADDED_INDEXES)
            row = self._db.execute("SELECT offset FROM applied").fetchone()
        except sqlite3.DatabaseError:
            self._db.close()
            raise
        self._applied_offset = -1 if row is None else row[0]
        self._producer_states.clear()
        self._log_infos.clear()

    def replace_with(self, checkpoint: Path) -> None:
        """Take the state in the database file ``checkpoint`` (checked by
        checkpoints.checkpoint_offset) in place of this one. The file is renamed over the
        database, so a crash leaves one whole state or the other."""
        self._db.close()
        _remove_journal(self.path)  # closing folded the WAL into the old file
        os.replace(checkpoint, self.path)
        self._open()

    @property
    def applied_offset(self) -> int:
        return self._applied_offset

    def close(self) -> None:
        self._db.close()

    def reset(self) -> None:
        with self._transaction():
            for table in _TABLES:
                self._db.execute(f"DELETE FROM {table}")
        self._producer_states.clear()
        self._applied_offset = -1

    async def submit(self, request: Request) -> Any:
        return self.apply(self._applied_offset + 1, request)

    def apply(self, offset: int, request: Request) -> Any:
        """Apply the record at ``offset`` of the log; its typed result. Raises (and changes
        nothing) if the record cannot be applied."""
        if offset <= self._applied_offset:
            raise ValueError(f"record at offset {offset} is at or before the applied offset "
                             f"{self._applied_offset}")
        with self._transaction(_logs_changed(request)):
            result = self._HANDLERS[type(request)](self, request)
            self._db.execute("INSERT OR REPLACE INTO applied VALUES (0, ?)", (offset,))
        self._applied_offset = offset
        return result

    def skip(self, offset: int) -> None:
        """Count a record that cannot be applied (``apply`` raised) as applied, changing
        nothing else: every broker fails on it the same way, so all stay consistent."""
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO applied VALUES (0, ?)", (offset,))
        self._applied_offset = offset

    @contextmanager
    def _transaction(self, changing: Collection[tuple[str, int]] | None = None
                     ) -> Iterator[None]:
        """One transaction, which may change the logs ``changing`` (None: any log)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            # Cached producer state may hold changes the database no longer has.
            self._producer_states.clear()
            raise
        finally:
            # Read before the change. Only the logs changed: a consumer's Fetch of thousands
            # of partitions reads each one's LogInfo, and a commit or merge every 100 ms
            # that cleared them all made each Fetch read thousands of rows again.
            if changing is None:
                self._log_infos.clear()
            else:
                for log in changing:
                    self._log_infos.pop(log, None)

    # -- commit_file -----------------------------------------------------------------------

    def _commit_file(self, request: CommitFile) -> CommitFileResult:
        stored = self._db.execute(
            "SELECT result FROM requests WHERE request_id = ?", (request.request_id,)).fetchone()
        if stored is not None:
            return CommitFileResult.from_wire(json.loads(stored[0]))
        result = self._commit_batches(request)
        self._db.execute("DELETE FROM requests WHERE committed_ms < ?",
                         (request.now_ms - REQUEST_DEDUP_WINDOW_MS,))
        self._db.execute("INSERT INTO requests VALUES (?, ?, ?)",
                         (request.request_id, json.dumps(result.to_wire()), request.now_ms))
        return result

    def _commit_batches(self, request: CommitFile) -> CommitFileResult:
        """Each batch is checked and given its offsets in memory, then the commit's rows are
        written with one statement per table: a WAL object holds up to 2,352 batches (one
        per partition at 10,000 partitions), and every broker applies its commit on the
        event loop. At 7-8 statements per batch that took 55-59 ms, now 41-42 (in-process,
        2,352 batches of existing logs)."""
        key, now_ms = request.object_key, request.now_ms
        refused = refused_commit(request, object_deleted=self._is_deleted_object(key),
                                 object_exists=self._object_exists(key))
        if refused is not None:
            return refused
        # Registered by the first of the object's commits (one, unless per partition).
        self._db.execute("INSERT OR IGNORE INTO objects VALUES (?, ?, 0, ?, NULL)",
                         (key, request.object_size, now_ms))
        commit = _Commit(key, now_ms)
        results = tuple(self._commit_batch(commit, batch) for batch in request.batches)
        self._db.executemany(
            f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, -1)",
            commit.batch_rows)
        touched = sorted(commit.touched)
        self._db.executemany(
            "UPDATE logs SET high_watermark = ?, size_bytes = ? WHERE topic_id = ? AND partition = ?",
            [(commit.logs[log].high_watermark, commit.logs[log].size_bytes, *log)
             for log in touched])
        self._db.executemany(
            "INSERT OR REPLACE INTO producer_state VALUES (?, ?, ?)",
            [(*log, self._producer_state(*log).snapshot()) for log in touched])
        if commit.live_bytes:
            self._db.execute("UPDATE objects SET live_bytes = live_bytes + ? WHERE key = ?",
                             (commit.live_bytes, key))
        # A later partition's batches make live an object an earlier one left empty.
        self._db.execute("UPDATE objects SET emptied_at_ms = NULL WHERE key = ? AND live_bytes > 0",
                         (key,))
        self._mark_emptied([key], now_ms)
        return CommitFileResult(results)

    def _commit_batch(self, commit: _Commit, batch: CommitBatch) -> BatchResult:
        topic_id, log_key = batch.topic_id, (batch.topic_id, batch.partition)
        deleted = commit.deleted_topics.get(topic_id)
        if deleted is None:
            deleted = commit.deleted_topics[topic_id] = self._is_deleted_topic(topic_id)
        if deleted:
            return BatchResult.unknown_topic_or_partition()
        info = commit.logs.get(log_key)
        if info is None:
            info = self._read_log_info(*log_key)
            if info is None:
                self._db.execute("INSERT INTO logs (topic_id, partition, log_start_offset, "
                                 "high_watermark, size_bytes) VALUES (?, ?, 0, 0, 0)", log_key)
                info = LogInfo(0, 0, 0)
            commit.logs[log_key] = info
        producers = self._producer_state(*log_key)
        now_ms = commit.now_ms
        verdict = check_commit_batch(producers, batch, info, now_ms)
        if isinstance(verdict, BatchResult):
            return verdict
        apply_commit_plan(producers, verdict, batch, info)
        commit.touched.add(log_key)
        base_offset, size = info.high_watermark, batch.byte_size
        commit.batch_rows.append(
            (*log_key, base_offset, base_offset + batch.record_count - 1, commit.object_key,
             batch.byte_offset, size, batch.max_timestamp,
             LOG_APPEND_TIME if batch.log_append_time else CREATE_TIME,
             now_ms if batch.log_append_time else NO_TIMESTAMP))
        # Not dataclasses.replace, which looks the fields up on every call (2,352 batches:
        # 44 -> 41 ms).
        commit.logs[log_key] = LogInfo(
            info.log_start_offset, info.high_watermark + batch.record_count,
            info.size_bytes + size, info.cleaned_offset, info.tombstone_horizon_ms, info.sealed)
        commit.live_bytes += size
        return BatchResult.stored(base_offset, now_ms if batch.log_append_time else None,
                                  info.log_start_offset)

    def _producer_state(self, topic_id: str, partition: int) -> ProducerState:
        """The log's producer state, decoded from its snapshot once and then kept (queries
        as well as commits use it)."""
        state = self._producer_states.get((topic_id, partition))
        if state is None:
            row = self._db.execute(
                "SELECT snapshot FROM producer_state WHERE topic_id = ? AND partition = ?",
                (topic_id, partition)).fetchone()
            state = ProducerState() if row is None else ProducerState.restore(row[0])
            self._producer_states[(topic_id, partition)] = state
        return state

    def _save_producer_state(self, topic_id: str, partition: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO producer_state VALUES (?, ?, ?)",
                         (topic_id, partition, self._producer_state(topic_id, partition).snapshot()))

    # -- removing batches --------------------------------------------------------------------

    def _delete_records(self, request: DeleteRecords) -> DeleteRecordsResult:
        topic_id, partition = request.topic_id, request.partition
        exists = self._log_exists(topic_id, partition)
        result = new_log_start(request, self.log_info(topic_id, partition) if exists else None)
        if result.low_watermark >= 0:
            # A batch straddling the new start stays: reads begin inside it, as in Kafka.
            self._remove_batches("topic_id = ? AND partition = ? AND last_offset < ?",
                                 (topic_id, partition, result.low_watermark), request.now_ms)
            self._set_log_start(topic_id, partition, result.low_watermark)
        return result

    def _enforce_retention(self, request: EnforceRetention) -> EnforceRetentionResult:
        removed_batches = removed_bytes = 0
        for limits in request.topics:
            for partition in self._partitions(limits.topic_id):
                batches, size = self._enforce_log_retention(partition, request.now_ms, limits)
                removed_batches += batches
                removed_bytes += size
        return EnforceRetentionResult(removed_batches, removed_bytes)

    def _enforce_log_retention(self, partition: int, now_ms: int,
                               limits: RetentionLimits) -> tuple[int, int]:
        """Remove the oldest batches breaching either limit: (batches, bytes) removed."""
        topic_id = limits.topic_id
        info = self.log_info(topic_id, partition)
        where = "topic_id = ? AND partition = ?"
        oldest_first = self._db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE {where} ORDER BY base_offset",
            (topic_id, partition))
        keep_from = retention_keep_from((BatchCoordinate(*row) for row in oldest_first), info,
                                        now_ms, limits)
        oldest_first.close()
        removed = self._remove_batches(f"{where} AND base_offset < ?",
                                       (topic_id, partition, keep_from), now_ms)
        self._set_log_start(topic_id, partition, max(info.log_start_offset, keep_from))
        return removed

    def _delete_topic(self, request: DeleteTopic) -> DeleteTopicResult:
        topic_id = request.topic_id
        self._remove_batches("topic_id = ?", (topic_id,), request.now_ms)
        self._db.execute("DELETE FROM logs WHERE topic_id = ?", (topic_id,))
        self._db.execute("DELETE FROM producer_state WHERE topic_id = ?", (topic_id,))
        for log in [log for log in self._producer_states if log[0] == topic_id]:
            del self._producer_states[log]
        self._db.execute("INSERT OR IGNORE INTO deleted_topics VALUES (?)", (topic_id,))
        return DeleteTopicResult()

    def _remove_batches(self, where: str, params: tuple, now_ms: int) -> tuple[int, int]:
        """Delete the batches matching ``where``, taking their bytes off logs and objects."""
        removed = self._db.execute(
            f"SELECT object_key, topic_id, partition, COUNT(*), SUM(byte_size) FROM batches "
            f"WHERE {where} GROUP BY object_key, topic_id, partition "
            f"ORDER BY object_key, topic_id, partition", params).fetchall()
        for key, topic_id, partition, _, size in removed:
            self._db.execute("UPDATE objects SET live_bytes = live_bytes - ? WHERE key = ?",
                             (size, key))
            self._db.execute("UPDATE logs SET size_bytes = size_bytes - ? "
                             "WHERE topic_id = ? AND partition = ?", (size, topic_id, partition))
        self._db.execute(f"DELETE FROM batches WHERE {where}", params)
        self._mark_emptied(sorted({key for key, *_ in removed}), now_ms)
        return sum(row[3] for row in removed), sum(row[4] for row in removed)

    def _mark_emptied(self, keys: Iterable[str], now_ms: int) -> None:
        # The GC delay counts from the moment the last live batch left the object.
        for key in keys:
            self._db.execute("UPDATE objects SET emptied_at_ms = ? "
                             "WHERE key = ? AND live_bytes = 0 AND emptied_at_ms IS NULL",
                             (now_ms, key))

    def _set_log_start(self, topic_id: str, partition: int, log_start: int) -> None:
        self._db.execute("UPDATE logs SET log_start_offset = ? "
                         "WHERE topic_id = ? AND partition = ?",
                         (log_start, topic_id, partition))
        # Aborted transactions go with their offsets.
        producers = self._producer_state(topic_id, partition)
        aborted = len(producers.aborted)
        producers.trim(log_start)
        if len(producers.aborted) != aborted:
            self._save_producer_state(topic_id, partition)

    # -- objects -------------------------------------------------------------------------------

    def _objects_deleted(self, request: ObjectsDeleted) -> ObjectsDeletedResult:
        deleted, refused = [], []
        for key in request.keys:
            row = self._db.execute(
                "SELECT live_bytes FROM objects WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > 0:
                refused.append(key)  # a live batch still points here: the GC raced a commit
                continue
            self._db.execute("DELETE FROM objects WHERE key = ?", (key,))
            self._db.execute("INSERT OR IGNORE INTO deleted_objects VALUES (?)", (key,))
            deleted.append(key)
        return ObjectsDeletedResult(tuple(deleted), tuple(refused))

    def _merge(self, request: Merge) -> MergeResult:
        key, now_ms = request.object_key, request.now_ms
        if self.is_known_object(key):
            # Deleted (e.g. as an orphan before this commit) or already in use: moving
            # batches there could lose them.
            return MergeResult(0, len(request.moves))
        self._db.execute("INSERT INTO objects VALUES (?, ?, 0, ?, NULL)",
                         (key, request.object_size, now_ms))
        moved = 0
        # Live bytes leaving each old object, summed and written once per object: every
        # broker applies the record, and three statements a move took 355 ms for 5,000
        # moves (184 ms so).
        leaving: dict[str, int] = {}
        for move in request.moves:
            # Skipped unless the batch is still the one that was copied, where it was copied
            # from: it may since have been removed, or moved by another merge.
            repointed = self._db.execute(
                "UPDATE batches SET object_key = ?, byte_offset = ? WHERE topic_id = ? "
                "AND partition = ? AND base_offset = ? AND object_key = ? AND byte_size = ?",
                (key, move.byte_offset, move.topic_id, move.partition,
                 move.base_offset, move.old_object_key, move.byte_size)).rowcount
            if repointed:
                leaving[move.old_object_key] = (leaving.get(move.old_object_key, 0)
                                                + move.byte_size)
                moved += 1
        self._db.executemany("UPDATE objects SET live_bytes = live_bytes - ? WHERE key = ?",
                             [(size, old_key) for old_key, size in sorted(leaving.items())])
        self._db.execute("UPDATE objects SET live_bytes = live_bytes + ? WHERE key = ?",
                         (sum(leaving.values()), key))
        self._mark_emptied(sorted(set(leaving) | {key}), now_ms)
        return MergeResult(moved, len(request.moves) - moved)

    def _compact(self, request: Compact) -> CompactResult:
        topic_id, partition, key, now_ms = (request.topic_id, request.partition,
                                            request.object_key, request.now_ms)
        exists = self._log_exists(topic_id, partition)
        object_known = bool(key) and self.is_known_object(key)
        refusal = compaction_refusal(
            request, self.log_info(topic_id, partition) if exists else None,
            lambda base_offset: self._one_batch(
                "WHERE topic_id = ? AND partition = ? AND base_offset = ?",
                (topic_id, partition, base_offset)),
            object_known=object_known)
        if key and not object_known:
            # Registered even when refused: with no live batch, the GC collects it.
            self._db.execute("INSERT INTO objects VALUES (?, ?, 0, ?, NULL)",
                             (key, request.object_size, now_ms))
        if refusal is not None:
            self._mark_emptied([key] if key and not object_known else [], now_ms)
            return CompactResult(refused=refusal)
        where = "topic_id = ? AND partition = ? AND base_offset = ?"
        for rewrite in request.batches:
            at = (topic_id, partition, rewrite.base_offset)
            if rewrite.dropped:
                self._db.execute(f"DELETE FROM batches WHERE {where}", at)
            else:
                self._db.execute(f"UPDATE batches SET object_key = ?, byte_offset = ?, "
                                 f"byte_size = ? WHERE {where}",
                                 (key, rewrite.byte_offset, rewrite.byte_size, *at))
            self._db.execute("UPDATE objects SET live_bytes = live_bytes - ? WHERE key = ?",
                             (rewrite.old_byte_size, rewrite.old_object_key))
            self._db.execute("UPDATE objects SET live_bytes = live_bytes + ? WHERE key = ?",
                             (rewrite.byte_size, key))
            self._db.execute("UPDATE logs SET size_bytes = size_bytes - ? "
                             "WHERE topic_id = ? AND partition = ?",
                             (rewrite.old_byte_size - rewrite.byte_size, topic_id, partition))
        self._db.execute("UPDATE batches SET cleaned_at_ms = ? WHERE topic_id = ? AND "
                         "partition = ? AND last_offset < ? AND cleaned_at_ms < 0",
                         (now_ms, topic_id, partition, request.cleaned_offset))
        self._db.execute("UPDATE logs SET cleaned_offset = MAX(cleaned_offset, ?), "
                         "tombstone_horizon_ms = ? WHERE topic_id = ? AND partition = ?",
                         (request.cleaned_offset, request.tombstone_horizon_ms, topic_id,
                          partition))
        self._mark_emptied(sorted({r.old_object_key for r in request.batches}
                                  | ({key} if key else set())), now_ms)
        return compaction_result(request)

    def _expire_producers(self, request: ExpireProducers) -> ExpireProducersResult:
        expired = 0
        rows = self._db.execute("SELECT topic_id, partition FROM producer_state").fetchall()
        for topic_id, partition in rows:
            forgotten = self._producer_state(topic_id, partition).remove_expired(
                request.now_ms, request.expiration_ms)
            if forgotten:
                self._save_producer_state(topic_id, partition)
                expired += forgotten
        return ExpireProducersResult(expired)

    def _checkpoint_taken(self, request: CheckpointTaken) -> CheckpointTakenResult:
        recorded = self._db.execute("SELECT offset, object_key FROM checkpoints").fetchall()
        kept, result = kept_checkpoints([*recorded, (request.offset, request.object_key)],
                                        request.keep)
        self._db.execute("DELETE FROM checkpoints")
        self._db.executemany("INSERT INTO checkpoints VALUES (?, ?)", kept)
        return result

    # -- live storage-mode switches ------------------------------------------------------------

    def _seal_log(self, request: SealLog) -> SpanResult:
        topic_id, partition = request.topic_id, request.partition
        exists = self._log_exists(topic_id, partition)
        if exists:
            self._db.execute("UPDATE logs SET sealed = 1 WHERE topic_id = ? AND partition = ?",
                             (topic_id, partition))
        return sealed_span(self.log_info(topic_id, partition) if exists else None,
                           self._producer_state(topic_id, partition))

    def _open_log(self, request: OpenLog) -> SpanResult:
        topic_id, partition, offset = request.topic_id, request.partition, request.offset
        exists = self._log_exists(topic_id, partition)
        unchanged = opened_span(request, self.log_info(topic_id, partition) if exists else None)
        if unchanged is not None:
            return unchanged
        self._db.execute("INSERT OR IGNORE INTO logs (topic_id, partition, log_start_offset, "
                         "high_watermark, size_bytes) VALUES (?, ?, ?, ?, 0)",
                         (topic_id, partition, offset, offset))
        self._db.execute("UPDATE logs SET high_watermark = ?, sealed = 0 "
                         "WHERE topic_id = ? AND partition = ?", (offset, topic_id, partition))
        self._producer_states[(topic_id, partition)] = carried_producers(request)
        self._save_producer_state(topic_id, partition)
        return SpanResult(ErrorCode.none, offset)

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
        # A change under way reads what it wrote itself, so it is not cached.
        changing = self._db.in_transaction
        info = None if changing else self._log_infos.get((topic_id, partition))
        if info is None:
            info = self._read_log_info(topic_id, partition) or LogInfo(0, 0, 0)
            if not changing:
                self._log_infos[(topic_id, partition)] = info
        return info

    def _read_log_info(self, topic_id: str, partition: int) -> LogInfo | None:
        row = self._db.execute(
            "SELECT log_start_offset, high_watermark, size_bytes, cleaned_offset, "
            "tombstone_horizon_ms, sealed FROM logs WHERE topic_id = ? AND partition = ?",
            (topic_id, partition)).fetchone()
        return None if row is None else LogInfo(*row[:5], bool(row[5]))

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]:
        info = self.log_info(topic_id, partition)
        if not info.log_start_offset <= offset < info.high_watermark:
            return []
        rows = self._db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE topic_id = ? AND partition = ? "
            f"AND base_offset >= COALESCE((SELECT MAX(base_offset) FROM batches "
            f"WHERE topic_id = ? AND partition = ? AND base_offset <= ?), -1) "
            f"ORDER BY base_offset", (topic_id, partition, topic_id, partition, offset))
        found = batches_from((BatchCoordinate(*row) for row in rows), offset, max_bytes)
        rows.close()
        return found

    def offset_for_timestamp(self, topic_id: str, partition: int,
                             timestamp_ms: int) -> BatchCoordinate | None:
        return self._one_batch(
            f"WHERE topic_id = ? AND partition = ? AND {_EFFECTIVE_TIMESTAMP} >= ? "
            f"ORDER BY base_offset", (topic_id, partition, timestamp_ms))

    def max_timestamp_batch(self, topic_id: str, partition: int) -> BatchCoordinate | None:
        return self._one_batch(
            f"WHERE topic_id = ? AND partition = ? "
            f"ORDER BY {_EFFECTIVE_TIMESTAMP} DESC, base_offset", (topic_id, partition))

    def files_to_delete(self, now_ms: int, delay_ms: int) -> list[str]:
        return [key for key, in self._db.execute(
            "SELECT key FROM objects WHERE live_bytes = 0 AND emptied_at_ms <= ? ORDER BY key",
            (now_ms - delay_ms,))]

    def is_known_object(self, key: str) -> bool:
        return self._object_exists(key) or self._is_deleted_object(key)

    def merge_candidates(self, max_object_size: int, limit: int,
                         skip_prefixes: tuple[str, ...] = (),
                         created_before_ms: int | None = None) -> list[str]:
        skipped = "".join(" AND substr(key, 1, ?) <> ?" for _ in skip_prefixes)
        return [key for key, in self._db.execute(
            f"SELECT key FROM objects WHERE size < ? AND live_bytes > 0 AND created_ms <= ?"
            f"{skipped} ORDER BY created_ms, key LIMIT ?",
            (max_object_size, _NO_BOUND if created_before_ms is None else created_before_ms,
             *(v for p in skip_prefixes for v in (len(p), p)), limit))]

    def object_batches(self, key: str) -> list[BatchCoordinate]:
        return [BatchCoordinate(*row) for row in self._db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE object_key = ? "
            f"ORDER BY topic_id, partition, base_offset", (key,))]

    def last_stable_offset(self, topic_id: str, partition: int) -> int:
        info = self.log_info(topic_id, partition)
        return self._producer_state(topic_id, partition).last_stable_offset(info.high_watermark)

    def aborted_transactions(self, topic_id: str, partition: int, start: int,
                             end: int) -> list[AbortedTransaction]:
        return self._producer_state(topic_id, partition).aborted_between(start, end)

    def active_producers(self, topic_id: str, partition: int) -> list[ProducerEntry]:
        return sorted(self._producer_state(topic_id, partition).producers.values(),
                      key=lambda entry: entry.producer_id)

    def logs(self) -> list[tuple[str, int]]:
        return self._db.execute(
            "SELECT topic_id, partition FROM logs ORDER BY topic_id, partition").fetchall()

    def stats(self) -> StateStats:
        (logs,), (batches,) = (self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
                               for table in ("logs", "batches"))
        objects, live, dead, empty = self._db.execute(
            "SELECT COUNT(*), TOTAL(live_bytes), TOTAL(size - live_bytes), "
            "COUNT(CASE WHEN live_bytes = 0 THEN 1 END) FROM objects").fetchone()
        return StateStats(logs, batches, objects, int(live), int(dead), empty)

    def latest_checkpoint(self) -> int:
        """The offset of the newest checkpoint recorded in the log (-1: none)."""
        (offset,) = self._db.execute("SELECT MAX(offset) FROM checkpoints").fetchone()
        return -1 if offset is None else offset

    def records_since_checkpoint(self) -> int:
        """Records applied after the state the newest recorded checkpoint holds (all of them
        if there is none), by this process or any before it: what makes the next checkpoint
        due, so a broker that restarts often still checkpoints."""
        return self._applied_offset - self.latest_checkpoint()

    def database_bytes(self) -> int:
        (pages,), (page_size,) = (self._db.execute(f"PRAGMA {pragma}").fetchone()
                                  for pragma in ("page_count", "page_size"))
        return pages * page_size

    def _one_batch(self, clause: str, params: tuple) -> BatchCoordinate | None:
        row = self._db.execute(f"SELECT {_BATCH_COLUMNS} FROM batches {clause} LIMIT 1",
                               params).fetchone()
        return None if row is None else BatchCoordinate(*row)

    def _partitions(self, topic_id: str) -> list[int]:
        return [p for p, in self._db.execute(
            "SELECT partition FROM logs WHERE topic_id = ? ORDER BY partition", (topic_id,))]

    def _log_exists(self, topic_id: str, partition: int) -> bool:
        return self._exists("logs", "topic_id = ? AND partition = ?", (topic_id, partition))

    def _object_exists(self, key: str) -> bool:
        return self._exists("objects", "key = ?", (key,))

    def _is_deleted_object(self, key: str) -> bool:
        return self._exists("deleted_objects", "key = ?", (key,))

    def _is_deleted_topic(self, topic_id: str) -> bool:
        return self._exists("deleted_topics", "topic_id = ?", (topic_id,))

    def _exists(self, table: str, where: str, params: tuple) -> bool:
        row = self._db.execute(f"SELECT 1 FROM {table} WHERE {where}", params).fetchone()
        return row is not None


@dataclasses.dataclass
class _Commit:
    """One CommitFile being applied: what its batches changed so far, written at its end."""

    object_key: str
    now_ms: int
    # Each log's info as the commit's earlier batches left it.
    logs: dict[tuple[str, int], LogInfo] = dataclasses.field(default_factory=dict)
    touched: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    deleted_topics: dict[str, bool] = dataclasses.field(default_factory=dict)
    batch_rows: list[tuple] = dataclasses.field(default_factory=list)
    live_bytes: int = 0


def _remove_journal(path: Path) -> None:
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _logs_changed(request: Request) -> set[tuple[str, int]] | None:
    """The logs whose LogInfo applying ``request`` may change, for the frequent records
    (a commit, a merge); None, any log, for the others."""
    if isinstance(request, CommitFile):
        return {(batch.topic_id, batch.partition) for batch in request.batches}
    if isinstance(request, Merge):
        return {(move.topic_id, move.partition) for move in request.moves}
    return None
