"""Where partitions' replicas live and which one leads: AlterPartitionReassignments and
ListPartitionReassignments (KIP-455), ElectLeaders (KIP-460). The controller decides
(coordinator.controller); like topic changes these run on it, forwarded when it runs
elsewhere, and answer once this broker's metadata shows the change."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from coordinator.controller import ControllerError, Election
from protocol.apis import ApiKey

from replication.acls import AclOperation

from .admin import ClusterGate, handles_on_controller
from .registry import RequestContext

log = logging.getLogger(__name__)


DENIED = ErrorCode.cluster_authorization_failed


@handles_on_controller(ApiKey.ALTER_PARTITION_REASSIGNMENTS, ClusterGate(
    AclOperation.ALTER, lambda ctx: ctx.response(
        "AlterPartitionReassignmentsResponse", throttle_time=0, error_code=DENIED,
        error_message=None, responses=())))
async def alter_partition_reassignments(ctx: RequestContext, request) -> object:
    topics = []
    for topic in request.topics:
        results = []
        for partition in topic.partitions:
            target = None if partition.replicas is None else [int(r) for r in partition.replicas]
            try:
                await ctx.services.controller.alter_partition_reassignment(
                    topic.name, partition.partition_index, target)
                error, message = ErrorCode.none, None
            except ControllerError as e:
                log.info("reassignment of %s-%d refused: %s", topic.name,
                         partition.partition_index, e.message)
                error, message = e.error_code, e.message
            results.append(ctx.response("ReassignablePartitionResponse",
                                        partition_index=partition.partition_index,
                                        error_code=error, error_message=message))
        topics.append(ctx.response("ReassignableTopicResponse", name=topic.name,
                                   partitions=tuple(results)))
    return ctx.response("AlterPartitionReassignmentsResponse", throttle_time=0,
                        error_code=ErrorCode.none, error_message=None, responses=tuple(topics))


@handles_on_controller(ApiKey.LIST_PARTITION_REASSIGNMENTS, ClusterGate(
    AclOperation.DESCRIBE, lambda ctx: ctx.response(
        "ListPartitionReassignmentsResponse", throttle_time=0, error_code=DENIED,
        error_message=None, topics=())))
async def list_partition_reassignments(ctx: RequestContext, request) -> object:
    asked = None if request.topics is None else [
        (t.name, [int(p) for p in t.partition_indexes]) for t in request.topics]
    by_topic: dict[str, list] = {}
    for info in ctx.services.controller.ongoing_reassignments(asked):
        by_topic.setdefault(info.topic, []).append(ctx.response(
            "OngoingPartitionReassignment", partition_index=info.partition,
            replicas=tuple(info.replicas), adding_replicas=tuple(info.adding_replicas),
            removing_replicas=tuple(info.removing_replicas)))
    return ctx.response(
        "ListPartitionReassignmentsResponse", throttle_time=0, error_code=ErrorCode.none,
        error_message=None, topics=tuple(
            ctx.response("OngoingTopicReassignment", name=name, partitions=tuple(partitions))
            for name, partitions in by_topic.items()))


@handles_on_controller(ApiKey.ELECT_LEADERS, ClusterGate(
    AclOperation.ALTER, lambda ctx: ctx.response(
        "ElectLeadersResponse", throttle_time=0, error_code=DENIED,
        replica_election_results=())))
async def elect_leaders(ctx: RequestContext, request) -> object:
    # v0 has no election type: it elects preferred leaders.
    election_type = getattr(request, "election_type", Election.PREFERRED)
    if election_type not in tuple(Election):
        return ctx.response("ElectLeadersResponse", throttle_time=0,
                            error_code=ErrorCode.invalid_request,
                            replica_election_results=())
    asked = None if request.topic_partitions is None else [
        (t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
    results = await ctx.services.controller.elect_leaders(Election(election_type), asked)
    by_topic: dict[str, list] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(ctx.response(
            "PartitionResult", partition_id=result.partition, error_code=result.error,
            error_message=result.message))
    return ctx.response(
        "ElectLeadersResponse", throttle_time=0, error_code=ErrorCode.none,
        replica_election_results=tuple(
            ctx.response("ReplicaElectionResult", topic=topic, partition_result=tuple(results))
            for topic, results in by_topic.items()))
