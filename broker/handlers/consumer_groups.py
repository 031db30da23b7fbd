"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The handlers translate between kio entities and ``coordinator.group.consumer``; the group
coordinator runs the protocol. Topics travel by topic id, as on the wire.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.assignors import Assignment
from coordinator.group.consumer import HeartbeatRequest
from coordinator.group.consumer_group import ConsumerGroup, ConsumerMember
from coordinator.group.service import GroupCoordinator
from protocol.apis import ApiKey
from protocol.build import millis
from replication.acls import AclOperation, ResourceType

from ..security.authorize import allowed, authorized_operations
from .groups import _client_host
from .registry import RequestContext, handles

# ConsumerGroupHeartbeat v1 (KIP-1082): the client generates its member id.
_CLIENT_MEMBER_ID_SINCE = 1
# ConsumerGroupDescribe v1's member type of a member that speaks the consumer protocol.
_CONSUMER_MEMBER_TYPE = 1


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.services.group_coordinator


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT)
async def consumer_group_heartbeat(ctx: RequestContext, request) -> object:
    coordinator = _coordinator(ctx)
    if not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.response("ConsumerGroupHeartbeatResponse", throttle_time=0,
                            error_code=ErrorCode.group_authorization_failed, member_epoch=-1,
                            heartbeat_interval=0)
    owned = None if request.topic_partitions is None else frozenset(
        (t.topic_id, p) for t in request.topic_partitions for p in t.partitions)
    result = await coordinator.consumer_group_heartbeat(HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor, owned=owned,
        client_id=ctx.header.client_id or "", client_host=_client_host(ctx),
        client_chooses_member_id=ctx.version >= _CLIENT_MEMBER_ID_SINCE))
    assignment = None if result.assignment is None else ctx.response(
        "Assignment", topic_partitions=_topic_partitions(ctx, result.assignment))
    return ctx.response("ConsumerGroupHeartbeatResponse", throttle_time=0,
                        error_code=result.error, error_message=result.error_message,
                        member_id=result.member_id, member_epoch=result.member_epoch,
                        heartbeat_interval=result.heartbeat_interval_ms,
                        assignment=assignment)


def _topic_partitions(ctx: RequestContext, assignment: Assignment) -> tuple:
    return tuple(ctx.response("TopicPartitions", topic_id=topic_id, partitions=tuple(
        sorted(partitions))) for topic_id, partitions in assignment.items())


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE)
async def consumer_group_describe(ctx: RequestContext, request) -> object:
    return ctx.response("ConsumerGroupDescribeResponse", throttle_time=0, groups=tuple(
        _describe(ctx, group_id, request.include_authorized_operations)
        for group_id in request.group_ids))


def _describe(ctx: RequestContext, group_id: str, include_operations: bool) -> object:
    def failure(error: ErrorCode, message: str | None = None) -> object:
        return ctx.response("DescribedGroup", error_code=error, error_message=message,
                            group_id=group_id, group_state="", group_epoch=-1,
                            assignment_epoch=-1, assignor_name="", members=())

    if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return failure(ErrorCode.group_authorization_failed)
    coordinator = _coordinator(ctx)
    error, group = coordinator.describe_consumer_group(group_id)
    if group is None:
        message = (f"Group {group_id} not found." if error == ErrorCode.group_id_not_found
                   else None)
        return failure(error, message)
    return ctx.response(
        "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
        group_state=group.state.value, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(coordinator.config.consumer_assignors[0]),
        members=tuple(_member(ctx, group, m) for m in group.members.values()),
        authorized_operations=authorized_operations(ctx, include_operations,
                                                    ResourceType.GROUP, group_id))


def _member(ctx: RequestContext, group: ConsumerGroup, member: ConsumerMember) -> object:
    info = member.info
    return ctx.response(
        "Member", member_id=member.member_id, instance_id=info.instance_id,
        rack_id=info.rack_id, member_epoch=member.member_epoch, client_id=info.client_id,
        client_host=info.client_host, subscribed_topic_names=info.subscribed_topic_names,
        subscribed_topic_regex=info.subscribed_topic_regex,
        assignment=_named_assignment(ctx, member.current.assigned),
        target_assignment=_named_assignment(ctx, group.target.get(member.member_id, {})),
        member_type=_CONSUMER_MEMBER_TYPE)


def _named_assignment(ctx: RequestContext, assignment: Assignment) -> object:
    topics = _coordinator(ctx).topics
    named = []
    for topic_id, partitions in assignment.items():
        topic = topics.topic_by_id(topic_id)
        if topic is not None:
            named.append(ctx.response("TopicPartitions", topic_id=topic_id,
                                      topic_name=topic.name, partitions=tuple(sorted(partitions))))
    return ctx.response("Assignment", topic_partitions=tuple(named))
