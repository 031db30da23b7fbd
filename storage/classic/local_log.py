"""The segments of one partition directory (Kafka's ``LocalLog`` plus its ``LogLoader``).

The last segment is the active one and the log end offset is always its next offset.
Durability bookkeeping:

* ``recovery-point``: every offset below it was fsynced by ``flush``. After a crash only the
  segments from the one holding the recovery point onwards are recovered (CRC-checked,
  indexes rebuilt, torn tail cut); when one of them loses bytes, the later segments are
  deleted, as their offsets would no longer follow on. ``flush`` writes it once the data
  it covers is durable, without fsyncing it (Kafka checkpoints it on a timer): what a
  crash leaves of it is that value or an older one, never more than is durable, and an
  older one only means more is recovered. Lowering it (truncation) is made durable at
  once.
* Segments the log cleaner rewrote replace the ones they came from as in Kafka: written as
  ``.cleaned`` files, renamed to ``.swap`` once complete and durable, the old segments
  deleted, then renamed to their final names. On open a ``.cleaned`` file is an unfinished
  rewrite (deleted, the old segments are intact) and a ``.swap`` file a finished one whose
  swap is completed (the segments it covers deleted, then renamed).
* Segments before the one holding the recovery point (all but the active one after a
  clean shutdown) were flushed with their indexes: they are opened lazily, their indexes
  read on first use (Kafka's LazyIndex). After a clean shutdown of the whole data directory
  the active segment is too: the checkpoint gives its end.
* ``.kipper_clean_shutdown``: written by ``close`` after everything is flushed; its presence
  on open means no recovery is needed. (A broker's logs are closed together and share one
  marker and recovery-point checkpoint per data directory instead: clean_shutdown.py.) It is removed as soon as the log is loaded, and that
  removal is made durable before the first change to the segments (an fsync of the
  directory then, not at open: a broker opens thousands of logs and writes to few).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Callable
from pathlib import Path

from protocol.records import BatchHeader

from ..config import LogConfig
from .checkpoint import (
    fsync_dir,
    move_aside_for_deletion,
    read_offset,
    write_atomically,
    write_offset,
)
from .segment import INT32_MAX, LogSegment, index_files, log_file

CLEAN_SHUTDOWN_FILE = ".kipper_clean_shutdown"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
RECOVERY_POINT_FILE = "recovery-point"


def list_log_dir(directory: Path | str) -> set[str]:
    """The names in a partition directory, created if it is missing: one listing answers
    which files exist (segments, checkpoints, the clean-shutdown marker), rather than a
    failed open per missing file, when thousands of logs are opened at start-up."""
    try:
        return set(os.listdir(directory))
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return set()


class LocalLog:
    def __init__(self, directory: Path, config: LogConfig, *, start_offset: int = 0,
                 on_recovered_batch: Callable[[BatchHeader], None] | None = None,
                 names: set[str] | None = None,
                 clean_recovery_point: int | None = None) -> None:
        """Load (and if needed recover) the segments in ``directory``; an empty log starts at
        ``start_offset``. ``on_recovered_batch`` sees every batch of a recovered segment, in
        offset order, so state derived from batches (leader epochs) can be rebuilt.
        ``names``: the directory's listing (list_log_dir), if the caller made it.
        ``clean_recovery_point``: the log was closed cleanly with this log end, as its data
        directory's clean shutdown says (storage.classic.clean_shutdown): no recovery."""
        self.dir = directory
        self.config = config
        # Strings for the files opened at every start: see LogSegment.
        self._dir = os.fspath(directory)
        self._recovery_point_file = os.path.join(self._dir, RECOVERY_POINT_FILE)
        if names is None:
            names = list_log_dir(directory)
        if clean_recovery_point is not None:
            # The file may be older (a clean close does not rewrite it): lower is safe.
            self.recovery_point = clean_recovery_point
        else:
            self.recovery_point = (read_offset(self._recovery_point_file) or 0
                                   if RECOVERY_POINT_FILE in names else 0)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        # The clean-shutdown marker was removed but the removal may not be durable yet.
        self._marker_removal_unsynced = False
        self._load(names, start_offset, on_recovered_batch, clean_recovery_point is not None)

    def _load(self, names: set[str], start_offset: int,
              on_recovered_batch: Callable[[BatchHeader], None] | None,
              closed_cleanly: bool) -> None:
        marked_clean = CLEAN_SHUTDOWN_FILE in names
        clean = closed_cleanly or marked_clean
        if any(name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for name in names):
            self._finish_swaps()
            names = set(os.listdir(self.dir))
        bases = sorted(int(name[:-4]) for name in names
                       if name.endswith(".log") and name[:-4].isdigit())
        for name in names:
            if name.endswith((".index", ".timeindex")) \
                    and f"{name.partition('.')[0]}.log" not in names:
                os.unlink(os.path.join(self._dir, name))
        if clean:
            first_unflushed = len(bases)
        else:
            first_unflushed = max(bisect_right(bases, self.recovery_point) - 1, 0)
        last = len(bases) - 1
        for i, base in enumerate(bases):
            stem = f"{base:020d}"
            indexed = f"{stem}.index" in names and f"{stem}.timeindex" in names
            if i < min(first_unflushed, last) and indexed:
                # Flushed and sealed: its indexes are read when it is first used.
                self._segments.append(self._new_segment(base, lazy=True))
                continue
            if i == last and indexed and closed_cleanly and self.recovery_point > base:
                # The active segment of a log closed cleanly: its end is the checkpoint's,
                # and its indexes are read when first used. Most of a restarting broker's
                # logs are asked for their end (ListOffsets, a follower's fetch at the end)
                # long before anything else; reading every one's indexes and last batches
                # was a third of opening it.
                self._segments.append(self._new_segment(base, lazy=True,
                                                        next_offset=self.recovery_point))
                continue
            segment = self._new_segment(base)
            self._segments.append(segment)
            # Without index files (an empty segment has none) ``load`` cannot succeed: not
            # tried, a failed open fewer per log when thousands are opened at start-up.
            if (i >= first_unflushed or not indexed or not segment.load()) \
                    and segment.recover(on_recovered_batch):
                for later in bases[i + 1:]:
                    later_log = log_file(self.dir, later)
                    for path in (later_log, *index_files(later_log)):
                        path.unlink(missing_ok=True)
                break
        if not self._segments:
            self._segments.append(self._new_segment(start_offset))
        self._bases = [s.base_offset for s in self._segments]
        if marked_clean:
            os.unlink(os.path.join(self._dir, CLEAN_SHUTDOWN_FILE))
            self._marker_removal_unsynced = True

    def _finish_swaps(self) -> None:
        """Discard the cleaner's unfinished rewrites and complete its finished swaps."""
        cleaned_files = list(self.dir.glob(f"*{CLEANED_SUFFIX}"))
        swaps = sorted(self.dir.glob(f"*.log{SWAP_SUFFIX}"))
        # Index files of a swap whose log file was renamed before the crash (a segment's
        # files are renamed log first): that segment's recovery rebuilds its indexes.
        stray_indexes = [path for path in self.dir.glob(f"*index{SWAP_SUFFIX}")
                         if not log_file(self.dir, int(path.name.partition(".")[0]),
                                         SWAP_SUFFIX).exists()]
        if not cleaned_files and not swaps and not stray_indexes:
            return
        for stray in stray_indexes:
            stray.unlink()
        for cleaned in cleaned_files:
            cleaned.unlink()
        for swap in swaps:
            base = int(swap.name.partition(".")[0])
            segment = self._new_segment(base, SWAP_SUFFIX)
            segment.recover()
            # A cleaned segment ends where the segments it replaces ended (the cleaner keeps
            # an empty batch there if need be), so these are exactly the ones it replaces.
            for path in self.dir.glob("*.log"):
                if path.stem.isdigit() and base <= int(path.stem) < segment.next_offset:
                    for old in (path, *index_files(path)):
                        old.unlink(missing_ok=True)
            segment.close(sync=False)
            for index in index_files(swap):
                index.unlink(missing_ok=True)  # rebuilt by the recovery of the segment
            swap.rename(log_file(self.dir, base))
        fsync_dir(self.dir)

    def _new_segment(self, base_offset: int, suffix: str = "", *, lazy: bool = False,
                     next_offset: int | None = None) -> LogSegment:
        return LogSegment(self._dir, base_offset,
                          index_interval_bytes=self.config.index_interval_bytes,
                          index_max_bytes=self.config.segment_index_bytes, suffix=suffix,
                          lazy=lazy, next_offset=next_offset)

    def cleaned_segment(self, base_offset: int) -> LogSegment:
        """A new ``.cleaned`` segment for the cleaner to write (see ``replace_segments``)."""
        log_file(self.dir, base_offset, CLEANED_SUFFIX).unlink(missing_ok=True)
        return self._new_segment(base_offset, CLEANED_SUFFIX)

    def replace_segments(self, old: list[LogSegment], cleaned: LogSegment) -> bool:
        """Swap ``cleaned`` (written and flushed) in for the contiguous segments ``old``,
        Kafka's way, each step durable before the next; False, and ``cleaned`` deleted, when
        ``old`` is no longer what the log holds (a truncation or deletion came first)."""
        try:
            first = next(i for i, s in enumerate(self._segments) if s is old[0])
        except StopIteration:
            first = -1
        if first < 0 or self._segments[first:first + len(old)] != old \
                or first + len(old) >= len(self._segments):
            cleaned.delete()
            return False
        self._before_change()
        cleaned.rename(SWAP_SUFFIX)
        fsync_dir(self.dir)
        for segment in old:
            segment.delete()
        cleaned.rename("")
        fsync_dir(self.dir)
        self._segments[first:first + len(old)] = [cleaned]
        self._bases = [s.base_offset for s in self._segments]
        return True

    @property
    def segments(self) -> list[LogSegment]:
        """The segments in offset order (read-only for callers)."""
        return self._segments

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def next_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    # -- writing -------------------------------------------------------------------------

    def _before_change(self) -> None:
        """A crash after a change must not find the marker, or recovery would skip it."""
        if self._marker_removal_unsynced:
            fsync_dir(self.dir)
            self._marker_removal_unsynced = False

    def append(self, records: bytes | bytearray | memoryview, batches: list[BatchHeader],
               now_ms: int) -> None:
        self._before_change()
        segment = self.active
        if segment.size and self._should_roll(segment, len(records), batches, now_ms):
            segment = self.roll()
        segment.append(records, batches)

    def _should_roll(self, segment: LogSegment, size: int, batches: list[BatchHeader],
                     now_ms: int) -> bool:
        max_timestamp = max(b.max_timestamp for b in batches)
        return (segment.size + size > self.config.segment_bytes
                or segment.time_waited_for_roll(now_ms, max_timestamp) > self.config.segment_ms
                or segment.index_full
                or batches[-1].last_offset - segment.base_offset > INT32_MAX)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op on an empty one)."""
        if self.active.size == 0:
            return self.active
        self.active.seal()
        return self._start_segment()

    def skip_to(self, offset: int) -> None:
        """Continue at ``offset`` above the log end in a new segment based there, leaving a
        gap of offsets (held by another storage engine: storage.spans)."""
        self._before_change()
        if self.active.size == 0:
            self._segments.pop().delete()
            self._bases.pop()
        else:
            self.active.seal()
        segment = self._new_segment(offset)
        self._segments.append(segment)
        self._bases.append(offset)

    def _start_segment(self) -> LogSegment:
        segment = self._new_segment(self.next_offset)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the ``count`` oldest segments; return the bytes freed."""
        if count >= len(self._segments):
            # Keep the log end offset: it lives on in a new, empty active segment. The old
            # one is not sealed (its index files written) first: it is about to go, and on
            # a full disk that write is what would fail.
            if self.active.size:
                self._start_segment()
            count = min(count, len(self._segments) - 1)
        victims = self._segments[:count]
        del self._segments[:count], self._bases[:count]
        for segment in victims:
            segment.delete()
        return sum(s.size for s in victims)

    def truncate_to(self, offset: int) -> None:
        """Drop the batch holding ``offset`` (at or above the first segment's base offset)
        and everything after it: the log end offset becomes a batch boundary <= ``offset``."""
        self._before_change()
        while self._segments[-1].base_offset > offset:
            self._segments.pop().delete()
            self._bases.pop()
        self.active.truncate_to(offset)
        if self.next_offset < self.recovery_point:
            self._set_recovery_point(self.next_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._before_change()
        for segment in self._segments:
            segment.delete()
        self._segments = [self._new_segment(offset)]
        self._bases = [offset]
        self._set_recovery_point(offset)

    def _set_recovery_point(self, offset: int, *, sync: bool = True) -> None:
        # Written at once, also when truncation lowers it: a later crash must recover the
        # data appended in place of what was truncated, even below the old recovery point.
        self.recovery_point = offset
        write_offset(self._recovery_point_file, offset, sync=sync)

    def flush(self) -> None:
        for segment in self._segments:
            segment.flush()
        # Not fsynced: a lower bound of what is durable whether or not the write survives
        # a crash (see the module docstring). Two fsyncs fewer per flush: the metadata log
        # flushes at every commit, and an fsync on a busy disk held the controller's event
        # loop long enough for its voters to elect another controller.
        self._advance_recovery_point(sync=False)

    def _advance_recovery_point(self, *, sync: bool = True) -> None:
        # A segment created since the last flush is only durable once the directory is.
        if self.active.base_offset >= self.recovery_point:
            fsync_dir(self.dir)
        if self.recovery_point != self.next_offset:
            self._set_recovery_point(self.next_offset, sync=sync)

    def close(self, *, sync: bool = True) -> None:
        """Without ``sync`` nothing is fsynced and the log is not marked clean: the caller
        syncs the file system, then records the log end in its data directory's clean
        shutdown (LogManager.close_all)."""
        for segment in self._segments:
            segment.close(sync=sync)
        if sync:
            # The recovery point and the marker once every segment is durable, as the next
            # open trusts them both.
            self._advance_recovery_point()
            write_atomically(os.path.join(self._dir, CLEAN_SHUTDOWN_FILE), "")

    def move_aside(self) -> Path | None:
        """Close the files and rename the directory for deletion (checkpoint.
        move_aside_for_deletion); the caller removes what this returns."""
        for segment in self._segments:
            segment.release()
        return move_aside_for_deletion(self.dir)

    # -- reading -------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None,
             min_one_batch: bool) -> bytes:
        """Whole batches from the one holding ``offset``, within a single segment (the next
        read continues in the next one, as in Kafka), below ``max_offset``."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for segment in self._segments[i:]:
            batch = segment.find(offset)
            if batch is not None:
                break
        else:
            return b""
        end = segment.size
        if max_offset is not None and max_offset < segment.next_offset:
            # A batch straddling max_offset is left out: its records are not all visible.
            limit = segment.find(max_offset)
            if limit is not None:
                end = limit.position
        if end <= batch.position:
            return b""
        if batch.size > max_bytes:
            return segment.read(batch.position, batch.size) if min_one_batch else b""
        if batch.position + max_bytes < end:
            end = segment.whole_batches_end(batch.position, batch.position + max_bytes)
        return segment.read(batch.position, end - batch.position)
