"""The diskless engine (KIP-1150/1163): leaderless produce into shared WAL objects whose
batches get their offsets from the batch coordinator (KIP-1164)."""

from .control_plane import BatchCoordinate, ControlPlane, LogInfo
from .log import DisklessLog
from .read_cache import ReadCache
from .wal_writer import WalWriter

__all__ = ["BatchCoordinate", "ControlPlane", "DisklessLog", "LogInfo", "ReadCache", "WalWriter"]
