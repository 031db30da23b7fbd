"""How a node reaches the active controller (the quorum's leader) without knowing which
voter it is: a connection-like object that sends each call to the voter it believes leads,
and on a refused connection, NOT_CONTROLLER or NOT_LEADER_OR_FOLLOWER moves on to the
leader named in the answer, else to the next voter, until the call's time is up. Brokers
register, heartbeat, change ISRs and fetch the metadata through it, so they follow the
active controller when it changes.

In a network partition a call to a voter cut off neither fails nor returns: it hangs. So a
call to the voter believed to lead is abandoned as soon as any of the node's connections (or
its own voter, in combined mode) learns that another one leads, and a caller may bound what
one voter is given (``attempt_s``) so that a hung voter is left for the next one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable
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

    def __init__(self, voters: dict[int, tuple[str, int]], own_id: int | None = None) -> None:
        self.voters = voters
        # A voter's own id: never guessed as the leader, only known (its voter won, or an
        # answer named it), since a node that is not the active controller and sends to
        # itself an admin request it forwards would forward it to itself again, on the one
        # connection whose answers come in order: both wait for ever.
        self.own_id = own_id
        self._own_voter_leads = False  # its voter won the latest election it knows of
        self._order = sorted(voters)
        self.leader_id = next((v for v in self._order if v != own_id), self._order[0])
        self.known = False  # confirmed by an answer, not a guess
        # Set, and replaced, whenever a leader is named: wakes the calls to another one.
        self._moved = asyncio.Event()

    @property
    def address(self) -> tuple[str, int]:
        return self.voters[self.leader_id]

    def confirmed(self, node: int) -> None:
        if (node, True) != (self.leader_id, self.known):
            host, port = self.voters[node]
            log.info("the active controller is %s:%d%s", host, port,
                     f" (node {node})" if node >= 0 else "")
        self._move_to(node, known=True)
        self.known = True

    def elected(self, node: int, epoch: int) -> None:
        """This node's own voter saw ``node`` win ``epoch`` (-1: an election is under way);
        a leader_listener of replication.raft.quorum.RaftNode."""
        self._own_voter_leads = node == self.own_id
        if node in self.voters:
            self.confirmed(node)

    def refused(self, node: int, hint: int = -1) -> None:
        """``node`` is not the leader; ``hint``: the one it names (-1: none)."""
        if node != self.leader_id:
            return  # someone else already moved on
        if node == self.own_id and self._own_voter_leads:
            return  # its controller becomes active once it has applied the log: ask again
        self.known = False
        if hint in self.voters and hint != node:
            self._move_to(hint, known=True)
        else:
            self._move_to(self._next_after(node), known=False)

    def _next_after(self, node: int) -> int:
        turn = self._order.index(node)
        following = self._order[turn + 1:] + self._order[:turn + 1]
        return next((v for v in following if v != self.own_id), node)

    def _move_to(self, node: int, known: bool) -> None:
        """``known``: an answer or this node's voter named ``node``; only then are the
        calls to the previous one left (a guess, the next voter in turn, may be wrong)."""
        news = node != self.leader_id or not self.known  # not only guessed before
        self.leader_id = node
        if known and news:
            self._moved.set()
            self._moved = asyncio.Event()

    async def moved_from(self, node: int) -> None:
        """Returns once another voter than ``node`` is known to lead."""
        while True:
            await self._moved.wait()
            if self.leader_id != node:
                return

    def connection(self, nodes: NodeClient, purpose: str = "control") -> LeaderConnection:
        return LeaderConnection(self, nodes, purpose)


class LeaderConnection:
    """A NodeConnection's ``call`` that follows the leadership."""

    def __init__(self, leadership: ActiveController, nodes: NodeClient, purpose: str) -> None:
        self.leadership = leadership
        self.nodes = nodes
        self.purpose = purpose

    async def call(self, api_key: ApiKey, body: Any, timeout: float = 30.0,
                   version: int | None = None, attempt_s: float | None = None) -> Any:
        """``attempt_s``: the longest one voter is waited for before the next is tried
        (None: the whole ``timeout``); only for calls that any voter answers at once or
        refuses, e.g. a metadata fetch, never one the controller may take long to decide."""
        deadline = time.monotonic() + timeout
        while True:
            node = self.leadership.leader_id
            connection = self.nodes.connection(*self.leadership.voters[node], self.purpose)
            remaining = max(deadline - time.monotonic(), 0.1)
            if attempt_s is not None:
                remaining = min(remaining, attempt_s)
            try:
                response = await self._unless_moved(
                    node, connection.call(api_key, body, remaining, version), remaining)
            except _LeadershipMoved:
                continue
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


    async def _unless_moved(self, node: int, call: Awaitable[Any], timeout: float) -> Any:
        """``call``'s answer, unless another voter than ``node`` is known to lead first
        (_LeadershipMoved) or ``timeout`` passes, queueing for the connection included
        (TimeoutError); the call is cancelled then."""
        attempt = asyncio.ensure_future(call)
        moved = asyncio.ensure_future(self.leadership.moved_from(node))
        try:
            await asyncio.wait((attempt, moved), timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (attempt, moved):
                task.cancel()
            await asyncio.gather(attempt, moved, return_exceptions=True)
        if not attempt.cancelled():
            return attempt.result()
        if moved.cancelled():
            raise asyncio.TimeoutError(f"no answer from node {node} in {timeout:.1f} s")
        raise _LeadershipMoved


class _LeadershipMoved(Exception):
    pass


def _entries_refused(response: Any) -> bool:
    """Whether an answer without a top-level error code (CreateTopics, DeleteTopics,
    IncrementalAlterConfigs ...) refuses its entries with NOT_CONTROLLER: a voter whose
    controller is not active answers a forwarded request so (broker.handlers.admin)."""
    if not dataclasses.is_dataclass(response):
        return False
    for field in dataclasses.fields(response):
        entries = getattr(response, field.name)
        if isinstance(entries, tuple) and any(
                getattr(entry, "error_code", None) == ErrorCode.not_controller
                for entry in entries):
            return True
    return False


def _not_leader(response: Any) -> int | None:
    """None if ``response`` came from the active controller, else the leader it names (-1:
    none). Controller APIs answer NOT_CONTROLLER at the top; a Fetch of the metadata log
    NOT_LEADER_OR_FOLLOWER in its partition, with the current leader."""
    if getattr(response, "error_code", ErrorCode.none) in _NOT_LEADER:
        return -1
    value = getattr(response, "value", None)  # an internal API's JSON body
    if isinstance(value, dict) and value.get("error_code") in _NOT_LEADER:
        return -1
    if _entries_refused(response):
        return -1
    if not hasattr(response, "responses") or not hasattr(response, "session_id"):
        return None  # not a Fetch (IncrementalAlterConfigs also answers `responses`)
    for topic in response.responses:
        for partition in topic.partitions:
            if partition.error_code in _NOT_LEADER:
                return partition.current_leader.leader_id
    return None
