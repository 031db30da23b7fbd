"""What the shared engine keeps about one partition on this broker: whether it leads it and
in which epoch, the committed end (what its stream in the metadata holds), and the
*generation*, which a reset bumps so that records appended before it are never committed
after it."""

from __future__ import annotations

import asyncio
import enum
from typing import TYPE_CHECKING

from ..log import KafkaStorageError

if TYPE_CHECKING:
    from .log import SharedLog


class NotCommitted(KafkaStorageError):
    """The records were not committed to the stream (retriable for every Kafka client);
    ``deposed``: because this broker no longer leads the partition."""

    def __init__(self, message: str, deposed: bool) -> None:
        super().__init__(message)
        self.deposed = deposed


class Reset(enum.Enum):
    """How a partition recovers from records that will not be committed."""

    # Known not committed (the WAL object was not uploaded): cut the local log back to the
    # committed end.
    TRUNCATE = "truncate"
    # The controller says another broker leads: the metadata will say so too.
    DEPOSED = "deposed"
    # Whether they were committed is unknown here (a commit got no answer, or the stream
    # does not end where this broker thought): rebuild the local log from the stream.
    RESYNC = "resync"


class SharedPartitionState:
    def __init__(self, log: "SharedLog") -> None:
        self.log = log
        self.leading = False
        self.leader_epoch = -1
        self.generation = 0
        # Offsets below it are in object storage and in the stream metadata.
        self.committed_end = 0
        self._reason = ""
        self._deposed = False
        self._change: asyncio.Future | None = None

    def __repr__(self) -> str:
        return (f"SharedPartitionState({self.topic}-{self.partition}, leading={self.leading}, "
                f"committed_end={self.committed_end})")

    @property
    def topic(self) -> str:
        return self.log.topic

    @property
    def partition(self) -> int:
        return self.log.partition

    def became_leader(self, leader_epoch: int, committed_end: int) -> None:
        self.leading = True
        self.leader_epoch = leader_epoch
        self.committed_end = committed_end
        self.generation += 1
        self._wake()

    def stopped_leading(self) -> None:
        self.leading = False
        self.generation += 1
        self._reason, self._deposed = "this broker no longer leads the partition", True
        self._wake()

    def committed(self, end: int) -> None:
        if end > self.committed_end:
            self.committed_end = end
            self._wake()

    def reset(self, reason: str, how: Reset) -> None:
        """Fail whoever waits for records above the committed end, and make the local log
        the stream's copy again (the producer state it builds with it)."""
        self.generation += 1
        self._reason, self._deposed = reason, how is Reset.DEPOSED
        if self.leading and how is Reset.TRUNCATE:
            self.log.truncate_locally(self.committed_end)
        elif self.leading and how is Reset.RESYNC:
            self.leading = False
            self.log.resync(self.leader_epoch)
        self._wake()

    async def wait_committed(self, end: int, generation: int) -> None:
        """Return once offsets below ``end`` are committed; raise NotCommitted if the
        partition is reset or loses its leadership first."""
        while self.committed_end < end:
            if self.generation != generation:
                raise NotCommitted(f"{self.topic}-{self.partition}: {self._reason}",
                                   self._deposed)
            if self._change is None or self._change.done():
                self._change = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._change)

    def _wake(self) -> None:
        if self._change is not None and not self._change.done():
            self._change.set_result(None)
