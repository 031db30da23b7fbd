"""The authorizer's answers for one request (issue #18): the calls handlers make, one per
check that ``api_authorization.API_AUTHORIZATION`` lists for their API.

With ``authorizer_enabled`` off everything is allowed, as a Kafka broker without
``authorizer.class.name``. Connections proven to be brokers of this cluster
(broker.inter_broker) are allowed everything too: that proof stands for the
CLUSTER_ACTION of Kafka's inter-broker principal, and a request a broker forwards to the
controller was checked against its client's principal before it was forwarded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from replication.acls import (
    CLUSTER_RESOURCE_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    Authorizer,
    ResourceType,
    operations_bitfield,
    super_users_from_config,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.handlers.registry import RequestContext
    from broker.services import BrokerServices

# Kafka's "authorized operations not requested" marker (Integer.MIN_VALUE).
OMITTED = -(2**31)


def configure(authorizer: Authorizer, config: "BrokerConfig") -> None:
    """Give an image's ACLs this node's settings (``super.users``,
    ``allow.everyone.if.no.acl.found``)."""
    authorizer.super_users = super_users_from_config(config.super_users)
    authorizer.allow_everyone_if_no_acl_found = config.allow_everyone_if_no_acl_found


def node_acls(services: "BrokerServices") -> Authorizer:
    """The ACLs this node knows: a broker's from its metadata image, a controller-only
    node's from the controller's (it applies no metadata as a broker)."""
    if services.config.broker_role or services.controller is None:
        return services.image.acls
    return services.controller.image.acls


def checks_acls(ctx: "RequestContext") -> bool:
    """Whether this request is subject to the ACLs at all."""
    return ctx.services.config.authorizer_enabled and ctx.broker_node is None


def allowed(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType,
            name: str = CLUSTER_RESOURCE_NAME) -> bool:
    """May this request's principal, from its host, do ``operation`` on the resource?"""
    return not checks_acls(ctx) or node_acls(ctx.services).authorize(
        ctx.principal, ctx.client_host, operation, resource_type, name)


def allowed_any(ctx: "RequestContext", operation: AclOperation,
                resource_type: ResourceType) -> bool:
    """May it do ``operation`` on some resource of the type (authorizeByResourceType)?"""
    return not checks_acls(ctx) or node_acls(ctx.services).authorize_any(
        ctx.principal, ctx.client_host, operation, resource_type)


def denied_names(ctx: "RequestContext", operation: AclOperation, resource_type: ResourceType,
                 names: Iterable[str | None]) -> set[str]:
    """Which of ``names`` this request may not do ``operation`` on (None names skipped)."""
    if not checks_acls(ctx):
        return set()
    return {name for name in set(names) if name is not None
            and not allowed(ctx, operation, resource_type, name)}


def authorized_operations(ctx: "RequestContext", requested: bool, resource_type: ResourceType,
                          name: str = CLUSTER_RESOURCE_NAME) -> int:
    """KIP-430's bitfield of what the principal may do on the resource, OMITTED unless
    ``requested``; without ACL checks, every operation the resource type supports."""
    if not requested:
        return OMITTED
    if not checks_acls(ctx):
        return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
    return operations_bitfield(node_acls(ctx.services).authorized_operations(
        ctx.principal, ctx.client_host, resource_type, name))


def cluster_operations(ctx: "RequestContext", requested: bool) -> int:
    """The cluster's authorized operations as Metadata (v8-10) and DescribeCluster answer
    them: 0 unless the principal may DESCRIBE the cluster."""
    if requested and not allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return 0
    return authorized_operations(ctx, requested, ResourceType.CLUSTER)
