"""Share groups as the request handlers see them: the group coordinator's share part.

A share group lives where any group with its id lives: on the broker leading the group's
partition of ``__consumer_offsets`` (``GroupCoordinator`` answers whether this broker serves
it). A group id names one kind of group: a share heartbeat for the id of a classic group
gets GROUP_ID_NOT_FOUND, as Kafka answers ("Group … is not a share group").
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..group.service import GroupCoordinator
from .membership import Heartbeat, HeartbeatResult, ShareGroup, ShareGroupManager


class ShareGroups:
    def __init__(self, groups: GroupCoordinator, manager: ShareGroupManager) -> None:
        self.groups = groups
        self.manager = manager

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.manager.settings.heartbeat_interval_ms

    def serving_error(self, group_id: str) -> ErrorCode | None:
        """Why this broker cannot serve share group ``group_id`` now, if it cannot."""
        error, _ = self.groups.describe_group(group_id)
        return None if error == ErrorCode.none else error

    def _other_kind(self, group_id: str) -> bool:
        return self.groups.describe_group(group_id)[1] is not None

    def heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        if (error := self.serving_error(request.group_id)) is not None:
            return HeartbeatResult(error)
        if self._other_kind(request.group_id):
            return HeartbeatResult(ErrorCode.group_id_not_found, message=(
                f"Group {request.group_id} is not a share group."))
        return self.manager.heartbeat(request)

    def describe(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None, str | None]:
        if (error := self.serving_error(group_id)) is not None:
            return error, None, None
        group = self.manager.groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a share group." if self._other_kind(group_id)
                       else f"Group {group_id} not found.")
            return ErrorCode.group_id_not_found, None, message
        return ErrorCode.none, group, None

    def share_group(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
        """The group for the share-group offset APIs: it may not exist yet (offsets of a
        group that never had members can be altered), but must not be another kind."""
        if (error := self.serving_error(group_id)) is not None:
            return error, None
        if self._other_kind(group_id):
            return ErrorCode.group_id_not_found, None
        return ErrorCode.none, self.manager.groups.get(group_id)

    def list(self) -> list[ShareGroup]:
        return [g for g in self.manager.groups.values()
                if self.serving_error(g.group_id) is None]

    def on_metadata_change(self) -> None:
        """Forget the groups of ``__consumer_offsets`` partitions no longer led here."""
        store = self.groups.store
        self.manager.unload(lambda group_id: not store.is_local_leader(
            store.partition_for(group_id)))
