"""The leader epoch cache: the start offset of every leader epoch in the log.

It answers OffsetForLeaderEpoch, which followers use to find where their log diverged from
the leader's. Semantics follow Kafka's ``LeaderEpochFileCache``; the file
``leader-epoch-checkpoint`` uses Kafka's checkpoint layout (version, entry count, then one
``epoch start_offset`` line per entry) and is rewritten on every change.

The first batch of a new epoch in each of thousands of partitions would cost a file
written and two fsyncs on the produce path, so (further than Kafka's KAFKA-15046, which
only dropped the fsync) an appended epoch is written by ``save``, which the log calls before
it moves its recovery point and when it closes; truncations are written at once, unsynced.
What a crash loses above the recovery point is rebuilt from the batches' epochs by recovery
(``assign`` drops what disagrees with them, and opening cuts entries beyond the log end).
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path
from typing import NamedTuple

from ..log import EpochEndOffset, KafkaStorageError
from .checkpoint import read_small_file, write_atomically

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: Path | str, *, read: bool = True) -> None:
        """``read``: False when the caller knows there is no file yet."""
        self.path = path
        # Strictly increasing in both epoch and start offset.
        self._entries: list[EpochEntry] = self._read() if read else []
        self._unwritten = False  # appended epochs not in the file yet
        self._unsynced = False  # written, not fsynced

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; called for every appended batch,
        so the common case (same epoch, later offset) must stay a cheap no-op."""
        if self._entries:
            last = self._entries[-1]
            if epoch == last.epoch and start_offset >= last.start_offset:
                return
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        # Entries that would break monotonicity come from a log that was since truncated.
        while self._entries and (self._entries[-1].epoch >= epoch
                                 or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._unwritten = True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's ``endOffsetFor``: the latest epoch ends at the log end offset; an older one
        ends where the next higher epoch starts, reported with the largest known epoch not
        above it (or the requested epoch when it is below every known one); an epoch above
        every known one, or an empty cache, gives (-1, -1)."""
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        if epoch == self._entries[-1].epoch:
            return EpochEndOffset(epoch, log_end_offset)
        higher = bisect_right(self._entries, epoch, key=lambda e: e.epoch)
        if higher == len(self._entries):
            return EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return EpochEndOffset(epoch, end_offset)
        return EpochEndOffset(self._entries[higher - 1].epoch, end_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs starting at or after ``end_offset`` (the log was truncated)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget the epochs that end before ``start_offset`` (the log start moved up); the
        epoch holding it now starts there."""
        covered = bisect_right(self._entries, start_offset, key=lambda e: e.start_offset)
        if covered == 0:
            return
        first = EpochEntry(self._entries[covered - 1].epoch, start_offset)
        if covered == 1 and self._entries[0] == first:
            return
        self._entries[:covered] = [first]
        self._write()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._write()

    def _read(self) -> list[EpochEntry]:
        try:
            text = read_small_file(self.path)
            if text is None:
                return []
            lines = text.splitlines()
            version, count = int(lines[0]), int(lines[1])
            entries = [EpochEntry(*map(int, line.split())) for line in lines[2:2 + count]]
        except (IndexError, ValueError, TypeError):
            raise KafkaStorageError(f"malformed leader epoch checkpoint {self.path}") from None
        if version != _VERSION or len(entries) != count:
            raise KafkaStorageError(
                f"leader epoch checkpoint {self.path}: version {version}, "
                f"{len(entries)} of {count} entries")
        return entries

    def save(self, *, sync: bool) -> None:
        """Write the entries if the file lacks some; with ``sync``, durably."""
        if self._unwritten or (sync and self._unsynced):
            self._write(sync=sync)

    def _write(self, *, sync: bool = False) -> None:
        lines = [str(_VERSION), str(len(self._entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in self._entries]
        write_atomically(self.path, "\n".join(lines) + "\n", sync=sync)
        self._unwritten, self._unsynced = False, not sync
