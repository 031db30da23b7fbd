"""The broker's shared-storage WAL (KIP-1183, AutoMQ's S3 WAL): one object for the new
records of every shared partition this broker leads.

Data flow: the leader appends to its local log (offsets, producer state), then hands the
bytes here (``append``). The open buffer closes after ``shared_wal_interval_ms`` or at
``shared_wal_max_bytes``; it is PUT as one object to the regional bucket, then one commit
names each partition's range of it to the controller (stream.StreamCommit). Only an
accepted commit moves a partition's committed end, which is what its producers wait for.
Objects are PUT concurrently but committed strictly in buffer order, so each partition's
ranges reach the controller in offset order; one commit is in flight at a time, and the
objects uploaded meanwhile are committed together by the next (a commit is a metadata-log
append replicated by the controller quorum: one per object would queue behind each other).

A part the controller refuses (this broker no longer leads, or the stream does not end
where the part starts), or a failed PUT, *resets* the partition: its local log is cut back
to the committed end and its waiting producers get a retriable error. Parts appended before
the reset and still buffered are dropped unsent. An object none of whose parts was
committed is deleted at once (the controller says which: a refused commit may be a retry of
one that landed); the others stay until compaction (storage.shared.compactor) has replaced
every range of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from storage.objectstore import ObjectStore, ObjectStoreError

from .state import Reset, SharedPartitionState
from .stream import WAL, CommitOutcome, StreamCommit, StreamMetadata, StreamRange

log = logging.getLogger(__name__)
# The controller's answers that mean another broker leads the partition now.
DEPOSED = (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch)


@dataclass(slots=True)
class _Part:
    state: SharedPartitionState
    generation: int
    leader_epoch: int
    base_offset: int
    last_offset: int
    position: int
    length: int


@dataclass(slots=True)
class _Closed:
    """A closed buffer: its object's key, its parts, and whether its PUT succeeded."""

    key: str
    parts: list[_Part]
    uploaded: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class SharedWal:
    def __init__(self, store: ObjectStore, bucket: str, key_prefix: str, interval_ms: int,
                 max_bytes: int) -> None:
        self.store = store
        self.bucket = bucket
        self.key_prefix = key_prefix
        self.interval_s = interval_ms / 1000
        self.max_bytes = max_bytes
        self.streams: StreamMetadata | None = None
        self._buffer = bytearray()
        self._parts: list[_Part] = []
        self._timer: asyncio.TimerHandle | None = None
        # Closed buffers not committed yet, oldest first; the committer takes them in order.
        self._closed: deque[_Closed] = deque()
        self._committer: asyncio.Task | None = None
        self._uploads: set[asyncio.Task] = set()

    def append(self, state: SharedPartitionState, data: bytes | bytearray | memoryview,
               base_offset: int, last_offset: int) -> None:
        """Buffer records the leader just appended at [base_offset, last_offset]."""
        self._parts.append(_Part(state, state.generation, state.leader_epoch, base_offset,
                                 last_offset, len(self._buffer), len(data)))
        self._buffer += data
        if len(self._buffer) >= self.max_bytes:
            self._close_buffer()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s,
                                                                self._close_buffer)

    def _close_buffer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._parts:
            return
        data, parts = bytes(self._buffer), self._parts
        self._buffer, self._parts = bytearray(), []
        key = f"{self.key_prefix}{time.time_ns() // 1_000_000:013d}-{uuid.uuid4().hex[:12]}"
        closed = _Closed(key, parts)
        self._closed.append(closed)
        upload = asyncio.create_task(self._upload(closed, data))
        self._uploads.add(upload)
        upload.add_done_callback(self._uploads.discard)
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_in_order())

    async def _upload(self, closed: _Closed, data: bytes) -> None:
        try:
            await self.store.put(self.bucket, closed.key, data)
        except Exception as e:  # every waiting producer must get an answer
            log.warning("shared WAL upload of %s (%d bytes) failed: %s", closed.key,
                        len(data), e)
            closed.uploaded.set_result(False)
            return
        closed.uploaded.set_result(True)

    async def _commit_in_order(self) -> None:
        """Commit closed buffers oldest first: once the oldest is uploaded, it and every
        uploaded buffer right after it go in one commit."""
        while self._closed:
            await asyncio.shield(self._closed[0].uploaded)
            ready: list[_Closed] = []
            while self._closed and self._closed[0].uploaded.done():
                ready.append(self._closed.popleft())
            try:
                await self._commit(ready)
            except Exception:
                log.exception("committing %d shared WAL object(s) failed", len(ready))
                for closed in ready:
                    self._reset(closed.parts, "the commit failed", Reset.RESYNC)

    async def _commit(self, ready: list[_Closed]) -> None:
        # Parts of a failed upload are not committed: resetting their partitions (in buffer
        # order) also drops their later parts, which no longer continue the stream.
        for closed in ready:
            if not closed.uploaded.result():
                self._reset(closed.parts, "the WAL object could not be uploaded")
        by_partition: dict[int, list[tuple[str, _Part]]] = {}
        dropped = []
        for closed in ready:
            if not closed.uploaded.result():
                continue
            for part in closed.parts:
                if part.state.generation == part.generation and part.state.leading:
                    by_partition.setdefault(id(part.state), []).append((closed.key, part))
                else:
                    dropped.append(part)
        self._reset(dropped, "the partition was reset or lost its leadership before its commit")
        groups = list(by_partition.values())
        commits = [StreamCommit(group[0][1].state.topic, group[0][1].state.partition,
                                group[0][1].leader_epoch, tuple(self._ranges(group)))
                   for group in groups]
        outcomes: list[CommitOutcome] = []
        if commits:
            try:
                outcomes = await self.streams.commit(commits)
            except Exception as e:
                log.warning("commit of %d shared WAL object(s) failed: %s", len(ready), e)
                # Maybe committed, maybe not: only the stream can tell.
                self._reset([part for group in groups for _, part in group],
                            f"no answer to the commit: {e}", Reset.RESYNC)
                return
        sent = {r.key for commit in commits for r in commit.ranges}
        freed = {key for outcome in outcomes for bucket, key in outcome.freed
                 if bucket == self.bucket}
        for group, commit, outcome in zip(groups, commits, outcomes):
            parts = [part for _, part in group]
            if outcome.error_code == 0:
                parts[0].state.committed(commit.ranges[-1].last_offset + 1)
            else:
                # Deposed; or the stream does not end where this broker thinks (an earlier
                # commit whose answer was lost did land): only the stream can tell.
                self._reset(parts, f"the controller refused the commit: "
                                   f"{outcome.error_code.name} {outcome.message}",
                            Reset.DEPOSED if outcome.error_code in DEPOSED else Reset.RESYNC)
        # Only the controller can tell a refused object unused (CommitOutcome.freed): an
        # earlier attempt of this commit may have landed. One that no commit named is.
        for closed in ready:
            if closed.uploaded.result() and (closed.key in freed or closed.key not in sent):
                await self._delete_unreferenced(closed.key)

    def _ranges(self, parts: list[tuple[str, _Part]]) -> list[StreamRange]:
        """One range per run of parts adjacent in one object and in offsets."""
        ranges: list[StreamRange] = []
        for key, part in parts:
            last = ranges[-1] if ranges else None
            if (last is not None and last.key == key and last.last_offset + 1 == part.base_offset
                    and last.position + last.length == part.position):
                ranges[-1] = StreamRange(self.bucket, key, last.base_offset, part.last_offset,
                                         last.position, last.length + part.length,
                                         part.leader_epoch, WAL)
            else:
                ranges.append(StreamRange(self.bucket, key, part.base_offset, part.last_offset,
                                          part.position, part.length, part.leader_epoch, WAL))
        return ranges

    @staticmethod
    def _reset(parts: list[_Part], reason: str, how: Reset = Reset.TRUNCATE) -> None:
        for part in parts:
            if part.state.generation == part.generation:
                part.state.reset(reason, how)

    async def _delete_unreferenced(self, key: str) -> None:
        try:
            await self.store.delete(self.bucket, [key])
        except ObjectStoreError as e:
            log.warning("cannot delete the uncommitted WAL object %s: %s", key, e)

    async def close(self) -> None:
        """Flush the open buffer and wait for what is in flight."""
        self._close_buffer()
        await asyncio.gather(*self._uploads, return_exceptions=True)
        if self._committer is not None:
            await asyncio.gather(self._committer, return_exceptions=True)
