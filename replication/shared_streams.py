"""What the shared engine (storage.shared) needs from the broker around it: its partitions'
streams as the metadata image holds them, and commits through the active controller
(internal API SHARED_STREAM_COMMIT, docs/internal-apis.md)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from protocol.internal import InternalApiKey, JsonBody
from storage.shared import CommitOutcome, StreamCommit, StreamRange

from .cluster_metadata import MetadataImage
from .raft.leader_connection import LeaderConnection

COMMIT_TIMEOUT_S = 30.0


class CommitNotAnswered(ConnectionError):
    """No active controller answered the commit."""


class BrokerStreamMetadata:
    def __init__(self, node_id: int, image: MetadataImage, controller: LeaderConnection) -> None:
        self.node_id = node_id
        self.image = image
        self.controller = controller

    async def commit(self, commits: list[StreamCommit]) -> list[CommitOutcome]:
        response = await self.controller.call(
            InternalApiKey.SHARED_STREAM_COMMIT,
            JsonBody({"broker_id": self.node_id, "commits": [c.to_wire() for c in commits]}),
            COMMIT_TIMEOUT_S)
        value = response.value
        if value["error_code"] != ErrorCode.none:
            raise CommitNotAnswered(f"{ErrorCode(value['error_code']).name}: "
                                    f"{value.get('error_message', '')}")
        return [CommitOutcome.from_wire(outcome) for outcome in value["outcomes"]]

    def stream(self, topic: str, partition: int) -> list[StreamRange]:
        return self.image.shared_streams.stream(topic, partition)

    def stream_epochs(self, topic: str, partition: int) -> list[tuple[int, int]]:
        return self.image.shared_streams.stream_epochs(topic, partition)
