"""Consumer-group APIs: FindCoordinator, the classic group protocol, committed offsets
(also those a transactional producer commits, TxnOffsetCommit).

The handlers translate between kio entities and coordinator.group, and check
what Kafka checks before the coordinator (group id, topic existence, metadata size).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.coordinator_log import CoordinatorLog, TxnProducer
from coordinator.group.classic import JoinRequest, JoinResult
from coordinator.group.offsets import OffsetCommit
from coordinator.group.service import GroupCoordinator
from coordinator.group.state import GroupState
from coordinator.internal_topic import OFFSETS_TOPIC
from coordinator.transaction.partition_adder import RETRIABLE_ADD_ERRORS
from protocol.apis import ApiKey
from protocol.build import millis
from replication.acls import AclOperation, ResourceType

from ..security.authorize import OMITTED, allowed, authorized_operations, denied_names
from .registry import RequestContext, handles
from .share import delete_share_group_state

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
NO_OFFSET = -1


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    return ctx.services.group_coordinator


def _client_host(ctx: RequestContext) -> str:
    # Kafka shows a member's host as Java's InetAddress.toString() does: "/127.0.0.1".
    return "/" + ctx.peer.rsplit(":", 1)[0]


def _partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    known = ctx.services.image.topics.get(topic)
    return known is not None and partition in known.partitions


@handles(ApiKey.FIND_COORDINATOR)
async def find_coordinator(ctx: RequestContext, request) -> object:
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    store = _coordinator_log(ctx, key_type)
    keys = request.coordinator_keys if ctx.version >= 4 else (request.key,)
    # The coordinator's topic is created for a client allowed to find some key only.
    if store is not None and any(_key_denial(ctx, key_type, key) is None for key in keys):
        await store.ensure_topic()
    if ctx.version >= 4:
        return ctx.response("FindCoordinatorResponse", throttle_time=0, coordinators=tuple(
            ctx.response("Coordinator", key=key, **_locate(ctx, key_type, key))
            for key in request.coordinator_keys))
    return ctx.response("FindCoordinatorResponse", throttle_time=0,
                        **_locate(ctx, key_type, request.key))


def _coordinator_log(ctx: RequestContext, key_type: int) -> CoordinatorLog | None:
    """The internal topic of the coordinator of ``key_type`` (group or transaction)."""
    if key_type == GROUP_KEY_TYPE:
        return _coordinator(ctx).store
    if key_type == TRANSACTION_KEY_TYPE:
        return ctx.services.transaction_coordinator.store
    return None


def _key_denial(ctx: RequestContext, key_type: int, key: str) -> ErrorCode | None:
    """Why the client may not find ``key``'s coordinator (DESCRIBE on the group or the
    transactional id), or None."""
    if key_type == GROUP_KEY_TYPE:
        allowed_here = allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, key)
        return None if allowed_here else ErrorCode.group_authorization_failed
    allowed_here = allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
    return None if allowed_here else ErrorCode.transactional_id_authorization_failed


def _locate(ctx: RequestContext, key_type: int, key: str) -> dict:
    def failure(error: ErrorCode, message: str | None) -> dict:
        return dict(error_code=error, error_message=message, node_id=-1, host="", port=-1)

    store = _coordinator_log(ctx, key_type)
    if store is None:
        return failure(ErrorCode.invalid_request, f"unknown coordinator key type {key_type}")
    if (denial := _key_denial(ctx, key_type, key)) is not None:
        return failure(denial, None)
    node = store.coordinator_node(store.partition_for(key))
    if node is None:
        return failure(ErrorCode.coordinator_not_available,
                       "the key's partition of its coordinator's topic has no leader")
    endpoint = node.endpoint(ctx.listener_name)
    if endpoint is None:
        return failure(ErrorCode.coordinator_not_available,
                       f"the coordinator has no {ctx.listener_name} listener")
    return dict(error_code=ErrorCode.none, error_message=None, node_id=node.node_id,
                host=endpoint[0], port=endpoint[1])


@handles(ApiKey.JOIN_GROUP)
async def join_group(ctx: RequestContext, request) -> object:
    def answer(result) -> object:
        protocol_name = result.protocol_name
        if ctx.version < 7 and protocol_name is None:
            protocol_name = ""  # not nullable before v7
        return ctx.response(
            "JoinGroupResponse", throttle_time=0, error_code=result.error,
            generation_id=result.generation_id, protocol_type=result.protocol_type,
            protocol_name=protocol_name, leader=result.leader_id, skip_assignment=False,
            member_id=result.member_id, members=tuple(
                ctx.response("JoinGroupResponseMember", member_id=member_id,
                             group_instance_id=instance_id, metadata=metadata)
                for member_id, instance_id, metadata in result.members))

    if not _may_read_group(ctx, request.group_id):
        return answer(JoinResult(ErrorCode.group_authorization_failed, request.member_id))
    if not request.group_id:
        return answer(JoinResult(ErrorCode.invalid_group_id, request.member_id))
    session_timeout_ms = millis(request.session_timeout)
    return answer(await _coordinator(ctx).join_group(JoinRequest(
        group_id=request.group_id, member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "", client_host=_client_host(ctx),
        session_timeout_ms=session_timeout_ms,
        # v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout_ms=millis(getattr(request, "rebalance_timeout", session_timeout_ms)),
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=ctx.version >= 4)))


@handles(ApiKey.SYNC_GROUP)
async def sync_group(ctx: RequestContext, request) -> object:
    if not _may_read_group(ctx, request.group_id):
        return ctx.response("SyncGroupResponse", throttle_time=0,
                            error_code=ErrorCode.group_authorization_failed, assignment=b"")
    if not request.group_id:
        return ctx.response("SyncGroupResponse", throttle_time=0,
                            error_code=ErrorCode.invalid_group_id, assignment=b"")
    result = await _coordinator(ctx).sync_group(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments})
    return ctx.response("SyncGroupResponse", throttle_time=0, error_code=result.error,
                        protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                        assignment=result.assignment)


@handles(ApiKey.HEARTBEAT)
async def heartbeat(ctx: RequestContext, request) -> object:
    if not _may_read_group(ctx, request.group_id):
        error = ErrorCode.group_authorization_failed
    elif not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        error = _coordinator(ctx).heartbeat(request.group_id, request.generation_id,
                                            request.member_id,
                                            getattr(request, "group_instance_id", None))
    return ctx.response("HeartbeatResponse", throttle_time=0, error_code=error)


@handles(ApiKey.LEAVE_GROUP)
async def leave_group(ctx: RequestContext, request) -> object:
    if ctx.version < 3:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    if not _may_read_group(ctx, request.group_id):
        error, member_errors = ErrorCode.group_authorization_failed, []
    elif not request.group_id:
        error, member_errors = ErrorCode.invalid_group_id, []
    else:
        error, member_errors = _coordinator(ctx).leave_group(request.group_id, leaving)
    if ctx.version < 3:
        # One member, one error code: the group's if it has one, else the member's.
        if error == ErrorCode.none and member_errors:
            error = member_errors[0]
        return ctx.response("LeaveGroupResponse", throttle_time=0, error_code=error)
    return ctx.response("LeaveGroupResponse", throttle_time=0, error_code=error, members=tuple(
        ctx.response("MemberResponse", member_id=member_id, group_instance_id=instance_id,
                     error_code=member_error)
        for (member_id, instance_id), member_error in zip(leaving, member_errors)))


def _offsets_to_commit(ctx: RequestContext, topics
                       ) -> tuple[dict[tuple[str, int], ErrorCode],
                                  dict[tuple[str, int], OffsetCommit]]:
    """What OffsetCommit and TxnOffsetCommit check before the coordinator: the refused
    partitions with their errors, and the offsets to commit."""
    max_metadata = _coordinator(ctx).config.offset_metadata_max_bytes
    denied = denied_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in topics))
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetCommit] = {}
    for topic in topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if topic.name in denied:
                errors[key] = ErrorCode.topic_authorization_failed
            elif not _partition_exists(ctx, *key):
                errors[key] = ErrorCode.unknown_topic_or_partition
            elif len(metadata) > max_metadata:
                errors[key] = ErrorCode.offset_metadata_too_large
            else:
                offsets[key] = OffsetCommit(p.committed_offset,
                                            getattr(p, "committed_leader_epoch", -1), metadata)
    return errors, offsets


def _every_partition(topics, error: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
    return {(topic.name, p.partition_index): error for topic in topics for p in topic.partitions}


def _may_read_group(ctx: RequestContext, group_id: str) -> bool:
    """READ on the group: what a member and a committer of its offsets need."""
    return allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def _commit_response(ctx: RequestContext, response: str, topics,
                     errors: dict[tuple[str, int], ErrorCode]) -> object:
    """``response`` (OffsetCommitResponse, TxnOffsetCommitResponse) with the error of each
    partition of ``topics``."""
    return ctx.response(response, throttle_time=0, topics=tuple(
        ctx.response(f"{response}Topic", name=topic.name, partitions=tuple(
            ctx.response(f"{response}Partition", partition_index=p.partition_index,
                         error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions))
        for topic in topics))


@handles(ApiKey.OFFSET_COMMIT)
async def offset_commit(ctx: RequestContext, request) -> object:
    if not _may_read_group(ctx, request.group_id):
        return _commit_response(ctx, "OffsetCommitResponse", request.topics,
                                _every_partition(request.topics,
                                                 ErrorCode.group_authorization_failed))
    errors, offsets = _offsets_to_commit(ctx, request.topics)
    if offsets:
        errors |= await _coordinator(ctx).commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            getattr(request, "group_instance_id", None), offsets)
    return _commit_response(ctx, "OffsetCommitResponse", request.topics, errors)


# TxnOffsetCommit v5+ speaks transaction protocol version 2: no AddOffsetsToTxn before it.
_ADDS_OFFSETS_PARTITION_SINCE = 5


@handles(ApiKey.TXN_OFFSET_COMMIT)
async def txn_offset_commit(ctx: RequestContext, request) -> object:
    """A transactional producer's sendOffsetsToTransaction, after AddOffsetsToTxn: pending
    until the transaction's marker reaches the group's __consumer_offsets partition. Before
    v3 there is no member id nor generation, and the group's membership is not checked."""
    refusal = (ErrorCode.transactional_id_authorization_failed
               if not allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              request.transactional_id)
               else None if _may_read_group(ctx, request.group_id)
               else ErrorCode.group_authorization_failed)
    if refusal is not None:
        return _commit_response(ctx, "TxnOffsetCommitResponse", request.topics,
                                _every_partition(request.topics, refusal))
    errors, offsets = _offsets_to_commit(ctx, request.topics)
    if not request.group_id:
        errors |= dict.fromkeys(offsets, ErrorCode.invalid_group_id)
    elif offsets and (error := await _add_offsets_to_transaction(ctx, request)) is not None:
        errors |= dict.fromkeys(offsets, error)
    elif offsets:
        errors |= await _coordinator(ctx).commit_offsets(
            request.group_id, getattr(request, "generation_id", -1),
            getattr(request, "member_id", ""), getattr(request, "group_instance_id", None),
            offsets, TxnProducer(request.producer_id, request.producer_epoch))
    return _commit_response(ctx, "TxnOffsetCommitResponse", request.topics, errors)


async def _add_offsets_to_transaction(ctx: RequestContext, request) -> ErrorCode | None:
    """TxnOffsetCommit v5+ (transaction protocol version 2, KIP-890): the producer sent no
    AddOffsetsToTxn, so the group's __consumer_offsets partition joins its transaction here,
    before the offsets are written; the error that refuses them all, if it could not."""
    adder = ctx.services.transaction_partitions
    if ctx.version < _ADDS_OFFSETS_PARTITION_SINCE or adder is None:
        return None
    store = _coordinator(ctx).store
    partition = store.partition_for(request.group_id)
    leader = store.coordinator_node(partition)
    if leader is None or leader.node_id != ctx.services.config.node_id:
        return None  # not this group's coordinator: commit_offsets answers NOT_COORDINATOR
    errors = await adder.add(request.transactional_id, request.producer_id,
                             request.producer_epoch, [(OFFSETS_TOPIC, partition)])
    error = errors.get((OFFSETS_TOPIC, partition))
    return ErrorCode.coordinator_not_available if error in RETRIABLE_ADD_ERRORS else error


@handles(ApiKey.OFFSET_FETCH)
async def offset_fetch(ctx: RequestContext, request) -> object:
    asked = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    coordinator = _coordinator(ctx)
    if allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        error, committed = coordinator.fetch_offsets(request.group_id, asked)
    else:
        error, committed = ErrorCode.group_authorization_failed, {}
    if error != ErrorCode.none:
        if ctx.version >= 2:
            return ctx.response("OffsetFetchResponse", throttle_time=0, error_code=error,
                                topics=())
        # v1 has no group-level error: every partition carries it.
        committed = dict.fromkeys(asked or [])
    # v7: a read_committed consumer must not start from an offset a transaction may still
    # replace; it retries UNSTABLE_OFFSET_COMMIT until the transaction is decided.
    unstable = (coordinator.pending_partitions(request.group_id)
                if getattr(request, "require_stable", False) else set())
    partition_error = ErrorCode.none if ctx.version >= 2 else error
    # Offsets of topics the client may not describe: refused when named, else left out.
    denied = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                          (topic for topic, _ in committed))
    by_topic: dict[str, list] = {}
    for (topic, index), found in committed.items():
        if topic in denied:
            if asked is None:
                continue
            found, found_error = None, ErrorCode.topic_authorization_failed
        elif (topic, index) in unstable:
            found, found_error = None, ErrorCode.unstable_offset_commit
        else:
            found_error = partition_error
        by_topic.setdefault(topic, []).append(ctx.response(
            "OffsetFetchResponsePartition", partition_index=index,
            committed_offset=found.offset if found else NO_OFFSET,
            committed_leader_epoch=found.leader_epoch if found else -1,
            metadata=found.metadata if found else "", error_code=found_error))
    return ctx.response("OffsetFetchResponse", throttle_time=0, error_code=ErrorCode.none,
                        topics=tuple(ctx.response("OffsetFetchResponseTopic", name=topic,
                                                  partitions=tuple(partitions))
                                     for topic, partitions in by_topic.items()))


@handles(ApiKey.LIST_GROUPS)
async def list_groups(ctx: RequestContext, request) -> object:
    # v4+ filters by state, v5+ by type (classic, consumer, share); both case-insensitive, as
    # Kafka's parsers are.
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    error, groups = _coordinator(ctx).list_groups()
    groups = [g for g in groups if (not types or g.group_type in types)
              and (not states or g.state.lower() in states)]
    if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        denied = denied_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                              (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id not in denied]
    listed = [ctx.response("ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type,
                           group_state=g.state, group_type=g.group_type)
              for g in groups]
    return ctx.response("ListGroupsResponse", throttle_time=0, error_code=error,
                        groups=tuple(listed))


@handles(ApiKey.DESCRIBE_GROUPS)
async def describe_groups(ctx: RequestContext, request) -> object:
    requested = getattr(request, "include_authorized_operations", False)  # v3+
    return ctx.response("DescribeGroupsResponse", throttle_time=0, groups=tuple(
        _describe(ctx, group_id, authorized_operations(ctx, requested, ResourceType.GROUP,
                                                       group_id))
        if allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id) else
        ctx.response("DescribedGroup", error_code=ErrorCode.group_authorization_failed,
                     group_id=group_id, group_state="", protocol_type="", protocol_data="",
                     members=(), authorized_operations=OMITTED)
        for group_id in request.groups))


def _describe(ctx: RequestContext, group_id: str, operations: int) -> object:
    error, group = _coordinator(ctx).describe_group(group_id)
    if error != ErrorCode.none or group is None:
        # An unknown group is described as Dead, without an error (as Kafka does).
        return ctx.response("DescribedGroup", error_code=error, group_id=group_id,
                            group_state=GroupState.DEAD.value if group is None else "",
                            protocol_type="", protocol_data="", members=(),
                            authorized_operations=operations)
    # Member metadata and assignments only mean something once the group is stable.
    stable = group.in_state(GroupState.STABLE)
    return ctx.response(
        "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
        group_state=group.state.value, protocol_type=group.protocol_type or "",
        protocol_data=group.protocol_name if stable else "",
        authorized_operations=operations, members=tuple(
            ctx.response("DescribedGroupMember", member_id=m.member_id,
                         group_instance_id=m.group_instance_id, client_id=m.client_id,
                         client_host=m.client_host,
                         member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                         member_assignment=m.assignment if stable else b"")
            for m in group.members.values()))


@handles(ApiKey.DELETE_GROUPS)
async def delete_groups(ctx: RequestContext, request) -> object:
    denied = denied_names(ctx, AclOperation.DELETE, ResourceType.GROUP, request.groups_names)
    permitted = [group_id for group_id in request.groups_names if group_id not in denied]
    # Empty share groups' share-partition state goes first (KIP-932), then the groups.
    state_left = await delete_share_group_state(ctx, permitted)
    results = await _coordinator(ctx).delete_groups(
        [group_id for group_id in permitted if group_id not in state_left])
    results |= state_left | dict.fromkeys(denied, ErrorCode.group_authorization_failed)
    return ctx.response("DeleteGroupsResponse", throttle_time=0, results=tuple(
        ctx.response("DeletableGroupResult", group_id=group_id, error_code=error)
        for group_id, error in results.items()))


@handles(ApiKey.OFFSET_DELETE)
async def offset_delete(ctx: RequestContext, request) -> object:
    if not allowed(ctx, AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return ctx.response("OffsetDeleteResponse", throttle_time=0, topics=(),
                            error_code=ErrorCode.group_authorization_failed)
    asked = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    denied = denied_names(ctx, AclOperation.READ, ResourceType.TOPIC,
                          (t.name for t in request.topics))
    errors = {tp: ErrorCode.topic_authorization_failed if tp[0] in denied
              else ErrorCode.unknown_topic_or_partition for tp in asked
              if tp[0] in denied or not _partition_exists(ctx, *tp)}
    error, deleted = await _coordinator(ctx).delete_offsets(
        request.group_id, [tp for tp in asked if tp not in errors])
    if error != ErrorCode.none:
        return ctx.response("OffsetDeleteResponse", error_code=error, throttle_time=0, topics=())
    errors |= deleted
    return ctx.response("OffsetDeleteResponse", error_code=ErrorCode.none, throttle_time=0,
                        topics=tuple(
        ctx.response("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
            ctx.response("OffsetDeleteResponsePartition", partition_index=p.partition_index,
                         error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions))
        for t in request.topics))
