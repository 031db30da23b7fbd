"""Share groups as the request handlers see them: the group coordinator's share part.

A share group lives where any group with its id lives: on the broker leading the group's
partition of ``__consumer_offsets`` (``GroupCoordinator`` answers whether this broker serves
it). The share group manager is one of the group coordinator's kinds (``kind.GroupKind``), so
listing, unloading and deleting share groups go through the coordinator's registry, and a group
id names one group of one kind: a share heartbeat for the id of a classic or consumer group
gets GROUP_ID_NOT_FOUND, as Kafka answers ("Group … is not a share group").
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..group.service import GroupCoordinator
from . import group_records
from .membership import Heartbeat, HeartbeatResult, ShareGroup, ShareGroupManager


class ShareGroups:
    def __init__(self, groups: GroupCoordinator, manager: ShareGroupManager) -> None:
        self.groups = groups
        self.manager = manager
        groups.add_kind(manager)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.manager.settings.group_settings(group_id).heartbeat_interval_ms

    def serving_error(self, group_id: str) -> ErrorCode | None:
        """Why this broker cannot serve share group ``group_id`` now, if it cannot."""
        error, _ = self.groups.describe_group(group_id)
        # GROUP_ID_NOT_FOUND: served here, by a group of another kind (``_other_kind``).
        return None if error in (ErrorCode.none, ErrorCode.group_id_not_found) else error

    def _other_kind(self, group_id: str) -> bool:
        """A classic or consumer group has the id (the group coordinator's other kinds)."""
        return self.groups.kind_of(group_id) not in (None, self.manager)

    async def heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        if (error := self.serving_error(request.group_id)) is not None:
            return HeartbeatResult(error)
        if self._other_kind(request.group_id):
            return HeartbeatResult(ErrorCode.group_id_not_found, message=(
                f"Group {request.group_id} is not a share group."))
        result = self.manager.heartbeat(request)
        group = self.manager.groups.get(request.group_id)
        if group is not None and group.initialized != group.recorded:
            # Written before the member hears of its new partitions: state created for them
            # must be found when the group is deleted, by whichever broker coordinates it.
            if (error := await self._write_state_partitions(group)) is not None:
                return HeartbeatResult(error)
        return result

    async def start_offsets_set(self, group_id: str, partitions: list[tuple[str, int]]
                                ) -> ErrorCode | None:
        """AlterShareGroupOffsets is about to give these share partitions state."""
        group = self.manager.start_offsets_set(group_id, partitions)
        if group.initialized == group.recorded:
            return None
        return await self._write_state_partitions(group)

    async def _write_state_partitions(self, group: ShareGroup) -> ErrorCode | None:
        """The group's record names every share partition it has now (a failed write is
        made again by the next heartbeat)."""
        initialized = frozenset(group.initialized)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in initialized:
            by_topic.setdefault(topic, []).append(partition)
        # A deleted topic's state cannot be named by its id any more; it goes with the topic.
        topics = [(info.topic_id, name, partitions) for name, partitions in by_topic.items()
                  if (info := self.groups.topics.topic(name)) is not None]
        error = await self.groups.append_group_records(group.group_id, [
            group_records.state_partitions_record(group.group_id, topics)])
        if error is None:
            group.recorded = initialized
        return error

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

    def deletable_state(self, group_id: str) -> list[tuple[str, int]] | None:
        """The share partitions whose state DeleteGroups deletes before the group itself: None
        unless ``group_id`` is a share group that may be deleted now (an error for it, such
        as NON_EMPTY_GROUP, comes from the group coordinator's DeleteGroups)."""
        if (self.serving_error(group_id) is not None or not self.manager.owns(group_id)
                or self.manager.deletion_error(group_id) is not None):
            return None
        return sorted(self.manager.groups[group_id].initialized)
