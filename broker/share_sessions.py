"""Share sessions (KIP-932): the partitions a share group member fetches from this broker.

ShareFetch with session epoch 0 opens a session (replacing the member's previous one) with
the partitions it names; each later ShareFetch or ShareAcknowledge carries the next epoch,
may add partitions and forget some; epoch -1 closes the session, and what the member holds
in its partitions goes back for redelivery. A wrong epoch gets INVALID_SHARE_SESSION_EPOCH,
a session this broker does not have SHARE_SESSION_NOT_FOUND. At most ``max_sessions`` exist
(``group.share.max.share.sessions``); a new one then takes the place of the least recently
used one idle for longer than the share session timeout, else SHARE_SESSION_LIMIT_REACHED.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# (topic id, partition)
SharedPartition = tuple[uuid.UUID, int]


class ShareSessionError(Exception):
    def __init__(self, error_code: ErrorCode) -> None:
        super().__init__(error_code.name)
        self.error_code = error_code


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int
    partitions: dict[SharedPartition, None] = field(default_factory=dict)  # ordered set
    last_used: float = 0.0


class ShareSessions:
    def __init__(self, max_sessions: int, idle_eviction_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.idle_eviction_s = idle_eviction_s
        self.clock = clock
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def use(self, group_id: str, member_id: str, epoch: int,
            added: Iterable[SharedPartition], forgotten: Iterable[SharedPartition]
            ) -> tuple[ShareSession, list[ShareSession]]:
        """The member's session after this request, and the sessions this request ended (a
        replaced or evicted one, or this one when ``epoch`` is final): their members'
        records are to be released. Raises ShareSessionError."""
        key = (group_id, member_id)
        now = self.clock()
        ended: list[ShareSession] = []
        if epoch == INITIAL_EPOCH:
            if (previous := self.sessions.pop(key, None)) is not None:
                ended.append(previous)
            if len(self.sessions) >= self.max_sessions:
                ended.append(self._evict(now))
            session = self.sessions[key] = ShareSession(group_id, member_id, INITIAL_EPOCH)
        else:
            session = self.sessions.get(key)
            if session is None:
                raise ShareSessionError(ErrorCode.share_session_not_found)
            if epoch != FINAL_EPOCH and epoch != session.next_epoch:
                raise ShareSessionError(ErrorCode.invalid_share_session_epoch)
        for partition in forgotten:
            session.partitions.pop(partition, None)
        for partition in added:
            session.partitions[partition] = None
        session.last_used = now
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            ended.append(session)
        else:
            session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session, ended

    def _evict(self, now: float) -> ShareSession:
        oldest = min(self.sessions.values(), key=lambda s: s.last_used)
        if now - oldest.last_used < self.idle_eviction_s:
            raise ShareSessionError(ErrorCode.share_session_limit_reached)
        return self.sessions.pop((oldest.group_id, oldest.member_id))
