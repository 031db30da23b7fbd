"""Checkpoints of the batch coordinator's SQLite state, so that its log need not be kept
from offset 0 (issue 17).

The writable coordinator copies its database every ``interval_records`` records or
``interval_ms`` (whichever comes first, if anything was applied): SQLite's online backup,
in one step on a connection of its own in a worker thread, copies the database as one read
transaction sees it (in WAL mode the event loop's writes go on meanwhile), and the copy's
``applied`` row is the log offset X it reflects. The copy is uploaded to the WAL bucket as
``<prefix>coordinator-checkpoints/<X>.sqlite`` (one PUT: an object exists whole or not at
all), then recorded in the log (``CheckpointTaken``). Every replica applies that record:
the state keeps the CHECKPOINTS_KEPT newest, and once it holds that many each replica
deletes its own copy of the log below the oldest of them (one past it), and the writable
coordinator deletes older checkpoint objects.

A broker whose database is missing (new replica, wiped disk), unreadable (set aside by
BatchCoordinatorState) or behind its log's start (a follower that fell behind the leader's
log start restarts its log there) restores the newest checkpoint at or past the log start
and applies the log after it; if none is readable it tries older ones.

A crash at any step leaves a state that rebuilds: before the upload nothing changed; an
uploaded but unrecorded checkpoint is a correct copy of the state at X (used by a restore,
deleted with the older ones); the log is trimmed only after the record is committed and
applied; a restore renames a checked copy over the database.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from storage.objectstore import WAL_BUCKET, ObjectStore

# Two, as KIP-630's metadata snapshots: if the newest cannot be read, the older one and
# the log after it still rebuild the state.
CHECKPOINTS_KEPT = 2
_SUFFIX = ".sqlite"


@dataclass(frozen=True)
class CheckpointSettings:
    interval_records: int = 10_000
    interval_ms: int = 600_000


class CheckpointStore:
    """The checkpoint objects of one cluster, named by the offset they reflect (zero-padded,
    so that key order is offset order)."""

    def __init__(self, store: ObjectStore, key_prefix: str) -> None:
        self.store = store
        self.prefix = f"{key_prefix}coordinator-checkpoints/"

    def key(self, offset: int) -> str:
        return f"{self.prefix}{offset:020d}{_SUFFIX}"

    async def offsets(self) -> list[int]:
        """The offsets of the checkpoints in object storage, oldest first."""
        offsets = []
        async for info in self.store.list_objects(WAL_BUCKET, self.prefix):
            name = info.key[len(self.prefix):]
            if name.endswith(_SUFFIX) and name[:-len(_SUFFIX)].isdigit():
                offsets.append(int(name[:-len(_SUFFIX)]))
        return sorted(offsets)

    async def put(self, offset: int, data: bytes) -> str:
        key = self.key(offset)
        await self.store.put(WAL_BUCKET, key, data)
        return key

    async def get(self, offset: int) -> bytes:
        return await self.store.get(WAL_BUCKET, self.key(offset))

    async def delete_below(self, offset: int) -> int:
        """Delete the checkpoints older than ``offset``; how many there were."""
        old = [self.key(o) for o in await self.offsets() if o < offset]
        if old:
            await self.store.delete(WAL_BUCKET, old)
        return len(old)


def copy_state(database: Path, copy: Path) -> int:
    """Write a consistent copy of the coordinator's database to ``copy`` (a file of its own,
    without a WAL); the log offset it reflects. Blocks: run it in a worker thread."""
    copy.unlink(missing_ok=True)
    source = sqlite3.connect(database)
    try:
        target = sqlite3.connect(copy)
        try:
            source.backup(target)  # all pages in one step: one read transaction
            target.execute("PRAGMA journal_mode=DELETE")
            return _applied_offset(target)
        finally:
            target.close()
    finally:
        source.close()


def write_checkpoint(data: bytes, path: Path) -> int:
    """Write a downloaded checkpoint to ``path`` and check it; the log offset it reflects.
    Raises ValueError if it is not a whole database. Blocks: run it in a worker thread."""
    path.write_bytes(data)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (verdict,) = db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise ValueError(f"checkpoint is damaged: {verdict}")
            return _applied_offset(db)
        finally:
            db.close()
    except (sqlite3.DatabaseError, ValueError) as e:
        path.unlink(missing_ok=True)
        raise ValueError(f"not a checkpoint: {e}") from e


def _applied_offset(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT offset FROM applied").fetchone()
    return -1 if row is None else row[0]
