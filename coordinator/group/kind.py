"""The kinds of group one coordinator runs side by side in ``__consumer_offsets``: classic
groups (``classic``), KIP-848 consumer groups (``consumer``), and whichever kind plugs in next
(KIP-932 share groups). A group id names one group of one kind.

``GroupCoordinator`` (``service``) keeps them in a registry and asks each the same questions:
does it run this group, which groups does it list, what do a loaded partition's records give
it, what does deleting one of its groups write. A kind's own requests (JoinGroup,
ConsumerGroupHeartbeat, ...) go to it directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from ..coordinator_log import LogRecord

if TYPE_CHECKING:
    from .loader import LoadedPartition


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A group as ListGroups shows it."""
    group_id: str
    group_type: str
    protocol_type: str
    state: str


class GroupKind(Protocol):
    # ListGroups' group type: "classic", "consumer", "share".
    group_type: str

    def owns(self, group_id: str) -> bool: ...

    def listed(self) -> Iterable[ListedGroup]: ...

    def restore(self, loaded: LoadedPartition) -> None:
        """Take over the kind's groups of a partition this coordinator just loaded."""

    def unload_partition(self, partition: int) -> None: ...

    def deletion_error(self, group_id: str) -> ErrorCode | None:
        """Why DeleteGroups may not delete the group now (NON_EMPTY_GROUP), if it may not."""

    def delete(self, group_id: str) -> list[LogRecord]:
        """Drop the group from memory; the tombstones of the kind's records of it (its
        offsets are the coordinator's to delete)."""
