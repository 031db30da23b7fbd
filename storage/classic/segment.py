"""One segment of a classic partition log.

A segment is a ``%020d.log`` file of whole v2 record batches, named by the offset of its
first batch, plus two sparse indexes in Kafka's layouts:

* ``.index``: (4-byte offset relative to the segment base, 4-byte file position), one entry
  per ``index.interval.bytes`` of log, keyed by the base offset of the batch at that position;
* ``.timeindex``: (8-byte timestamp, 4-byte relative offset), added next to an offset-index
  entry when the segment's largest timestamp has grown, and once more when the segment is
  sealed, so that its last entry is the exact maximum.

The indexes live in memory as arrays, which gives O(log n) bisection followed by a scan of at
most about ``index.interval.bytes`` of batch headers, and are written to their files when
the segment is sealed or flushed. They are derived data: when read (on open, or on first
use for a lazy segment) they are trusted only if they agree with the log, otherwise the
segment is recovered from the batches themselves.

Data goes through plain ``pwrite``/``pread`` on one file descriptor, so it lives in the page
cache until ``flush`` fsyncs it. The descriptor may be closed while the segment is idle (the
process's budget of open segment files, ``open_files``) and is reopened on next use.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import struct
import time
from array import array
from collections import deque
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from protocol.records import (
    CRC_COVERED_FROM,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    first_matching_record,
)

from ..log import TimestampOffset
from .checkpoint import read_file
from .open_files import SEGMENT_FILES

NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
# The v2 batch header, parsed here without the rest of the batch (which
# protocol.records.read_header requires) so that lookups read headers only.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_LOOKUP_CHUNK = 16 << 10
# The last batches appended, kept with their file positions: a follower's fetch (and a
# consumer's at the log end) asks for one of them, found without reading headers back
# from the file (at 10,000 partitions, every produce request is followed by such a fetch).
_RECENT_BATCHES = 4
_RECOVERY_CHUNK = 1 << 20


def log_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """``suffix``: ``.cleaned`` or ``.swap`` for a segment the log cleaner is writing or
    swapping in (Kafka's file suffixes), else empty."""
    return directory / f"{base_offset:020d}.log{suffix}"


def index_files(log_path: Path) -> tuple[Path, Path]:
    stem, _, suffix = log_path.name.partition(".log")
    return (log_path.with_name(f"{stem}.index{suffix}"),
            log_path.with_name(f"{stem}.timeindex{suffix}"))


# What a segment knows from its indexes and batches. A segment opened with ``lazy`` (a
# sealed segment of a log that needs no recovery) sets none of it until one of them is
# first used (Kafka's LazyIndex): a broker opens thousands of logs at start-up, and most of
# their older segments are not read before the next shutdown.
_INDEX_STATE = frozenset({
    "next_offset", "max_timestamp", "_offset_of_max_timestamp", "_index_offsets",
    "_index_positions", "_time_stamps", "_time_offsets", "_persisted_index",
    "_persisted_time_index", "_index_files_current", "_index_files_synced"})

log = logging.getLogger(__name__)


class LogSegment:
    def __init__(self, directory: Path | str, base_offset: int, *, index_interval_bytes: int,
                 index_max_bytes: int, suffix: str = "", lazy: bool = False,
                 next_offset: int | None = None) -> None:
        """``lazy``: the segment's index files are trusted and read on first use (see
        _INDEX_STATE); otherwise the caller ``load``s or ``recover``s it, or it is new.
        ``next_offset``: of a lazy segment, known without its indexes (a clean shutdown
        recorded it), so asking for it reads nothing."""
        self.base_offset = base_offset
        # Strings, not Paths: a broker opens thousands of segments at start-up, and pathlib
        # was a quarter of the cost of opening one.
        self._dir = os.fspath(directory)
        self._set_paths(suffix)
        self._index_interval = index_interval_bytes
        # At least one entry, or a tiny segment.index.bytes would roll on every append.
        self._max_index_entries = max(1, index_max_bytes // _OFFSET_ENTRY.size)
        self._max_time_entries = max(1, index_max_bytes // _TIME_ENTRY.size)
        # The file is opened through the process's budget of open segment files
        # (open_files), which may close it while the segment is idle; ``_file`` reopens it.
        # A segment with a suffix stays out of the budget: the cleaner's thread writes it.
        self._fd = -1
        self._closed = False
        self._in_budget = not suffix
        if lazy:  # sealed, and maybe not read before the next shutdown: opened on first use
            self.size = os.stat(self._path).st_size
        else:
            self.size = os.fstat(self._open_file(os.O_CREAT)).st_size
        self._first_batch_timestamp: int | None = None
        # (header, file position) of the last batches appended (_RECENT_BATCHES).
        self._recent: deque[tuple[BatchHeader, int]] = deque(maxlen=_RECENT_BATCHES)
        self._created_ms = time.time_ns() // 1_000_000
        self._unflushed = False
        if not lazy:
            self._reset_index_state()
        elif next_offset is not None:
            self.next_offset = next_offset

    def _reset_index_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        # Base offset of the first batch that reached max_timestamp.
        self._offset_of_max_timestamp = self.base_offset
        self._index_offsets = array("i")
        self._index_positions = array("i")
        self._time_stamps = array("q")
        self._time_offsets = array("i")
        # Entries already in the index files; later ones are appended on the next write.
        self._persisted_index = 0
        self._persisted_time_index = 0
        self._index_files_current = False
        # And fsynced since: a flush after appends that added no index entry (most of the
        # metadata log's, which flushes at every commit) fsyncs the log file alone.
        self._index_files_synced = False

    def __getattr__(self, name: str):
        # Called only for attributes not set: the index state of a lazy segment.
        if name not in _INDEX_STATE:
            raise AttributeError(name)
        self._reset_index_state()
        if not self.load():
            truncated = self.recover()
            if truncated:
                # Only the segments from the recovery point on may have a torn tail; this
                # one was below it (its offsets now end early, the next segment's follow).
                log.error("%s: %d bytes of a flushed segment failed their checks and were cut",
                          self._path, truncated)
        return object.__getattribute__(self, name)

    # -- the file ----------------------------------------------------------------------

    def _file(self) -> int:
        """The file descriptor, reopened if the budget closed it while idle."""
        fd = self._fd
        if fd < 0:
            return self._open_file()
        if self._in_budget:
            SEGMENT_FILES.used(self)
        return fd

    def _open_file(self, create: int = 0) -> int:
        if self._closed:
            raise OSError(errno.EBADF, "segment closed", self._path)
        self._fd = fd = os.open(self._path, os.O_RDWR | create, 0o644)
        if self._in_budget:
            SEGMENT_FILES.opened(self)
        return fd

    def close_idle_file(self) -> None:
        # Written data stays in the page cache: a later fsync through a new descriptor
        # writes it back all the same (fsync acts on the file, not the descriptor).
        os.close(self._fd)
        # Never keep a number the OS may hand out again; later I/O reopens the file.
        self._fd = -1

    def _close_file(self) -> None:
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._in_budget:
            SEGMENT_FILES.closed(self)

    def _stat(self) -> os.stat_result:
        return os.fstat(self._fd) if self._fd >= 0 else os.stat(self._path)

    @property
    def indexes_loaded(self) -> bool:
        return "_index_offsets" in self.__dict__

    def _set_paths(self, suffix: str) -> None:
        stem = os.path.join(self._dir, f"{self.base_offset:020d}")
        self._path = f"{stem}.log{suffix}"
        self._index_path = f"{stem}.index{suffix}"
        self._time_index_path = f"{stem}.timeindex{suffix}"

    @property
    def path(self) -> Path:
        """The log file."""
        return Path(self._path)

    # -- opening -------------------------------------------------------------------------

    def load(self) -> bool:
        """Read the index files; False when they are missing or disagree with the log, in
        which case the caller must ``recover`` the segment."""
        index = read_file(self._index_path)
        time_index = read_file(self._time_index_path) if index is not None else None
        if time_index is None:
            return False
        if len(index) % _OFFSET_ENTRY.size or len(time_index) % _TIME_ENTRY.size:
            return False
        if index:
            offsets, positions = zip(*_OFFSET_ENTRY.iter_unpack(index))
            self._index_offsets, self._index_positions = array("i", offsets), array("i", positions)
        if time_index:
            stamps, offsets = zip(*_TIME_ENTRY.iter_unpack(time_index))
            self._time_stamps, self._time_offsets = array("q", stamps), array("i", offsets)
            self.max_timestamp = self._time_stamps[-1]
            self._offset_of_max_timestamp = self.base_offset + self._time_offsets[-1]
        self._persisted_index = len(self._index_offsets)
        self._persisted_time_index = len(self._time_stamps)
        self._index_files_current = True
        start = self._last_indexed_position()
        if self._index_positions:
            first = next(self._scan(start), None)
            if first is None or first.base_offset != self.base_offset + self._index_offsets[-1]:
                return False
        if self._scan_tail(start) != self.size:
            return False
        return not self._time_offsets or \
            self.base_offset + self._time_offsets[-1] < self.next_offset

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Rebuild the indexes from the batches that pass their CRC check, cut the log after
        the last of them, and return the number of bytes cut (a torn or corrupt tail)."""
        self.size = self._stat().st_size
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._first_batch_timestamp = None
        self._recent.clear()
        for entries in (self._index_offsets, self._index_positions,
                        self._time_stamps, self._time_offsets):
            del entries[:]
        self._persisted_index = self._persisted_time_index = 0
        valid = 0
        for batch in self._scan(0, _RECOVERY_CHUNK):
            if batch.base_offset < self.next_offset \
                    or batch.last_offset - self.base_offset > INT32_MAX:
                break
            data = os.pread(self._file(), batch.size, batch.position)
            if crc32c(memoryview(data)[CRC_COVERED_FROM:]) != batch.crc:
                break
            self._add_batch(batch, batch.position)
            if on_batch is not None:
                on_batch(batch)
            valid = batch.position + batch.size
        truncated = self.size - valid
        if truncated:
            os.ftruncate(self._file(), valid)
            self.size = valid
        self._index_files_current = False
        self._unflushed = True
        return truncated

    # -- writing -------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, batches: list[BatchHeader]) -> None:
        """Write whole batches; ``batches`` are their headers, positioned within ``records``."""
        position = self.size
        view = memoryview(records)
        try:
            written = os.pwrite(self._file(), view, position)
            while written < len(view):
                written += os.pwrite(self._file(), view[written:], position + written)
        except OSError:
            # A partial write (a full disk) must neither keep the space nor lie past the end.
            with contextlib.suppress(OSError):
                os.ftruncate(self._file(), position)
            raise
        for batch in batches:
            self._add_batch(batch, position + batch.position)
            # Headers are final once written: stamping them (offsets, epoch) comes before.
            self._recent.append((batch, position + batch.position))
        self.size += len(view)
        self._unflushed = True

    def _add_batch(self, batch: BatchHeader, position: int) -> None:
        if position == 0:
            self._first_batch_timestamp = batch.max_timestamp
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self._offset_of_max_timestamp = batch.base_offset
        if position - self._last_indexed_position() > self._index_interval and not self.index_full:
            self._index_offsets.append(batch.base_offset - self.base_offset)
            self._index_positions.append(position)
            self._index_files_current = False
            self._maybe_add_time_entry()
        self.next_offset = batch.next_offset

    def _maybe_add_time_entry(self) -> None:
        if self.max_timestamp > (self._time_stamps[-1] if self._time_stamps else NO_TIMESTAMP):
            self._time_stamps.append(self.max_timestamp)
            self._time_offsets.append(self._offset_of_max_timestamp - self.base_offset)
            self._index_files_current = False

    def _last_indexed_position(self) -> int:
        return self._index_positions[-1] if self._index_positions else 0

    @property
    def index_full(self) -> bool:
        return len(self._index_offsets) >= self._max_index_entries \
            or len(self._time_stamps) >= self._max_time_entries

    def time_waited_for_roll(self, now_ms: int, new_max_timestamp: int) -> int:
        """Kafka's segment.ms clock: the age of the segment measured in record time (from its
        first batch's max timestamp), or in wall time when records carry no timestamp."""
        first = self.first_batch_timestamp() if self.size else self._first_batch_timestamp
        if first is not None and first >= 0:
            return new_max_timestamp - first
        return now_ms - self._created_ms

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and every later one; return the bytes dropped."""
        batch = self.find(offset)
        if batch is None:
            return 0
        dropped = self.size - batch.position
        self._recent.clear()
        os.ftruncate(self._file(), batch.position)
        self.size = batch.position
        keep = bisect_left(self._index_positions, batch.position)
        del self._index_offsets[keep:], self._index_positions[keep:]
        keep = bisect_left(self._time_offsets, batch.base_offset - self.base_offset)
        del self._time_stamps[keep:], self._time_offsets[keep:]
        self._persisted_index = min(self._persisted_index, len(self._index_offsets))
        self._persisted_time_index = min(self._persisted_time_index, len(self._time_stamps))
        # Surviving time-index entries are exact claims about surviving batches; the batches
        # after the last offset-index entry are rescanned for the rest.
        if self._time_stamps:
            self.max_timestamp = self._time_stamps[-1]
            self._offset_of_max_timestamp = self.base_offset + self._time_offsets[-1]
        else:
            self.max_timestamp = NO_TIMESTAMP
            self._offset_of_max_timestamp = self.base_offset
        if batch.position == 0:
            self._first_batch_timestamp = None
        self.next_offset = self.base_offset
        self._scan_tail(self._last_indexed_position())
        self._index_files_current = False
        self._unflushed = True
        return dropped

    def seal(self) -> None:
        """Make the time index end with the exact maximum and write both index files (the
        segment stops being the active one, or the log is closing)."""
        self._maybe_add_time_entry()
        self._write_indexes(fsync=False)

    def flush(self) -> None:
        if self._unflushed:
            self._write_indexes(fsync=True)
            os.fsync(self._file())
            self._unflushed = False

    def _write_indexes(self, *, fsync: bool) -> None:
        if self._index_files_current and (self._index_files_synced or not fsync):
            return
        self._persisted_index = _write_entries(
            self._index_path, _OFFSET_ENTRY, self._index_offsets, self._index_positions,
            self._persisted_index, fsync)
        self._persisted_time_index = _write_entries(
            self._time_index_path, _TIME_ENTRY, self._time_stamps, self._time_offsets,
            self._persisted_time_index, fsync)
        self._index_files_current = True
        self._index_files_synced = fsync

    def close(self, *, sync: bool = True) -> None:
        """Without ``sync`` the caller makes the segment durable (sync_file_system)."""
        if self._closed:
            return
        if self.size and self.indexes_loaded:
            # An empty segment has nothing to index (opened without index files, it is
            # recovered at no cost): thousands of new partitions close without writing any.
            # Nor has a lazy segment never used: its index files are as they were.
            self.seal()
        if sync:
            self.flush()
        self._close_file()

    def rename(self, suffix: str) -> None:
        """Give the segment's files ``suffix`` (the cleaner's .cleaned -> .swap -> none); an
        index file not written yet is skipped."""
        old_paths = (self._path, self._index_path, self._time_index_path)
        self._set_paths(suffix)
        for old, new in zip(old_paths, (self._path, self._index_path, self._time_index_path)):
            with contextlib.suppress(FileNotFoundError):
                os.rename(old, new)
        if not suffix and not self._in_budget:  # swapped in: the cleaner is done with it
            self._in_budget = True
            if self._fd >= 0:
                SEGMENT_FILES.opened(self)

    def set_modified_ms(self, ms: int) -> None:
        """Stamp the log file's mtime (the cleaner's record of when it cleaned the segment)."""
        os.utime(self._file(), ns=(ms * 1_000_000, ms * 1_000_000))

    @property
    def modified_ms(self) -> int:
        return self._stat().st_mtime_ns // 1_000_000

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the segment's first batch (Kafka's getFirstBatchTimestamp,
        what max.compaction.lag.ms is measured from); NO_TIMESTAMP when empty."""
        if self._first_batch_timestamp is None:
            first = next(self._scan(0), None)
            self._first_batch_timestamp = first.max_timestamp if first else NO_TIMESTAMP
        return self._first_batch_timestamp

    def delete(self) -> None:
        self.release()
        for path in (self._path, self._index_path, self._time_index_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def release(self) -> None:
        """Close the file without writing anything (its directory is being deleted)."""
        self._close_file()

    # -- reading -------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._file(), size, position)

    def find(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset``: the batch holding it, if any."""
        if self._recent and self._recent[0][0].base_offset <= offset:
            for batch, position in self._recent:
                if batch.last_offset >= offset:
                    return batch.at(position)
            return None
        for batch in self._scan(self._index_position(offset)):
            if batch.last_offset >= offset:
                return batch
        return None

    def whole_batches_end(self, start: int, limit: int) -> int:
        """Where the last batch that ends by ``limit`` ends, counting from the batch at
        ``start``; found from the closest indexed batch, so at most one index interval of
        headers is read."""
        i = bisect_right(self._index_positions, limit) - 1
        position = max(self._index_positions[i] if i >= 0 else 0, start)
        for batch in self._scan(position):
            if batch.position + batch.size > limit:
                break
            position = batch.position + batch.size
        return position

    def _index_position(self, offset: int) -> int:
        # Entries are keyed by batch base offsets, so the batch holding `offset` starts at
        # or after the position of the last entry not above it.
        i = bisect_right(self._index_offsets, offset - self.base_offset) - 1
        return self._index_positions[i] if i >= 0 else 0

    def find_by_timestamp(self, timestamp: int, min_offset: int) -> TimestampOffset | None:
        """The first record at or above ``min_offset`` whose timestamp is >= ``timestamp``."""
        # Every batch before a time-index entry's offset has a smaller max timestamp than
        # the entry, so the scan may start at the last entry not above `timestamp`.
        i = bisect_right(self._time_stamps, timestamp) - 1
        start = self.base_offset + self._time_offsets[i] if i >= 0 else self.base_offset
        for batch in self._scan(self._index_position(max(start, min_offset))):
            if batch.max_timestamp >= timestamp and batch.last_offset >= min_offset:
                return self._first_record(
                    batch, lambda offset, ts: ts >= timestamp and offset >= min_offset,
                    max(batch.base_offset, min_offset))
        return None

    def max_timestamp_record(self) -> TimestampOffset | None:
        if self.max_timestamp == NO_TIMESTAMP:
            return None
        batch = self.find(self._offset_of_max_timestamp)
        if batch is None:
            return None
        # If the records cannot be decoded, answer with the batch's last offset, as Kafka's
        # shallow offset-of-max-timestamp did.
        fallback = batch.base_offset if batch.is_log_append_time else batch.last_offset
        return self._first_record(batch, lambda _, ts: ts == batch.max_timestamp, fallback)

    def _first_record(self, batch: BatchHeader, match: Callable[[int, int], bool],
                      fallback_offset: int) -> TimestampOffset:
        epoch = batch.partition_leader_epoch if batch.partition_leader_epoch >= 0 else -1
        found = first_matching_record(self.read(batch.position, batch.size), batch, match)
        if found is None:
            return TimestampOffset(batch.max_timestamp, fallback_offset, epoch)
        return TimestampOffset(found[1], found[0], epoch)

    @property
    def largest_timestamp(self) -> int:
        """What time retention compares: the max record timestamp, else the file's mtime."""
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        return self.modified_ms

    def _scan(self, position: int, chunk: int = _LOOKUP_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the batches from file position ``position`` on, stopping at the first
        bytes that cannot start a whole batch (the end, or a torn or corrupt tail)."""
        end = self.size
        buf = b""
        buf_start = position
        while position + HEADER_SIZE <= end:
            at = position - buf_start
            if at + HEADER_SIZE > len(buf):
                buf = os.pread(self._file(), min(chunk, end - position), position)
                buf_start, at = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            base_offset, length, epoch, magic, *rest = _HEADER.unpack_from(buf, at)
            size = length + LOG_OVERHEAD
            batch = BatchHeader(position, size, base_offset, epoch, *rest)
            if magic != 2 or size < HEADER_SIZE or position + size > end \
                    or batch.last_offset_delta < 0:
                return
            yield batch
            position += size

    def _scan_tail(self, position: int) -> int:
        """Account for the batches from ``position`` on (next offset, max timestamp) and
        return where the last whole one ends."""
        end = position
        for batch in self._scan(position):
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp = batch.max_timestamp
                self._offset_of_max_timestamp = batch.base_offset
            self.next_offset = batch.next_offset
            end = batch.position + batch.size
        return end

    def __repr__(self) -> str:
        return (f"LogSegment({os.path.basename(self._path)}, size={self.size}, "
                f"next_offset={self.next_offset})")


def _write_entries(path: str, entry: struct.Struct, first: array, second: array,
                   persisted: int, fsync: bool) -> int:
    """Bring an index file in line with its in-memory entries; return how many it holds."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if persisted < len(first):
            data = b"".join(map(entry.pack, first[persisted:], second[persisted:]))
            os.pwrite(fd, data, persisted * entry.size)
        # Truncation may have removed entries the file still holds.
        os.ftruncate(fd, len(first) * entry.size)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return len(first)
