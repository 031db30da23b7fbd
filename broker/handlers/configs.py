"""Configs of topics, brokers and groups: DescribeConfigs, IncrementalAlterConfigs (KIP-339)
and AlterConfigs (the legacy replace-all form).

Changes run on the controller, which validates them and appends a ``config`` (topic),
``broker_config`` (dynamic broker config, KIP-226) or ``group_config`` (KIP-848/KIP-932 group
configs) record; the handler answers once this broker's metadata shows the change. What a
change does to the logs is the replica layer's (replication.dynamic_config, ReplicaManager):
the handlers know no storage mode; what a group config does, the group coordinators'
(coordinator.group_config.GroupConfigs).
"""

from __future__ import annotations

import enum
from collections import Counter

from kio.schema.errors import ErrorCode

from coordinator.config_changes import ConfigChange, ConfigOp
from coordinator.controller import ControllerError
from coordinator.group_config import GroupConfigValue
from protocol.apis import ApiKey
from replication.acls import CLUSTER_RESOURCE_NAME, AclOperation
from replication.acls import ResourceType as AclResourceType
from replication.broker_configs import ConfigSource
from replication.dynamic_config import ConfigSynonym, DescribedConfig

from ..security.authorize import allowed
from .admin import Screen, handles_on_controller
from .registry import RequestContext, handles


class ResourceType(enum.IntEnum):
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


# DescribeConfigs config_type of each ConfigDef kind (Kafka's ConfigType).
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7, "class": 8, "password": 9}


class ResourceError(Exception):
    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


# The ACL resource a config resource's checks are on, and the error their denial answers.
_ACL_RESOURCES: dict[int, tuple[AclResourceType, ErrorCode]] = {
    ResourceType.TOPIC: (AclResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    ResourceType.BROKER: (AclResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    ResourceType.BROKER_LOGGER: (AclResourceType.CLUSTER,
                                 ErrorCode.cluster_authorization_failed),
    ResourceType.GROUP: (AclResourceType.GROUP, ErrorCode.group_authorization_failed),
}


def _check_allowed(ctx: RequestContext, operation: AclOperation, resource) -> None:
    """Refuse ``resource`` (ResourceError) if the principal may not do ``operation`` on it:
    a topic or group by name, broker-wide configs on the cluster (Kafka's ConfigHelper)."""
    acl_resource = _ACL_RESOURCES.get(resource.resource_type)
    if acl_resource is None:
        return  # an unknown type is refused as such
    resource_type, error = acl_resource
    name = (resource.resource_name if resource_type != AclResourceType.CLUSTER
            else CLUSTER_RESOURCE_NAME)
    if not allowed(ctx, operation, resource_type, name):
        raise ResourceError(error, None)


def _alter_denial(ctx: RequestContext, resource) -> object | None:
    """An AlterConfigs/IncrementalAlterConfigs resource's answer if ALTER_CONFIGS is
    denied (checked where the client sent it, see admin.Screen)."""
    try:
        _check_allowed(ctx, AclOperation.ALTER_CONFIGS, resource)
        return None
    except ResourceError as e:
        return ctx.response("AlterConfigsResourceResponse", error_code=e.error_code,
                            error_message=e.message, resource_type=resource.resource_type,
                            resource_name=resource.resource_name)


_ALTER_SCREEN = Screen(("resources",), "responses", _alter_denial)


# --- DescribeConfigs -------------------------------------------------------------------------

@handles(ApiKey.DESCRIBE_CONFIGS)
async def describe_configs(ctx: RequestContext, request) -> object:
    results = []
    for resource in request.resources:
        error, message, configs = ErrorCode.none, None, []
        try:
            _check_allowed(ctx, AclOperation.DESCRIBE_CONFIGS, resource)
            configs = _described(ctx, resource.resource_type, resource.resource_name)
        except ResourceError as e:
            error, message = e.error_code, e.message
        if resource.configuration_keys is not None:
            keys = set(resource.configuration_keys)
            configs = [c for c in configs if c.name in keys]
        entries = tuple(_entry(ctx, request, config) for config in configs)
        results.append(ctx.response("DescribeConfigsResult", error_code=error,
                                    error_message=message, resource_type=resource.resource_type,
                                    resource_name=resource.resource_name, configs=entries))
    return ctx.response("DescribeConfigsResponse", throttle_time=0, results=tuple(results))


def _described(ctx: RequestContext, resource_type: int, name: str) -> list[DescribedConfig]:
    configs = ctx.services.dynamic_configs
    if resource_type == ResourceType.TOPIC:
        topic = ctx.services.image.topics.get(name)
        if topic is None:
            raise ResourceError(ErrorCode.unknown_topic_or_partition,
                                f"The topic '{name}' does not exist.")
        return configs.describe_topic(topic)
    if resource_type == ResourceType.BROKER:
        # As Kafka: a broker describes itself, or the cluster-wide default ("").
        if name == "":
            return configs.describe_cluster_default()
        if name == str(ctx.services.config.node_id):
            return configs.describe_broker()
        raise ResourceError(ErrorCode.invalid_request,
                            f"Unexpected broker id, expected {ctx.services.config.node_id} or "
                            f"empty string, but received {name}")
    if resource_type == ResourceType.GROUP:
        return [_described_group_config(config)
                for config in ctx.services.group_configs.describe(name)]
    raise ResourceError(ErrorCode.invalid_request, _unsupported(resource_type))


def _described_group_config(config: GroupConfigValue) -> DescribedConfig:
    definition = config.definition
    source = ConfigSource.GROUP_CONFIG if config.is_set else ConfigSource.DEFAULT_CONFIG
    return DescribedConfig(definition.name, config.value, source,
                           (ConfigSynonym(definition.name, config.value, source),),
                           read_only=False, sensitive=False, kind=definition.kind,
                           doc=definition.doc)


def _unsupported(resource_type: int) -> str:
    if resource_type == ResourceType.BROKER_LOGGER:
        return "BROKER_LOGGER resources are not supported by kipper"
    return f"Unsupported resource type {resource_type}"


def _entry(ctx: RequestContext, request, config: DescribedConfig) -> object:
    synonyms = tuple(
        ctx.response("DescribeConfigsSynonym", name=s.name, value=s.value, source=s.source)
        for s in config.synonyms) if request.include_synonyms else ()
    return ctx.response(
        "DescribeConfigsResourceResult", name=config.name, value=config.value,
        read_only=config.read_only, config_source=config.source,
        is_sensitive=config.sensitive, synonyms=synonyms,
        config_type=CONFIG_TYPES[config.kind],
        documentation=config.doc if getattr(request, "include_documentation", False) else None)


# --- IncrementalAlterConfigs and AlterConfigs ------------------------------------------------

@handles_on_controller(ApiKey.INCREMENTAL_ALTER_CONFIGS, _ALTER_SCREEN)
async def incremental_alter_configs(ctx: RequestContext, request) -> object:
    return await _alter(ctx, request, "IncrementalAlterConfigsResponse", replace=False)


@handles_on_controller(ApiKey.ALTER_CONFIGS, _ALTER_SCREEN)
async def alter_configs(ctx: RequestContext, request) -> object:
    return await _alter(ctx, request, "AlterConfigsResponse", replace=True)


async def _alter(ctx: RequestContext, request, response_name: str, replace: bool) -> object:
    """Each resource changed on its own, with its own outcome (on the controller)."""
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise ResourceError(ErrorCode.invalid_request,
                                    "Each resource must appear at most once.")
            await _alter_resource(ctx, resource, replace, request.validate_only)
            error, message = ErrorCode.none, None
        except (ResourceError, ControllerError) as e:
            error, message = e.error_code, e.message
        results.append(ctx.response(
            "AlterConfigsResourceResponse", error_code=error, error_message=message,
            resource_type=resource.resource_type, resource_name=resource.resource_name))
    return ctx.response(response_name, throttle_time=0, responses=tuple(results))


async def _alter_resource(ctx: RequestContext, resource, replace: bool,
                          validate_only: bool) -> None:
    changes = [_change(config) for config in resource.configs]
    controller = ctx.services.controller
    if resource.resource_type == ResourceType.TOPIC:
        await controller.alter_topic_configs(resource.resource_name, changes, replace,
                                             validate_only)
    elif resource.resource_type == ResourceType.BROKER:
        await controller.alter_broker_configs(resource.resource_name, changes, replace,
                                              validate_only)
    elif resource.resource_type == ResourceType.GROUP:
        await controller.alter_group_configs(resource.resource_name, changes, replace,
                                             validate_only)
    else:
        raise ResourceError(ErrorCode.invalid_request, _unsupported(resource.resource_type))


def _change(config) -> ConfigChange:
    """An IncrementalAlterConfigs operation, or an AlterConfigs entry (a SET)."""
    operation = getattr(config, "config_operation", ConfigOp.SET)
    try:
        op = ConfigOp(operation)
    except ValueError:
        raise ResourceError(ErrorCode.invalid_request,
                            f"Unknown config operation {operation} for {config.name}") from None
    return ConfigChange(config.name, op, config.value)
