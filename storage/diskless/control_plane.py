"""What the diskless engine needs from the batch coordinator, as one small interface
(Inkless's ControlPlane): commits go to the writable coordinator, queries are answered
from a materialised copy of its state."""

from __future__ import annotations

from typing import Protocol

from coordinator.batch_state import BatchCoordinate, LogInfo

__all__ = ["BatchCoordinate", "ControlPlane", "LogInfo"]


class ControlPlane(Protocol):
    async def commit(self, record: dict, timeout_s: float) -> dict:
        """Append a state change to the coordinator's log; the result of applying it."""

    def log_info(self, topic_id: str, partition: int) -> LogInfo: ...

    def find_batches(self, topic_id: str, partition: int, offset: int,
                     max_bytes: int) -> list[BatchCoordinate]: ...

    def offset_for_timestamp(self, topic_id: str, partition: int,
                             timestamp_ms: int) -> BatchCoordinate | None: ...

    def max_timestamp_batch(self, topic_id: str, partition: int) -> BatchCoordinate | None: ...
