"""Topic administration and cluster description (configs: handlers/configs.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable

from kio.schema.errors import ErrorCode

from coordinator.controller import ControllerError
from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType
from storage.config import STORAGE_MODES

from ..security.authorize import allowed, checks_acls, cluster_operations
from .metadata import broker_entries
from .registry import RequestContext, handles

log = logging.getLogger(__name__)


async def _on_controller(ctx: RequestContext, request, handle_locally) -> object:
    """Run a topic or config change on the controller (here, or forwarded to it), then wait until this
    broker's metadata shows the change so the client's next request finds it.

    A request another node forwarded here is answered here, never forwarded again: by the
    controller if it is active, else NOT_CONTROLLER (its operations check), and the
    forwarder tries the next voter. During an election, two voters that each took the other
    for the leader bounced a request between them, a new one per hop, until it ended (300
    CreateTopics for one topic, holding both event loops)."""
    channel = ctx.services.controller_channel
    forwarded = (ctx.broker_node is not None and ctx.broker_node >= 0
                 and channel.controller is not None)
    if await channel.becomes_local() or forwarded:
        response = await handle_locally(ctx, request)
    else:
        response = await channel.forward(ctx.header, request)
    await channel.catch_up()
    return response


# A request's entry refused by the ACLs -> its result entry (None: the entry may go on).
Denial = Callable[[RequestContext, Any], Any]


@dataclass(frozen=True, slots=True)
class Screen:
    """How the node a client sent a controller request to keeps what the ACLs refuse from
    reaching the controller: the controller sees the request as forwarded by a broker, so
    the client's principal is checked here. ``deny`` is tried on each entry of the request's
    ``entries`` field; the others are sent, and the answer's ``results`` field gets the
    denials back at their places, the controller's results passed through ``revise``
    (what the principal may not see of them)."""

    entries: tuple[str, ...]  # the field's names across versions (the first one present)
    results: str
    deny: Denial
    revise: Callable[[RequestContext, Any], Any] = lambda ctx, result: result

    async def run(self, ctx: RequestContext, request, handle_locally) -> object:
        field = next(name for name in self.entries if hasattr(request, name))
        entries = getattr(request, field)
        denials = [self.deny(ctx, entry) for entry in entries]
        passed = tuple(entry for entry, denial in zip(entries, denials) if denial is None)
        if len(passed) < len(entries):
            request = replace(request, **{field: passed})
        response = await _on_controller(ctx, request, handle_locally)
        served = iter(getattr(response, self.results))
        return replace(response, **{self.results: tuple(
            self.revise(ctx, next(served)) if denial is None else denial
            for denial in denials)})


@dataclass(frozen=True, slots=True)
class ClusterGate:
    """The same for a request refused as a whole unless its principal may do ``operation``
    on the cluster: ``refused`` builds the answer (CLUSTER_AUTHORIZATION_FAILED)."""

    operation: AclOperation
    refused: Callable[[RequestContext], Any]

    async def run(self, ctx: RequestContext, request, handle_locally) -> object:
        if not allowed(ctx, self.operation, ResourceType.CLUSTER):
            return self.refused(ctx)
        return await _on_controller(ctx, request, handle_locally)


def handles_on_controller(api_key: ApiKey, screen: Screen | ClusterGate | None = None):
    """Register a handler that runs on the controller node (``_on_controller``), after the
    ACL ``screen`` if any."""
    def register(handle_locally):
        async def handler(ctx: RequestContext, request) -> object:
            if screen is not None and checks_acls(ctx):
                return await screen.run(ctx, request, handle_locally)
            return await _on_controller(ctx, request, handle_locally)
        handles(api_key)(handler)
        return handle_locally
    return register


def _check_storage_mode(ctx: RequestContext, topic) -> None:
    """Refuse a storage mode this broker cannot open (no object store configured), before
    the controller records a topic no broker could serve."""
    requested = {c.name: c.value for c in topic.configs}.get(
        "kipper.storage.mode", ctx.services.config.default_storage_mode)
    if requested not in STORAGE_MODES:
        raise ControllerError(
            ErrorCode.invalid_config,
            f"kipper.storage.mode={requested!r} is not one of {', '.join(STORAGE_MODES)}")
    if ctx.services.config.broker_role and requested not in ctx.services.storage_modes:
        raise ControllerError(
            ErrorCode.invalid_config,
            f"kipper.storage.mode={requested} needs an object store: start the brokers with "
            f"--s3-endpoint (available here: {', '.join(sorted(ctx.services.storage_modes))})")


def _topic_denied(ctx: RequestContext, result_entity: str, name: str | None,
                  **fields) -> object:
    return ctx.response(result_entity, name=name, error_code=ErrorCode.topic_authorization_failed,
                        error_message=None, **fields)


def _creation_denial(ctx: RequestContext, topic) -> object | None:
    """CREATE on the cluster, or else on the topic."""
    if (allowed(ctx, AclOperation.CREATE, ResourceType.CLUSTER)
            or allowed(ctx, AclOperation.CREATE, ResourceType.TOPIC, topic.name)):
        return None
    return _topic_denied(ctx, "CreatableTopicResult", topic.name, topic_id=None,
                         topic_config_error_code=0, num_partitions=-1, replication_factor=-1,
                         configs=None)


def _configs_unless_described(ctx: RequestContext, result) -> object:
    """A created topic's configs (v5+) are left out unless the principal may
    DESCRIBE_CONFIGS it; the topic is created all the same."""
    if (ctx.version < 5 or result.error_code != ErrorCode.none
            or allowed(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, result.name)):
        return result
    return replace(result, configs=(),
                   topic_config_error_code=ErrorCode.topic_authorization_failed)


@handles_on_controller(ApiKey.CREATE_TOPICS, Screen(
    ("topics",), "topics", _creation_denial, _configs_unless_described))
async def create_topics(ctx: RequestContext, request) -> object:
    results = []
    for topic in request.topics:
        try:
            _check_storage_mode(ctx, topic)
            created = await ctx.services.controller.create_topic(
                topic.name, topic.num_partitions, topic.replication_factor,
                {c.name: c.value for c in topic.configs}, request.validate_only,
                [(a.partition_index, [int(b) for b in a.broker_ids]) for a in topic.assignments])
        except ControllerError as e:
            log.info("create topic %r refused: %s", topic.name, e.message)
            results.append(ctx.response(
                "CreatableTopicResult", name=topic.name, topic_id=None, error_code=e.error_code,
                error_message=e.message, topic_config_error_code=0, num_partitions=-1,
                replication_factor=-1, configs=None))
            continue
        configs = tuple(
            ctx.response("CreatableTopicConfigs", name=c.name, value=c.value,
                         read_only=c.read_only, config_source=c.source,
                         is_sensitive=c.sensitive)
            # Configs are returned from v5 on.
            for c in (ctx.services.dynamic_configs.describe_topic(created)
                      if created and ctx.version >= 5 else ()))
        results.append(ctx.response(
            "CreatableTopicResult", name=topic.name,
            topic_id=created.topic_id if created else None, error_code=ErrorCode.none,
            error_message=None, topic_config_error_code=0,
            num_partitions=len(created.partitions) if created else topic.num_partitions,
            replication_factor=(len(created.partitions[0].replicas) if created
                                else topic.replication_factor),
            configs=configs))
    return ctx.response("CreateTopicsResponse", throttle_time=0, topics=tuple(results))


def _deletion_denial(ctx: RequestContext, topic) -> object | None:
    """DELETE on the cluster, or else DESCRIBE (a topic whose existence the client may not
    learn) and DELETE on the topic. ``topic`` is a name (v1-5) or a name/id entry (v6+);
    an unknown id is the controller's to answer."""
    if allowed(ctx, AclOperation.DELETE, ResourceType.CLUSTER):
        return None
    name, topic_id = (topic, None) if isinstance(topic, str) else (topic.name, topic.topic_id)
    if name is None:
        found = ctx.services.image.topics_by_id.get(topic_id)
        if found is None:
            return None
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, found.name):
            return _topic_denied(ctx, "DeletableTopicResult", None, topic_id=topic_id)
        name = found.name
    if (allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
            and allowed(ctx, AclOperation.DELETE, ResourceType.TOPIC, name)):
        return None
    return _topic_denied(ctx, "DeletableTopicResult", name, topic_id=topic_id)


@handles_on_controller(ApiKey.DELETE_TOPICS, Screen(
    ("topics", "topic_names"), "responses", _deletion_denial))
async def delete_topics(ctx: RequestContext, request) -> object:
    image = ctx.services.controller.image
    if hasattr(request, "topic_names"):
        asked = [(name, None) for name in request.topic_names]
    else:
        asked = [(t.name, t.topic_id) for t in request.topics]
    results = []
    for name, topic_id in asked:
        if name is None and topic_id is not None:
            found = image.topics_by_id.get(topic_id)
            name = found.name if found else None
        try:
            if name is None:
                raise ControllerError(ErrorCode.unknown_topic_id, "Topic id is unknown")
            deleted = await ctx.services.controller.delete_topic(name)
            results.append(ctx.response("DeletableTopicResult", name=name,
                                        topic_id=deleted.topic_id, error_code=ErrorCode.none,
                                        error_message=None))
        except ControllerError as e:
            results.append(ctx.response("DeletableTopicResult", name=name, topic_id=topic_id,
                                        error_code=e.error_code, error_message=e.message))
    return ctx.response("DeleteTopicsResponse", throttle_time=0, responses=tuple(results))


def _partitions_denial(ctx: RequestContext, topic) -> object | None:
    """ALTER on the topic."""
    if allowed(ctx, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
        return None
    return _topic_denied(ctx, "CreatePartitionsTopicResult", topic.name)


@handles_on_controller(ApiKey.CREATE_PARTITIONS, Screen(
    ("topics",), "results", _partitions_denial))
async def create_partitions(ctx: RequestContext, request) -> object:
    results = []
    for topic in request.topics:
        try:
            assignments = None if topic.assignments is None else [
                [int(b) for b in a.broker_ids] for a in topic.assignments]
            await ctx.services.controller.create_partitions(topic.name, topic.count,
                                                            request.validate_only, assignments)
            error, message = ErrorCode.none, None
        except ControllerError as e:
            error, message = e.error_code, e.message
        results.append(ctx.response("CreatePartitionsTopicResult", name=topic.name,
                                    error_code=error, error_message=message))
    return ctx.response("CreatePartitionsResponse", throttle_time=0, results=tuple(results))


@handles(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(ctx: RequestContext, request) -> object:
    brokers = broker_entries(ctx, "DescribeClusterBroker", "broker_id")
    return ctx.response("DescribeClusterResponse", throttle_time=0, error_code=ErrorCode.none,
                        error_message=None, endpoint_type=1,
                        cluster_id=ctx.services.config.cluster_id,
                        controller_id=ctx.services.controller_id, brokers=brokers,
                        cluster_authorized_operations=cluster_operations(
                            ctx, request.include_cluster_authorized_operations))
