"""A voter on the network: the RaftNode ticked by the event loop, its requests carried to
the other voters over kipper's node connections (replication.node_client), on the Kafka
protocol (replication.raft.wire)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from kio.schema.errors import ErrorCode
from kio.schema.fetch_snapshot.v0.request import (
    FetchSnapshotRequest,
    PartitionSnapshot,
    TopicSnapshot,
)
from kio.schema.fetch_snapshot.v0.request import SnapshotId as WireSnapshotId

from protocol.apis import ApiKey
from protocol.build import make
from replication.cluster_metadata import METADATA_TOPIC
from replication.node_client import NodeClient

from .messages import RaftFetch, SnapshotId
from .quorum import QuorumSettings, QuorumStateFile, RaftLog, RaftNode
from .wire import api_key_of, decode_response, encode_request

log = logging.getLogger(__name__)

TICK_S = 0.05
# Snapshot bytes asked per FetchSnapshot.
SNAPSHOT_CHUNK = 4 << 20
# How long a stopping leader waits for its EndQuorumEpoch requests to be answered.
RESIGN_WAIT_S = 0.5


class QuorumDriver:
    """Runs ``raft`` (this node's voter) until stopped; it is the node's Transport (``nodes``
    None: a quorum of one, which sends nothing)."""

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], raft_log: RaftLog,
                 state_path: Path, nodes: NodeClient | None,
                 settings: QuorumSettings = QuorumSettings()) -> None:
        self.addresses = voters
        self.nodes = nodes
        self.settings = settings
        self.raft = RaftNode(node_id, set(voters), raft_log, QuorumStateFile(state_path), self,
                             time.monotonic, settings)
        self._ticker: asyncio.Task | None = None
        self._requests: set[asyncio.Task] = set()

    async def start(self) -> None:
        await self.raft.start()
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        """A leader hands over first (EndQuorumEpoch): the others elect at once rather than
        after a fetch timeout. No more ticks: a stopping voter does not stand again."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        await self.raft.resign()
        if self._requests:
            await asyncio.wait(list(self._requests), timeout=RESIGN_WAIT_S)
        for task in list(self._requests):
            task.cancel()
        await asyncio.gather(*self._requests, return_exceptions=True)

    async def _tick_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            self.raft.stalled(loop.time() - due)
            try:
                await self.raft.tick()
            except Exception:  # noqa: BLE001 - one failed tick must not end the quorum
                log.exception("quorum tick failed")

    # --- Transport --------------------------------------------------------------------

    def send(self, destination: int, request: object) -> None:
        task = asyncio.create_task(self._send(destination, request))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _send(self, destination: int, request: object) -> None:
        host, port = self.addresses[destination]
        is_fetch = isinstance(request, RaftFetch)
        # Long polls on a connection of their own: votes are never queued behind them.
        connection = self.nodes.connection(host, port, "quorum-fetch" if is_fetch else "quorum")
        max_wait = self.settings.fetch_max_wait_s if is_fetch else 0.0
        timeout = self.settings.request_timeout_s + max_wait
        try:
            # The whole of it bounded, the wait for a connection to a voter cut off too: a
            # voter's requests never pile up behind one that hangs.
            async with asyncio.timeout(timeout):
                answer = await connection.call(api_key_of(request),
                                               encode_request(request, max_wait), timeout)
            response = decode_response(request, answer)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.debug("quorum request to %d failed: %s", destination, e)
            response = None
        await self.raft.on_response(destination, request, response)

    async def fetch_snapshot(self, leader: int, snapshot: SnapshotId) -> bytes:
        host, port = self.addresses[leader]
        connection = self.nodes.connection(host, port, "quorum-snapshot")
        data = bytearray()
        while True:
            response = await connection.call(ApiKey.FETCH_SNAPSHOT, make(
                FetchSnapshotRequest, cluster_id=None, replica_id=self.raft.node_id,
                max_bytes=SNAPSHOT_CHUNK, topics=(make(
                    TopicSnapshot, name=METADATA_TOPIC, partitions=(make(
                        PartitionSnapshot, partition=0, current_leader_epoch=self.raft.epoch,
                        snapshot_id=make(WireSnapshotId, end_offset=snapshot.end_offset,
                                         epoch=snapshot.epoch),
                        position=len(data)),)),)), self.settings.request_timeout_s * 5)
            chunk = response.topics[0].partitions[0] if response.topics else None
            error = chunk.error_code if chunk is not None else response.error_code
            if error != ErrorCode.none:
                raise ConnectionError(f"snapshot {snapshot.file_name} from {leader}: {error.name}")
            data += chunk.unaligned_records
            if len(data) >= chunk.size or not chunk.unaligned_records:
                return bytes(data)
