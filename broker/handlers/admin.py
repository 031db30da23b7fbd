"""Topic administration and cluster description (configs: handlers/configs.py)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from coordinator.controller import ControllerError
from protocol.apis import ApiKey
from storage.config import STORAGE_MODES

from ..authorized_operations import cluster_operations
from .metadata import broker_entries
from .registry import RequestContext, handles

log = logging.getLogger(__name__)


async def _on_controller(ctx: RequestContext, request, handle_locally) -> object:
    """Run a topic or config change on the controller (here, or forwarded to it), then wait until this
    broker's metadata shows the change so the client's next request finds it."""
    if ctx.services.controller is not None:
        response = await handle_locally(ctx, request)
    else:
        response = await ctx.services.controller_channel.forward(ctx.header, request)
    await ctx.services.controller_channel.catch_up()
    return response


def handles_on_controller(api_key: ApiKey):
    """Register a handler that runs on the controller node (``_on_controller``)."""
    def register(handle_locally):
        async def handler(ctx: RequestContext, request) -> object:
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


@handles_on_controller(ApiKey.CREATE_TOPICS)
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


@handles_on_controller(ApiKey.DELETE_TOPICS)
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


@handles_on_controller(ApiKey.CREATE_PARTITIONS)
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
                            request.include_cluster_authorized_operations))
