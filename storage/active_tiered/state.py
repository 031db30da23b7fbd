"""What the active-tiered engine keeps about one partition on this broker.

``TieredPartitionState`` is the one place for it: the log, the uploader and the metadata
schemes read and change it through its methods. It holds

- the WAL refs this broker can hand to followers (``refs``) and, with the ``fetch`` scheme,
  the file that keeps them across restarts;
- with the ``topic`` scheme, the refs consumed from ``__remote_wal_log_metadata`` that this
  broker, as follower, has yet to download (``announced``);
- while this broker leads: the upload cursor (``upload``) and where each follower is
  (``followers``).

The replica layer says when this broker leads or follows (``PartitionLog.
on_leadership_change``); ``became_leader`` and ``became_follower`` are where that changes
the state, nothing infers it from appends.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from ..classic import ClassicLog
from .metadata import WalIndex, WalMetadataFile, WalRef

# A metadata file is rewritten once it has this many times the lines its refs need.
_COMPACT_RATIO = 2
_COMPACT_MIN_LINES = 64


@dataclass
class UploadCursor:
    """Upload progress of a partition this broker leads, in one leader epoch."""

    leader_epoch: int
    # The log end offset when this broker became leader: followers below it get records.
    first_tiered_offset: int
    # Next offset to upload: everything below it (and at or above first_tiered_offset) is
    # in an uploaded object.
    cursor: int
    # When the oldest bytes not yet uploaded were appended (None: nothing waiting).
    waiting_since: float | None = None


class FollowerPositions:
    """Leader side: what each follower fetched, and how long uploads take to reach them."""

    def __init__(self) -> None:
        # Follower -> the offset it last fetched from (it holds everything below).
        self._fetched: dict[int, int] = {}
        # Follower -> the offset it was last given pointers for. Asking again for that
        # offset means it could not use them (download failed, metadata late): records.
        self._pointed: dict[int, int] = {}
        # (last offset, when handed out) of uploads not yet held by every in-sync follower.
        self._unreplicated: deque[tuple[int, float]] = deque(maxlen=10_000)

    def fetched(self, replica_id: int, offset: int, in_sync: list[int]) -> list[float]:
        """``replica_id`` fetched from ``offset``; the seconds from hand-out until every
        in-sync follower held them, of the uploads that are now so held."""
        self._fetched[replica_id] = offset
        held = min((self._fetched.get(r, -1) for r in in_sync), default=None)
        durations = []
        while self._unreplicated and held is not None and held > self._unreplicated[0][0]:
            _, handed_at = self._unreplicated.popleft()
            durations.append(time.monotonic() - handed_at)
        return durations

    def point(self, replica_id: int, offset: int) -> bool:
        """Should ``replica_id``, fetching from ``offset``, get pointers? Not twice in a row
        for the same offset: then it could not use them and gets records."""
        if self._pointed.get(replica_id) == offset:
            return False
        self._pointed[replica_id] = offset
        return True

    def handed_out(self, last_offset: int, in_sync: list[int]) -> None:
        """An upload up to ``last_offset`` was made available to followers."""
        if in_sync:
            self._unreplicated.append((last_offset, time.monotonic()))

    def hold(self, offset: int, in_sync: list[int]) -> bool:
        """Has every in-sync follower fetched past ``offset``?"""
        return all(self._fetched.get(r, -1) > offset for r in in_sync)


class TieredPartitionState:
    def __init__(self, log: ClassicLog) -> None:
        self.log = log
        # Refs this broker can hand to followers: what it uploaded as leader (and, with the
        # fetch scheme, what it learnt as follower or kept in its file).
        self.refs = WalIndex()
        self.announced = WalIndex()
        self.upload: UploadCursor | None = None
        self.followers = FollowerPositions()
        self._metadata_file: WalMetadataFile | None = None

    def __repr__(self) -> str:
        return f"TieredPartitionState({self.log!r}, leading={self.upload is not None})"

    @property
    def key(self) -> tuple[str, int]:
        return self.log.topic, self.log.partition

    # -- leadership ----------------------------------------------------------------------

    def became_leader(self, leader_epoch: int) -> None:
        """Uploads start at the log end offset; nothing learnt as follower applies."""
        end = self.log.log_end_offset
        self.upload = UploadCursor(leader_epoch, end, end)
        self.followers = FollowerPositions()
        self.announced = WalIndex()

    def restart_upload(self) -> None:
        """What is not uploaded yet cannot be read (retention deleted it, a disk error):
        uploads go on from the log end, and followers below it get records."""
        end = self.log.log_end_offset
        self.upload = UploadCursor(self.upload.leader_epoch, end, end)

    def became_follower(self) -> None:
        """Nothing is uploaded from here; follower positions are the new leader's."""
        self.upload = None
        self.followers = FollowerPositions()

    def truncated(self, offset: int) -> None:
        """The log was cut at ``offset`` (as follower): refs above it name other data."""
        self.refs.drop_from(offset)

    # -- the fetch scheme's file ---------------------------------------------------------

    def keep_refs_in(self, metadata_file: WalMetadataFile) -> None:
        """Also keep refs in ``metadata_file``, loading what it holds that is not expired."""
        self._metadata_file = metadata_file
        for ref in metadata_file.load(self.log.config.wal_retention_ms):
            self.refs.add(ref)

    def persist(self, refs: list[WalRef]) -> int:
        """Append ``refs`` to the metadata file (if kept); return the bytes written."""
        if self._metadata_file is None:
            return 0
        written = self._metadata_file.append(refs)
        if self._metadata_file.lines > _COMPACT_RATIO * max(len(self.refs), _COMPACT_MIN_LINES):
            # Compact: keep what the index still holds (retention and deletions drop refs).
            self._metadata_file.rewrite(self.refs.refs())
        return written
