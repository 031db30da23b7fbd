"""How a node reaches the active controller (the quorum's leader) without knowing which
voter it is: a connection-like object that sends each call to the voter it believes leads,
and on a refused connection, NOT_CONTROLLER or NOT_LEADER_OR_FOLLOWER moves on to the
leader named in the answer, else to the next voter, until the call's time is up. Brokers
register, heartbeat, change ISRs and fetch the metadata through it, so they follow the
active controller when it changes."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.node_client import NodeClient

log = logging.getLogger(__name__)

# Between two voters tried in a row (an election takes some hundreds of milliseconds).
RETRY_BACKOFF_S = 0.05
_NOT_LEADER = (ErrorCode.not_controller, ErrorCode.not_leader_or_follower,
               ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch)


class ActiveController:
    """What this node believes of the quorum's leadership, shared by its connections."""

    def __init__(self, voters: dict[int, tuple[str, int]]) -> None:
        self.voters = voters
        self._order = sorted(voters)
        self.leader_id = self._order[0]
        self.known = False  # confirmed by an answer, not a guess

    @property
    def address(self) -> tuple[str, int]:
        return self.voters[self.leader_id]

    def confirmed(self, node: int) -> None:
        if (node, True) != (self.leader_id, self.known):
            host, port = self.voters[node]
            log.info("the active controller is %s:%d%s", host, port,
                     f" (node {node})" if node >= 0 else "")
        self.leader_id, self.known = node, True

    def refused(self, node: int, hint: int = -1) -> None:
        """``node`` is not the leader; ``hint``: the one it names (-1: none)."""
        if node != self.leader_id:
            return  # someone else already moved on
        self.known = False
        if hint in self.voters and hint != node:
            self.leader_id = hint
        else:
            self.leader_id = self._order[(self._order.index(node) + 1) % len(self._order)]

    def connection(self, nodes: NodeClient, purpose: str = "control") -> LeaderConnection:
        return LeaderConnection(self, nodes, purpose)


class LeaderConnection:
    """A NodeConnection's ``call`` that follows the leadership."""

    def __init__(self, leadership: ActiveController, nodes: NodeClient, purpose: str) -> None:
        self.leadership = leadership
        self.nodes = nodes
        self.purpose = purpose

    async def call(self, api_key: ApiKey, body: Any, timeout: float = 30.0,
                   version: int | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            node = self.leadership.leader_id
            connection = self.nodes.connection(*self.leadership.voters[node], self.purpose)
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                response = await connection.call(api_key, body, remaining, version)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                self.leadership.refused(node)
                if time.monotonic() + RETRY_BACKOFF_S >= deadline:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            refusal = _not_leader(response)
            if refusal is None:
                self.leadership.confirmed(node)
                return response
            self.leadership.refused(node, refusal)
            if time.monotonic() + RETRY_BACKOFF_S >= deadline:
                return response
            await asyncio.sleep(RETRY_BACKOFF_S)


def _not_leader(response: Any) -> int | None:
    """None if ``response`` came from the active controller, else the leader it names (-1:
    none). Controller APIs answer NOT_CONTROLLER at the top; a Fetch of the metadata log
    NOT_LEADER_OR_FOLLOWER in its partition, with the current leader."""
    if getattr(response, "error_code", ErrorCode.none) in _NOT_LEADER:
        return -1
    for topic in getattr(response, "responses", ()):
        for partition in topic.partitions:
            if partition.error_code in _NOT_LEADER:
                return partition.current_leader.leader_id
    return None
