"""Free space in the data directory, and the part of it that data may not take.

A full disk must not take the node down with it. The writes that free space (the log-start
checkpoint of DeleteRecords and retention) and those that keep the node in its cluster (the
metadata log, consumer offsets, producer-id blocks, checkpoints and index files) need a
little space too. Kafka gives the metadata log a directory of its own (``metadata.log.dir``)
and takes a log directory whose write failed offline; kipper has one data directory, and a
full disk is not a broken one (its partitions can still be read and emptied), so instead it
keeps space for them: an append of data (a topic not named ``__*``, as leader or follower)
is refused with KAFKA_STORAGE_ERROR while it would leave less than the reserve free, as
Redpanda's ``storage_min_free_bytes`` and Elasticsearch's flood-stage watermark do. Reads,
DeleteRecords, retention and topic deletion go on.

Appends resume once twice the reserve is free, as Elasticsearch releases its flood-stage
block only below the high watermark: without that margin a full disk would refuse a large
batch and take a small one, and producers would see it fill and empty by turns. A node that
starts with less than that free starts refusing, as it would have been before it stopped.

Checked with one ``statvfs`` per append (about a microsecond), so space freed or taken by
anything else on the file system counts at once.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

from .log import KafkaStorageError

log = logging.getLogger(__name__)

# log_dir_reserved_bytes = -1: this share of the file system, at most AUTO_RESERVE_MAX_BYTES.
AUTO_RESERVE_FRACTION = 0.05
AUTO_RESERVE_MAX_BYTES = 1 << 30
# An ENOSPC that the reserve did not prevent (another process filled the disk, reserve 0) is
# logged at most this often, with the count of those not logged, rather than per request.
_ENOSPC_LOG_INTERVAL_S = 30.0
# An append far from the reserve is checked against the last statvfs rather than a new one
# (one per append was 2-3 % of a broker's CPU at 10,000 one-partition produce requests a
# second), if that is this recent and the appends since have used at most this share of
# the headroom it showed: other writers (index files, other processes) use some meanwhile.
FREE_SPACE_REUSE_S = 0.1
FREE_SPACE_REUSE_SHARE = 4
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(KafkaStorageError):
    """The data directory has no room for this write (or only the reserve, for data).
    Logged by this module when it starts, not by whoever answers the request."""


class _NoSpaceReport:
    """Logs an unprevented ENOSPC once per interval, counting the rest."""

    def __init__(self) -> None:
        self._last = float("-inf")
        self._unlogged = 0

    def __call__(self, what: str, error: OSError) -> None:
        now = time.monotonic()
        if now - self._last < _ENOSPC_LOG_INTERVAL_S:
            self._unlogged += 1
            return
        log.error("no space left: cannot %s: %s (%d more since the last report)",
                  what, error, self._unlogged)
        self._last, self._unlogged = now, 0


_report_no_space = _NoSpaceReport()


def storage_error(what: str, error: OSError) -> KafkaStorageError:
    """The storage error a failed write or read becomes (``what``: "append to ...")."""
    if error.errno in _NO_SPACE:
        _report_no_space(what, error)
        return DiskFull(f"cannot {what}: {error}")
    return KafkaStorageError(f"cannot {what}: {error}")


def log_storage_error(logger: logging.Logger, what: str, error: KafkaStorageError) -> None:
    """Log a storage error a request met, unless it is DiskFull: this module reports those
    once, where a request would log each of them (a producer retries many times a second)."""
    if not isinstance(error, DiskFull):
        logger.error("%s: %s", what, error)


class storage_io:
    """Turn an OSError inside into the storage error a handler answers with.

    A class rather than a generator: it wraps every append and read of a log, and a
    generator's context manager cost several times as much per use."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, error_type, error, traceback) -> bool:
        if isinstance(error, OSError):
            raise storage_error(self.what, error) from error
        return False


class DiskSpace:
    """The free space of one data directory's file system, and the reserve data leaves."""

    def __init__(self, directory: Path, reserved_bytes: int = -1) -> None:
        """``reserved_bytes``: -1 picks AUTO_RESERVE_FRACTION of the file system, at most
        AUTO_RESERVE_MAX_BYTES; 0 reserves nothing."""
        self.directory = directory
        if reserved_bytes < 0:
            stats = os.statvfs(directory)
            reserved_bytes = min(int(stats.f_blocks * stats.f_frsize * AUTO_RESERVE_FRACTION),
                                 AUTO_RESERVE_MAX_BYTES)
        self.reserved_bytes = reserved_bytes
        self._refusing = False
        # The last statvfs of check_data_append: when, the headroom above the reserve it
        # showed, and the bytes appended since.
        self._checked_at = float("-inf")
        self._headroom = 0
        self._appended_since_check = 0
        free = self.free_bytes()
        if reserved_bytes and free < self.resume_bytes:
            self._set_refusing(True, free)

    @property
    def resume_bytes(self) -> int:
        """Free space at which refused appends of data are accepted again."""
        return 2 * self.reserved_bytes

    def total_bytes(self) -> int:
        stats = os.statvfs(self.directory)
        return stats.f_blocks * stats.f_frsize

    def free_bytes(self) -> int:
        stats = os.statvfs(self.directory)
        return stats.f_bavail * stats.f_frsize

    def is_full(self) -> bool:
        """Whether appends of data are refused now; space freed since the last append
        (by DeleteRecords, retention or anything else) counts."""
        if self._refusing and self.reserved_bytes:
            free = self.free_bytes()
            if free >= self.resume_bytes:
                self._set_refusing(False, free)
        return self._refusing

    def check_data_append(self, size: int, what: str) -> None:
        """Raise DiskFull if appending ``size`` bytes of data would leave less than the
        reserve free (or, once refusing, less than ``resume_bytes``). The change from
        accepting to refusing, and back, is logged once."""
        if self.reserved_bytes == 0:
            return
        now = time.monotonic()
        appended = self._appended_since_check + size
        if (not self._refusing and now - self._checked_at < FREE_SPACE_REUSE_S
                and appended <= self._headroom // FREE_SPACE_REUSE_SHARE):
            self._appended_since_check = appended
            return
        free = self.free_bytes()
        threshold = self.resume_bytes if self._refusing else self.reserved_bytes
        refuse = free - size < threshold
        self._checked_at, self._headroom = now, free - threshold
        self._appended_since_check = size
        if refuse != self._refusing:
            self._set_refusing(refuse, free)
        if refuse:
            raise DiskFull(f"cannot append {size} bytes to {what}: {free} bytes free in "
                           f"{self.directory}, {self.reserved_bytes} kept for metadata")

    def _set_refusing(self, refuse: bool, free: int) -> None:
        self._refusing = refuse
        if refuse:
            log.error("%s: %d bytes free, %d kept for metadata and checkpoints "
                      "(log_dir_reserved_bytes): appends of data are refused with "
                      "KAFKA_STORAGE_ERROR until space is freed (DeleteRecords, retention, "
                      "topic deletion) to %d bytes; reads go on", self.directory, free,
                      self.reserved_bytes, self.resume_bytes)
        else:
            log.warning("%s: %d bytes free again: appends of data accepted",
                        self.directory, free)
