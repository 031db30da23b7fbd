"""What a coordinator needs from its internal topic: the ``CoordinatorLog`` contract.

The group coordinator keeps its state in ``__consumer_offsets``, the transaction coordinator
in ``__transaction_state``. A key (group id, transactional id) belongs to partition
``abs(javaHashCode(key)) % partitions`` as in Kafka, and the broker leading that partition
is the key's coordinator. The coordinator appends its records there and replays them when
it takes a partition over; it does not know how the partitions are replicated.
``coordinator.internal_topic`` implements the contract over the broker's replicas; the unit
tests implement it in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from protocol.records import NO_PRODUCER_ID
from replication.cluster_metadata import BrokerInfo


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A key and value of ``group.records``' format; a None value is a tombstone."""
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TxnProducer:
    """The transactional producer whose transaction appended records belong to (the group
    coordinator's transactional offset commits): they count only once its commit marker
    follows them in the partition, and not at all after an abort marker."""
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """A record as replayed, with its offset in the partition; ``producer_id`` is the
    producer whose transaction it belongs to (NO_PRODUCER_ID outside one)."""
    offset: int
    key: bytes | None
    value: bytes | None
    producer_id: int = NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class LoggedMarker:
    """A transaction marker as replayed: ``producer_id``'s records before it, since its
    previous marker, are committed or aborted."""
    offset: int
    producer_id: int
    commit: bool


class CoordinatorLogError(Exception):
    """An append to __consumer_offsets failed, with the error code a group client gets."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class CoordinatorLog(Protocol):
    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist yet (groups are first looked up)."""

    def partition_for(self, key: str) -> int:
        """The partition holding ``key``'s records (a group id, a transactional id)."""

    def coordinator_node(self, partition: int) -> BrokerInfo | None:
        """The broker leading ``partition``, i.e. the coordinator of its keys."""

    def is_local_leader(self, partition: int) -> bool:
        """Whether this broker leads ``partition``, so coordinates its keys."""

    def led_partitions(self) -> set[int]:
        """Every partition this broker leads."""

    def coordinator_epoch(self, partition: int) -> int:
        """The leader epoch of ``partition``: a coordinator's epoch, which fences what an
        earlier coordinator of its keys sends (transaction markers)."""

    async def append(self, partition: int, records: Sequence[LogRecord], timestamp_ms: int,
                     transaction: TxnProducer | None = None) -> int:
        """Append ``records`` as leader (in one batch, of ``transaction`` if given) and wait
        until every in-sync replica has them; the offset of the last one. Raises
        CoordinatorLogError."""

    def replay(self, partition: int) -> AsyncIterator[LoggedRecord | LoggedMarker]:
        """Every record and transaction marker of ``partition``, oldest first, up to its
        end when the iteration ends (records appended meanwhile included)."""


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits, signed."""
    h = 0
    utf16 = value.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        h = (31 * h + (utf16[i] << 8 | utf16[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (Utils.abs(MIN_VALUE) is 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
