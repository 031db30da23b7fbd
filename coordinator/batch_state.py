"""Materialised state of the diskless batch coordinator (KIP-1164), in SQLite.

The coordinator's log is a replicated topic of JSON-able records; every broker applies the
same records in log order through ``BatchCoordinatorState.apply``. Applying must therefore
be deterministic: it reads only the record (which carries ``now_ms`` where time matters) and
the database, never the clock, and every query orders its rows explicitly.

Offsets are assigned here: a committed batch takes the log's high watermark as its base
offset. Rejected batches take no offset; their bytes stay in the object as dead bytes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from storage.producer_state import InvalidSequence, ProducerState, ProducerStateError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS applied (id INTEGER PRIMARY KEY CHECK (id = 0), offset INTEGER);
CREATE TABLE IF NOT EXISTS logs (
    topic_id TEXT, partition INTEGER, log_start_offset INTEGER, high_watermark INTEGER,
    size_bytes INTEGER, PRIMARY KEY (topic_id, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    topic_id TEXT, partition INTEGER, base_offset INTEGER, last_offset INTEGER,
    object_key TEXT, byte_offset INTEGER, byte_size INTEGER, max_timestamp INTEGER,
    timestamp_type INTEGER, append_time_ms INTEGER,
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
CREATE TABLE IF NOT EXISTS requests (request_id TEXT PRIMARY KEY, result TEXT) WITHOUT ROWID;
"""
_TABLES = ("applied", "logs", "batches", "objects", "deleted_objects", "deleted_topics",
           "producer_state", "requests")

_BATCH_COLUMNS = ("topic_id, partition, base_offset, last_offset, object_key, byte_offset, "
                  "byte_size, max_timestamp, timestamp_type, append_time_ms")
# LogAppendTime batches are stamped by the coordinator; their client timestamps do not count.
_EFFECTIVE_TIMESTAMP = "CASE timestamp_type WHEN 1 THEN append_time_ms ELSE max_timestamp END"

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1
GARBAGE_COLLECTED = "object was garbage-collected before its commit"
ALREADY_COMMITTED = "object was already committed"
TOPIC_DELETED = "topic was deleted"


@dataclass(frozen=True, slots=True)
class LogInfo:
    log_start_offset: int
    high_watermark: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class BatchCoordinate:
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

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1


@dataclass(frozen=True, slots=True)
class _CommittedBatch:
    """The header fields ProducerState checks, from one batch of a commit_file record."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    last_offset_delta: int
    max_timestamp: int

    @classmethod
    def of(cls, batch: dict) -> "_CommittedBatch":
        return cls(batch["producer_id"], batch["producer_epoch"], batch["base_sequence"],
                   batch["last_sequence"], batch["record_count"] - 1, batch["max_timestamp"])


def _batch_stored(base_offset: int, append_time_ms: int | None, log_start_offset: int) -> dict:
    return {"error_code": 0, "base_offset": base_offset,
            "log_append_time_ms": NO_TIMESTAMP if append_time_ms is None else append_time_ms,
            "log_start_offset": log_start_offset, "error_message": None}


def _batch_error(code: ErrorCode, message: str) -> dict:
    return {"error_code": int(code), "base_offset": -1, "log_append_time_ms": NO_TIMESTAMP,
            "log_start_offset": -1, "error_message": message}


class BatchCoordinatorState:
    def __init__(self, path: Path) -> None:
        # Autocommit mode: every apply opens its own transaction explicitly.
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT offset FROM applied").fetchone()
        self._applied_offset = -1 if row is None else row[0]
        # Decoded producer state per (topic_id, partition); only valid while it matches the
        # database, so it is dropped whenever a transaction rolls back.
        self._producer_states: dict[tuple[str, int], ProducerState] = {}

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

    def apply(self, offset: int, record: dict) -> dict:
        if offset <= self._applied_offset:
            raise ValueError(f"record at offset {offset} is at or before the applied offset "
                             f"{self._applied_offset}")
        handler = self._HANDLERS.get(record.get("type"))
        if handler is None:
            raise ValueError(f"unknown coordinator record type {record.get('type')!r}")
        with self._transaction():
            result = handler(self, record)
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
    def _transaction(self) -> Iterator[None]:
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

    # -- commit_file -----------------------------------------------------------------------

    def _commit_file(self, record: dict) -> dict:
        request_id = record["request_id"]
        stored = self._db.execute(
            "SELECT result FROM requests WHERE request_id = ?", (request_id,)).fetchone()
        if stored is not None:
            return json.loads(stored[0])
        result = {"batches": self._commit_batches(record)}
        self._db.execute("INSERT INTO requests VALUES (?, ?)", (request_id, json.dumps(result)))
        return result

    def _commit_batches(self, record: dict) -> list[dict]:
        key, now_ms, batches = record["object_key"], record["now_ms"], record["batches"]
        if self._is_deleted_object(key):
            return [_batch_error(ErrorCode.kafka_storage_error, GARBAGE_COLLECTED) for _ in batches]
        if self._object_exists(key):
            return [_batch_error(ErrorCode.kafka_storage_error, ALREADY_COMMITTED) for _ in batches]
        self._db.execute("INSERT INTO objects VALUES (?, ?, 0, ?, NULL)",
                         (key, record["object_size"], now_ms))
        touched: set[tuple[str, int]] = set()
        results = [self._commit_batch(key, now_ms, batch, touched) for batch in batches]
        for log in sorted(touched):
            self._db.execute("INSERT OR REPLACE INTO producer_state VALUES (?, ?, ?)",
                             (*log, self._producer_state(*log).snapshot()))
        self._mark_emptied([key], now_ms)
        return results

    def _commit_batch(self, key: str, now_ms: int, batch: dict,
                      touched: set[tuple[str, int]]) -> dict:
        topic_id, partition = batch["topic_id"], batch["partition"]
        if self._is_deleted_topic(topic_id):
            return _batch_error(ErrorCode.unknown_topic_or_partition, TOPIC_DELETED)
        self._db.execute("INSERT OR IGNORE INTO logs VALUES (?, ?, 0, 0, 0)", (topic_id, partition))
        info = self.log_info(topic_id, partition)
        append_time = now_ms if batch["log_append_time"] else None
        producers = self._producer_state(topic_id, partition)
        try:
            plan = producers.check_append([_CommittedBatch.of(batch)], info.high_watermark,
                                          append_time)
        except ProducerStateError as e:
            return _batch_error(e.error_code, str(e))
        except InvalidSequence as e:  # a producer id without a sequence
            return _batch_error(ErrorCode.invalid_record, str(e))
        if plan.duplicate is not None:
            # A retry: the original offsets, and nothing stored again (as the classic log).
            return _batch_stored(plan.duplicate.first_offset,
                                 None if append_time is None else plan.duplicate.timestamp,
                                 info.log_start_offset)
        producers.apply(plan)
        touched.add((topic_id, partition))
        base_offset, size = info.high_watermark, batch["byte_size"]
        self._db.execute(
            f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (topic_id, partition, base_offset, base_offset + batch["record_count"] - 1, key,
             batch["byte_offset"], size, batch["max_timestamp"],
             CREATE_TIME if append_time is None else LOG_APPEND_TIME,
             NO_TIMESTAMP if append_time is None else append_time))
        self._db.execute(
            "UPDATE logs SET high_watermark = high_watermark + ?, size_bytes = size_bytes + ? "
            "WHERE topic_id = ? AND partition = ?",
            (batch["record_count"], size, topic_id, partition))
        self._db.execute("UPDATE objects SET live_bytes = live_bytes + ? WHERE key = ?",
                         (size, key))
        return _batch_stored(base_offset, append_time, info.log_start_offset)

    def _producer_state(self, topic_id: str, partition: int) -> ProducerState:
        state = self._producer_states.get((topic_id, partition))
        if state is None:
            row = self._db.execute(
                "SELECT snapshot FROM producer_state WHERE topic_id = ? AND partition = ?",
                (topic_id, partition)).fetchone()
            state = ProducerState() if row is None else ProducerState.restore(row[0])
            self._producer_states[(topic_id, partition)] = state
        return state

    # -- removing batches --------------------------------------------------------------------

    def _delete_records(self, record: dict) -> dict:
        topic_id, partition = record["topic_id"], record["partition"]
        if not self._log_exists(topic_id, partition):
            return {"error_code": int(ErrorCode.unknown_topic_or_partition)}
        info = self.log_info(topic_id, partition)
        offset = info.high_watermark if record["offset"] == -1 else record["offset"]
        if not 0 <= offset <= info.high_watermark:
            return {"error_code": int(ErrorCode.offset_out_of_range)}
        log_start = max(info.log_start_offset, offset)
        # A batch straddling the new start stays: reads begin inside it, as in Kafka.
        self._remove_batches("topic_id = ? AND partition = ? AND last_offset < ?",
                             (topic_id, partition, log_start), record["now_ms"])
        self._set_log_start(topic_id, partition, log_start)
        return {"error_code": 0, "low_watermark": log_start}

    def _retention(self, record: dict) -> dict:
        now_ms = record["now_ms"]
        removed_batches = removed_bytes = 0
        for topic in record["topics"]:
            for partition in self._partitions(topic["topic_id"]):
                batches, size = self._enforce_retention(
                    topic["topic_id"], partition, now_ms, topic["retention_ms"],
                    topic["retention_bytes"])
                removed_batches += batches
                removed_bytes += size
        return {"removed_batches": removed_batches, "removed_bytes": removed_bytes}

    def _enforce_retention(self, topic_id: str, partition: int, now_ms: int,
                           retention_ms: int, retention_bytes: int) -> tuple[int, int]:
        """Remove the oldest batches breaching either limit (-1: none): (batches, bytes) removed."""
        info = self.log_info(topic_id, partition)
        where = "topic_id = ? AND partition = ?"
        oldest_first = self._db.execute(
            f"SELECT base_offset, byte_size, {_EFFECTIVE_TIMESTAMP} FROM batches "
            f"WHERE {where} ORDER BY base_offset", (topic_id, partition))
        keep_from = None  # base offset of the first batch both limits keep; None: keep none
        size = info.size_bytes
        for base_offset, byte_size, timestamp in oldest_first:
            too_old = retention_ms >= 0 and timestamp < now_ms - retention_ms
            too_big = retention_bytes >= 0 and size > retention_bytes
            if not (too_old or too_big):
                keep_from = base_offset
                break
            size -= byte_size
        oldest_first.close()
        keep_from = info.high_watermark if keep_from is None else keep_from
        removed = self._remove_batches(f"{where} AND base_offset < ?",
                                       (topic_id, partition, keep_from), now_ms)
        self._set_log_start(topic_id, partition, max(info.log_start_offset, keep_from))
        return removed

    def _delete_topic(self, record: dict) -> dict:
        topic_id = record["topic_id"]
        self._remove_batches("topic_id = ?", (topic_id,), record["now_ms"])
        self._db.execute("DELETE FROM logs WHERE topic_id = ?", (topic_id,))
        self._db.execute("DELETE FROM producer_state WHERE topic_id = ?", (topic_id,))
        for log in [log for log in self._producer_states if log[0] == topic_id]:
            del self._producer_states[log]
        self._db.execute("INSERT OR IGNORE INTO deleted_topics VALUES (?)", (topic_id,))
        return {}

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

    # -- objects -------------------------------------------------------------------------------

    def _objects_deleted(self, record: dict) -> dict:
        deleted, refused = [], []
        for key in record["keys"]:
            row = self._db.execute(
                "SELECT live_bytes FROM objects WHERE key = ?", (key,)).fetchone()
            if row is not None and row[0] > 0:
                refused.append(key)  # a live batch still points here: the GC raced a commit
                continue
            self._db.execute("DELETE FROM objects WHERE key = ?", (key,))
            self._db.execute("INSERT OR IGNORE INTO deleted_objects VALUES (?)", (key,))
            deleted.append(key)
        return {"deleted": deleted, "refused": refused}

    def _merge(self, record: dict) -> dict:
        key, now_ms, moves = record["object_key"], record["now_ms"], record["moves"]
        if self.is_known_object(key):
            # Deleted (e.g. as an orphan before this commit) or already in use: moving
            # batches there could lose them.
            return {"moved": 0, "skipped": len(moves)}
        self._db.execute("INSERT INTO objects VALUES (?, ?, 0, ?, NULL)",
                         (key, record["object_size"], now_ms))
        moved, old_keys = 0, set()
        for move in moves:
            # Skipped unless the batch is still the one that was copied, where it was copied
            # from: it may since have been removed, or moved by another merge.
            repointed = self._db.execute(
                "UPDATE batches SET object_key = ?, byte_offset = ? WHERE topic_id = ? "
                "AND partition = ? AND base_offset = ? AND object_key = ? AND byte_size = ?",
                (key, move["byte_offset"], move["topic_id"], move["partition"],
                 move["base_offset"], move["old_object_key"], move["byte_size"])).rowcount
            if repointed:
                self._db.execute("UPDATE objects SET live_bytes = live_bytes - ? WHERE key = ?",
                                 (move["byte_size"], move["old_object_key"]))
                self._db.execute("UPDATE objects SET live_bytes = live_bytes + ? WHERE key = ?",
                                 (move["byte_size"], key))
                old_keys.add(move["old_object_key"])
                moved += 1
        self._mark_emptied(sorted(old_keys | {key}), now_ms)
        return {"moved": moved, "skipped": len(moves) - moved}

    _HANDLERS = {
        "commit_file": _commit_file,
        "delete_records": _delete_records,
        "retention": _retention,
        "delete_topic": _delete_topic,
        "objects_deleted": _objects_deleted,
        "merge": _merge,
    }

    # -- queries -------------------------------------------------------------------------------

    def log_info(self, topic_id: str, partition: int) -> LogInfo:
        row = self._db.execute(
            "SELECT log_start_offset, high_watermark, size_bytes FROM logs "
            "WHERE topic_id = ? AND partition = ?", (topic_id, partition)).fetchone()
        return LogInfo(0, 0, 0) if row is None else LogInfo(*row)

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]:
        """Batches from the one holding ``offset`` on; always one if any, else up to max_bytes."""
        info = self.log_info(topic_id, partition)
        if not info.log_start_offset <= offset < info.high_watermark:
            return []
        rows = self._db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE topic_id = ? AND partition = ? "
            f"AND base_offset >= (SELECT MAX(base_offset) FROM batches "
            f"WHERE topic_id = ? AND partition = ? AND base_offset <= ?) ORDER BY base_offset",
            (topic_id, partition, topic_id, partition, offset))
        found, total = [], 0
        for row in rows:
            batch = BatchCoordinate(*row)
            if found and total + batch.byte_size > max_bytes:
                break
            found.append(batch)
            total += batch.byte_size
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

    def deletable_objects(self, now_ms: int, delay_ms: int) -> list[str]:
        return [key for key, in self._db.execute(
            "SELECT key FROM objects WHERE live_bytes = 0 AND emptied_at_ms <= ? ORDER BY key",
            (now_ms - delay_ms,))]

    def is_known_object(self, key: str) -> bool:
        return self._object_exists(key) or self._is_deleted_object(key)

    def merge_candidates(self, max_object_size: int,
                         limit: int) -> list[tuple[str, list[BatchCoordinate]]]:
        keys = [key for key, in self._db.execute(
            "SELECT key FROM objects WHERE size < ? AND live_bytes > 0 "
            "ORDER BY created_ms, key LIMIT ?", (max_object_size, limit))]
        return [(key, [BatchCoordinate(*row) for row in self._db.execute(
            f"SELECT {_BATCH_COLUMNS} FROM batches WHERE object_key = ? "
            f"ORDER BY topic_id, partition, base_offset", (key,))]) for key in keys]

    def logs(self) -> list[tuple[str, int]]:
        return self._db.execute(
            "SELECT topic_id, partition FROM logs ORDER BY topic_id, partition").fetchall()

    def stats(self) -> dict:
        (logs,), (batches,) = (self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
                               for table in ("logs", "batches"))
        objects, live, dead = self._db.execute(
            "SELECT COUNT(*), TOTAL(live_bytes), TOTAL(size - live_bytes) FROM objects").fetchone()
        (pages,), (page_size,) = (self._db.execute(f"PRAGMA {pragma}").fetchone()
                                  for pragma in ("page_count", "page_size"))
        return {"logs": logs, "batches": batches, "objects": objects, "live_bytes": int(live),
                "dead_bytes": int(dead), "db_bytes": pages * page_size}

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

