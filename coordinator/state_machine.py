"""One pattern for every piece of state kept as a log of records: append → commit → apply.

kipper keeps three such states, as KRaft and Kafka's coordinator runtime do:

| state                       | log                          | committed when          | applied by |
|-----------------------------|------------------------------|-------------------------|------------|
| cluster metadata            | ``__cluster_metadata-0``     | fsynced (one voter)     | the controller; every broker's metadata follower |
| diskless batch coordinator  | ``__diskless-metadata-0``    | in the ISR (acks=all)   | every replica of that partition |
| consumer groups and offsets | ``__consumer_offsets-N``     | in the ISR (acks=all)   | the group coordinator of partition N, replayed on load |

(The classic group protocol changes a group in memory before its record is committed, as
Kafka's classic groups do; committed offsets follow the pattern.)

A writer turns a request into records and appends them; nothing is applied before it is
committed, and then every node applies the same records in the same order through the same
``StateMachine.apply``, so their states agree. Loading after a restart or a leadership change
is the same apply over the log from its start. ``Applier`` is that last step, written once:
it applies committed records in order, each exactly once, tells listeners, and hands a
writer the result of applying the record it appended.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from replication.loop_slice import LoopSlice

# Results kept for appended records whose writer has not asked yet (the applier may get
# there first); far more than can be in flight.
RECENT_RESULTS = 10_000
# ``apply_in_turns``: records applied between looks at the clock, and the event loop's turn
# taken once this much time has passed; records a caller decodes at a time for it.
APPLY_CHUNK = 8
APPLY_SLICE_S = 0.005
DECODE_CHUNK = 256


class StateMachine(Protocol):
    """State built deterministically from log records: it reads only the record and itself,
    never the clock or the node it runs on."""

    @property
    def next_offset(self) -> int:
        """The offset of the next record to apply (one past the last applied)."""

    def apply(self, offset: int, record: Any) -> Any:
        """Apply one committed record (as its log decodes it); return what its writer is
        answered with."""


# (offset, record, result) of each applied record.
ApplyListener = Callable[[int, Any, Any], None]


class Applier:
    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine
        self.listeners: list[ApplyListener] = []
        self._results: OrderedDict[int, Any] = OrderedDict()
        self._result_waiters: dict[int, asyncio.Future] = {}
        self._progress_waiters: set[asyncio.Future] = set()

    @property
    def next_offset(self) -> int:
        return self.machine.next_offset

    def apply(self, committed: Iterable[tuple[int, Any]]) -> int:
        """Apply the committed records not applied yet, in offset order; return how many."""
        applied = 0
        for offset, record in committed:
            if offset < self.machine.next_offset:
                continue  # already applied: a re-read or an overlapping fetch
            result = self.machine.apply(offset, record)
            applied += 1
            self._results[offset] = result
            while len(self._results) > RECENT_RESULTS:
                self._results.popitem(last=False)
            waiter = self._result_waiters.pop(offset, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(result)
            for listener in self.listeners:
                listener(offset, record, result)
        if applied:
            self._progressed()
        return applied

    async def apply_in_turns(self, chunks: Iterable[Sequence[tuple[int, Any]]]) -> None:
        """``apply`` each chunk (a lazily decoded log read: protocol.records.
        json_record_chunks), giving the event loop its turn every few milliseconds: the
        records of a topic of 5,000 partitions, decoded and applied in one go, held it for
        most of a second, and the quorum's followers, whose fetches went unanswered, elected
        another controller."""
        turns = LoopSlice(APPLY_SLICE_S)
        for chunk in chunks:
            for start in range(0, len(chunk), APPLY_CHUNK):
                self.apply(chunk[start:start + APPLY_CHUNK])
                await turns.pause()

    def _progressed(self) -> None:
        for waiter in self._progress_waiters:
            if not waiter.done():
                waiter.set_result(None)

    def load_snapshot(self, end_offset: int, records: Iterable[Any]) -> None:
        """Apply a snapshot's records: the state as of ``end_offset`` (KIP-630), in place of
        the log below it. Each is applied as at the snapshot's last offset, so the machine
        continues at ``end_offset``; listeners see them as they see the log's."""
        for record in records:
            result = self.machine.apply(end_offset - 1, record)
            for listener in self.listeners:
                listener(end_offset - 1, record, result)
        self._progressed()

    def forget_results(self) -> None:
        """Drop the results kept for writers: the log was truncated and its offsets will
        hold other records."""
        self._results.clear()

    async def result_of(self, offset: int, timeout_s: float) -> Any:
        """The result of applying the record at ``offset``, once it is applied."""
        if offset in self._results:
            return self._results[offset]
        waiter = self._result_waiters.setdefault(
            offset, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        finally:
            if waiter.done():
                self._result_waiters.pop(offset, None)

    async def wait_until_applied(self, end_offset: int, timeout_s: float) -> None:
        """Return once every record below ``end_offset`` is applied."""
        async with asyncio.timeout(timeout_s):
            while self.machine.next_offset < end_offset:
                waiter = asyncio.get_running_loop().create_future()
                self._progress_waiters.add(waiter)
                try:
                    await waiter
                finally:
                    self._progress_waiters.discard(waiter)
