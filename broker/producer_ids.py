"""The producer ids this broker hands out in InitProducerId."""

from __future__ import annotations

from pathlib import Path

from storage.classic.checkpoint import write_atomically
from storage.disk_space import storage_io

BLOCK_SIZE = 1000
# Each broker allocates from its own range, so two brokers never hand out the same id
# without having to ask each other (2**40 ids per broker).
NODE_ID_SHIFT = 40


class ProducerIdAllocator:
    """Producer ids that never repeat, even across restarts and crashes.

    Ids are reserved a block at a time by writing the end of the block to ``path``
    (fsynced, replaced atomically) before the first id of the block is handed out; a
    restart continues after the last reserved block, skipping its unused ids.
    """

    def __init__(self, path: Path, node_id: int) -> None:
        self.path = path
        self.base = node_id << NODE_ID_SHIFT
        reserved = int(path.read_text()) if path.exists() else self.base
        self._next = self._block_end = max(reserved, self.base)

    def next_id(self) -> int:
        if self._next == self._block_end:
            self._reserve(self._block_end + BLOCK_SIZE)
        producer_id = self._next
        self._next += 1
        return producer_id

    def _reserve(self, block_end: int) -> None:
        """Raises KafkaStorageError (a full disk): no id is handed out unreserved."""
        with storage_io(f"reserve producer ids in {self.path}"):
            write_atomically(self.path, str(block_end))
        self._block_end = block_end
