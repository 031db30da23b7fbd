"""WAL metadata (KIP-1176): where each partition's bytes sit in an uploaded WAL object, and
the three ways it reaches followers (``active.tiered.metadata.scheme``).

A leader answers a follower's fetch for offsets an uploaded object covers with a *pointer
batch* instead of the records (``encode_pointers``; the batch framing is protocol.records'
``build_pointer_batch``). What the batch carries is the scheme's business:

- ``memory`` (Jun Rao's outline): the leader keeps the refs of what it uploaded in memory
  only, from its *first tiered offset* (its log end offset when it started leading) on, and
  puts them in the pointer batch. After a restart it has none: followers below get records.
- ``fetch`` (Luke Chen's alternative): the same refs in the pointer batch, also appended to a
  local file in the partition directory by leader and followers alike, so a broker that
  becomes leader (or restarts) can still point a lagging follower at older objects.
- ``topic`` (the KIP): the uploader produces one record per ref to the internal topic
  ``__remote_wal_log_metadata``; every broker consumes it and keeps the refs of the
  partitions it follows. The pointer batch only says which offsets are uploaded; the
  follower takes the refs from what it consumed.

A scheme keeps what it learns about a partition in the partition's TieredPartitionState
(storage.active_tiered.state).
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kio.records.readers import read_batch

from protocol.records import build_pointer_batch, iter_batches, pointer_batch_payload

from .metrics import ActiveTieredMetrics

if TYPE_CHECKING:
    from .state import TieredPartitionState

log = logging.getLogger(__name__)

WAL_METADATA_TOPIC = "__remote_wal_log_metadata"
StatesByPartition = dict[tuple[str, int], "TieredPartitionState"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class WalRef:
    """One partition's batches [base_offset, last_offset] at bytes [position, position +
    length) of the object bucket/key."""

    bucket: str
    key: str
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    position: int
    length: int
    uploaded_at_ms: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> "WalRef":
        return cls(**json.loads(raw))


@dataclass(frozen=True, slots=True)
class WalPointers:
    """What a follower's fetch got instead of records: offsets [first, last] are uploaded;
    ``refs`` says where, unless the scheme delivers refs another way (None)."""

    first_offset: int
    last_offset: int
    refs: list[WalRef] | None


def encode_pointers(pointers: WalPointers) -> bytes:
    """A pointer batch carrying ``pointers`` as JSON."""
    body = {"first": pointers.first_offset, "last": pointers.last_offset,
            "refs": None if pointers.refs is None else [asdict(r) for r in pointers.refs]}
    return build_pointer_batch(pointers.first_offset,
                               json.dumps(body, separators=(",", ":")).encode(), _now_ms())


def decode_pointers(records: bytes) -> WalPointers | None:
    """The pointers of a pointer batch; None for ordinary record batches."""
    payload = pointer_batch_payload(records)
    if payload is None:
        return None
    body = json.loads(payload)
    refs = None if body["refs"] is None else [WalRef(**r) for r in body["refs"]]
    return WalPointers(body["first"], body["last"], refs)


class WalIndex:
    """One partition's refs, in offset order."""

    def __init__(self) -> None:
        self._refs: list[WalRef] = []
        self._bases: list[int] = []

    def __len__(self) -> int:
        return len(self._refs)

    def add(self, ref: WalRef) -> None:
        if self._refs and ref.base_offset <= self._refs[-1].last_offset:
            # A new leader re-uploaded these offsets: its copy replaces the overlap.
            self.drop_from(ref.base_offset)
        self._refs.append(ref)
        self._bases.append(ref.base_offset)

    def covering(self, offset: int, max_bytes: int) -> list[WalRef]:
        """Consecutive refs from the one holding ``offset``, about ``max_bytes`` of data
        (at least one ref)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or self._refs[i].last_offset < offset:
            return []
        found = [self._refs[i]]
        size = found[0].length
        for ref in self._refs[i + 1:]:
            if ref.base_offset != found[-1].last_offset + 1 or size + ref.length > max_bytes:
                break
            found.append(ref)
            size += ref.length
        return found

    def drop(self, keep: Callable[[WalRef], bool]) -> None:
        self._refs = [r for r in self._refs if keep(r)]
        self._bases = [r.base_offset for r in self._refs]

    def drop_from(self, offset: int) -> None:
        self.drop(lambda r: r.last_offset < offset)

    def refs(self) -> list[WalRef]:
        return list(self._refs)


class WalMetadataFile:
    """The ``fetch`` scheme's local file: one JSON ref per line, in the partition directory.
    Refs older than the WAL retention are dropped when the file is loaded or compacted."""

    NAME = "wal-metadata.jsonl"

    def __init__(self, directory: Path) -> None:
        self.path = directory / self.NAME
        self._lines = 0

    def load(self, retention_ms: int) -> list[WalRef]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        cutoff = _now_ms() - retention_ms
        refs = []
        for line in text.splitlines():
            try:
                ref = WalRef.from_json(line)
            except (ValueError, TypeError):
                continue  # a torn last line after a crash
            if ref.uploaded_at_ms >= cutoff:
                refs.append(ref)
        self.rewrite(refs)
        return refs

    def append(self, refs: list[WalRef]) -> int:
        data = b"".join(r.to_json() + b"\n" for r in refs)
        with open(self.path, "ab") as f:
            f.write(data)
        self._lines += len(refs)
        return len(data)

    def rewrite(self, refs: list[WalRef]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(r.to_json() + b"\n" for r in refs))
        tmp.replace(self.path)
        self._lines = len(refs)

    @property
    def lines(self) -> int:
        return self._lines


class MetadataTopicClient(Protocol):
    """The broker's access to ``__remote_wal_log_metadata`` (replication.active_tiered)."""

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet."""

    async def produce(self, values: list[bytes]) -> None: ...

    async def fetch(self, offset: int) -> tuple[bytes, int]:
        """Record batches from ``offset`` (up to the high watermark, long-polling), and the
        offset to continue from when ``offset`` is out of range (else ``offset``)."""


class MetadataScheme(abc.ABC):
    name: str

    def __init__(self, metrics: ActiveTieredMetrics) -> None:
        self.metrics = metrics

    def opened(self, state: "TieredPartitionState") -> None:
        """A partition of this scheme was opened on this broker."""

    async def publish(self, refs: list[WalRef], states: "StatesByPartition") -> None:
        """Leader, after an upload: make ``refs`` (all of this scheme) known to followers."""

    def pointers(self, refs: list[WalRef]) -> WalPointers:
        """Leader: what a follower fetch gets for the offsets ``refs`` cover."""
        return WalPointers(refs[0].base_offset, refs[-1].last_offset, refs)

    async def resolve(self, state: "TieredPartitionState",
                      pointers: WalPointers) -> list[WalRef]:
        """Follower: the refs to download for ``pointers``."""
        return pointers.refs or []

    def appended(self, state: "TieredPartitionState", refs: list[WalRef]) -> None:
        """Follower: the data of ``refs`` is now in its local log."""

    def stopped(self, state: "TieredPartitionState") -> None:
        """The partition is no longer hosted here (deleted, closed, or the replica layer
        said so)."""

    async def start(self, topic_client: MetadataTopicClient) -> None:
        pass

    async def stop(self) -> None:
        pass


class MemoryScheme(MetadataScheme):
    name = "memory"


class FetchScheme(MetadataScheme):
    name = "fetch"

    def opened(self, state: "TieredPartitionState") -> None:
        state.keep_refs_in(WalMetadataFile(state.log.directory))

    async def publish(self, refs: list[WalRef], states: "StatesByPartition") -> None:
        for ref in refs:
            self.metrics.metadata_file(states[(ref.topic, ref.partition)].persist([ref]))

    def appended(self, state: "TieredPartitionState", refs: list[WalRef]) -> None:
        for ref in refs:
            state.refs.add(ref)  # this broker can point others at them should it lead
        self.metrics.metadata_file(state.persist(refs))


class TopicScheme(MetadataScheme):
    name = "topic"

    def __init__(self, metrics: ActiveTieredMetrics, wait_s: float) -> None:
        super().__init__(metrics)
        # How long a follower waits for the topic to bring the refs a pointer batch
        # announced before it asks again (and gets records).
        self.wait_s = wait_s
        self._client: MetadataTopicClient | None = None
        # The partitions of this scheme hosted here: what the topic brings goes to them.
        self._states: StatesByPartition = {}
        self._changed = asyncio.Event()
        self._consumer: asyncio.Task | None = None
        self._creation: asyncio.Future | None = None

    def opened(self, state: "TieredPartitionState") -> None:
        self._states[state.key] = state
        self._ensure_topic()

    def _ensure_topic(self) -> None:
        """Created with the first partition of this scheme, so that it is ready by the
        first upload rather than created by it."""
        if self._client is not None and self._states and self._creation is None:
            self._creation = asyncio.ensure_future(self._client.ensure_topic())
            self._creation.add_done_callback(self._created)

    def _created(self, task: asyncio.Future) -> None:
        if task.cancelled() or task.exception() is not None:
            log.warning("cannot create %s yet: %s", WAL_METADATA_TOPIC,
                        "cancelled" if task.cancelled() else task.exception())
            self._creation = None  # the next partition opened tries again

    def pointers(self, refs: list[WalRef]) -> WalPointers:
        # The refs travel through the topic; the follower only learns what is uploaded.
        return WalPointers(refs[0].base_offset, refs[-1].last_offset, None)

    async def publish(self, refs: list[WalRef], states: "StatesByPartition") -> None:
        values = [ref.to_json() for ref in refs]
        await self._client.produce(values)
        self.metrics.metadata(self.name, len(values), sum(len(v) for v in values))

    async def resolve(self, state: "TieredPartitionState",
                      pointers: WalPointers) -> list[WalRef]:
        deadline = time.monotonic() + self.wait_s
        while True:
            refs = state.announced.covering(state.log.log_end_offset, 1 << 30)
            if refs and refs[-1].last_offset >= pointers.last_offset:
                return refs
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return refs  # what arrived; the next fetch asks again for the rest
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    def appended(self, state: "TieredPartitionState", refs: list[WalRef]) -> None:
        log_end = state.log.log_end_offset
        state.announced.drop(lambda r: r.last_offset >= log_end)

    async def start(self, topic_client: MetadataTopicClient) -> None:
        self._client = topic_client
        self._consumer = asyncio.create_task(self._consume())
        self._ensure_topic()

    async def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.cancel()
            await asyncio.gather(self._consumer, return_exceptions=True)

    async def _consume(self) -> None:
        """Read the metadata topic from its start, as KIP-405's ConsumerManager does, and
        keep the refs of the partitions this broker hosts."""
        offset = 0
        while True:
            try:
                records, offset = await self._client.fetch(offset)
            except (ConnectionError, OSError, asyncio.TimeoutError, LookupError) as e:
                log.debug("reading %s: %s", WAL_METADATA_TOPIC, e)
                await asyncio.sleep(0.5)
                continue
            for header in iter_batches(records, allow_partial_tail=True):
                if header.next_offset <= offset:
                    continue
                batch, _ = read_batch(records, header.position)
                for record in batch.records:
                    if record.offset >= offset and record.value:
                        self._consumed(WalRef.from_json(record.value))
                offset = header.next_offset
            self._changed.set()

    def _consumed(self, ref: WalRef) -> None:
        self.metrics.metadata(self.name, 1, len(ref.to_json()))
        state = self._states.get((ref.topic, ref.partition))
        if state is None or ref.last_offset < state.log.log_end_offset:
            return  # not hosted here, or already held
        cutoff = _now_ms() - state.log.config.wal_retention_ms
        state.announced.drop(lambda r: r.uploaded_at_ms >= cutoff)
        state.announced.add(ref)

    def stopped(self, state: "TieredPartitionState") -> None:
        if self._states.get(state.key) is state:
            del self._states[state.key]


def make_schemes(metrics: ActiveTieredMetrics, wait_s: float) -> dict[str, MetadataScheme]:
    return {scheme.name: scheme for scheme in (
        TopicScheme(metrics, wait_s), FetchScheme(metrics), MemoryScheme(metrics))}
