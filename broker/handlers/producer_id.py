"""InitProducerId for idempotent producers, and the producer ids it hands out.

Transactions are not built: a transactional id is refused with INVALID_REQUEST, which
clients treat as fatal (a Java producer fails with "unexpected error" instead of retrying
until its timeout); FindCoordinator for a transaction gives the same code with a message.
"""

from __future__ import annotations

import os
from pathlib import Path

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey

from .registry import RequestContext, handles

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
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "w") as f:
            f.write(str(block_end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        self._block_end = block_end


@handles(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(ctx: RequestContext, request) -> object:
    if request.transactional_id is not None:
        return ctx.response("InitProducerIdResponse", throttle_time=0,
                            error_code=ErrorCode.invalid_request, producer_id=-1,
                            producer_epoch=-1)
    # Without a transactional id Kafka always issues a fresh id at epoch 0, also when an
    # idempotent producer asks to bump the epoch of its current one (KIP-360).
    return ctx.response("InitProducerIdResponse", throttle_time=0, error_code=ErrorCode.none,
                        producer_id=ctx.broker.producer_ids.next_id(), producer_epoch=0)
