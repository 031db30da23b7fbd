"""ACL administration: CreateAcls, DescribeAcls, DeleteAcls (Kafka's AclApis).

Creations and deletions run on the controller, which writes one ``acl``/``remove_acl``
record per ACL to the metadata log (coordinator.acl_changes); DescribeAcls reads this
node's copy of the ACLs. Without an authorizer every request answers SECURITY_DISABLED;
with one, the caller needs ALTER (DESCRIBE to list) on the cluster.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    filter_problem,
)

from ..security.authorize import allowed, node_acls
from .admin import Denial, Screen, handles_on_controller
from .registry import RequestContext, handles

_DISABLED = ErrorCode.security_disabled, "No Authorizer is configured."


def _unless_cluster(operation: AclOperation, result_entity: str, **fields) -> Denial:
    """Refuses every entry of a request whose principal may not do ``operation`` on the
    cluster (Kafka refuses the request as a whole, which is the same answer)."""
    def deny(ctx: RequestContext, entry) -> object | None:
        if allowed(ctx, operation, ResourceType.CLUSTER):
            return None
        return ctx.response(result_entity, error_code=ErrorCode.cluster_authorization_failed,
                            error_message=None, **fields)
    return deny


def _enum(kind, code: int):
    """A wire code as its enum, UNKNOWN if this version does not know it (refused later)."""
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


def _filter(request_filter) -> AclBindingFilter:
    """A DescribeAcls request or DeleteAcls filter as a binding filter."""
    return AclBindingFilter(
        ResourcePatternFilter(_enum(ResourceType, request_filter.resource_type_filter),
                              request_filter.resource_name_filter,
                              _enum(PatternType, request_filter.pattern_type_filter)),
        AccessControlEntryFilter(request_filter.principal_filter, request_filter.host_filter,
                                 _enum(AclOperation, request_filter.operation),
                                 _enum(AclPermissionType, request_filter.permission_type)))


def _binding(creation) -> AclBinding:
    return AclBinding(
        ResourcePattern(_enum(ResourceType, creation.resource_type), creation.resource_name,
                        _enum(PatternType, creation.resource_pattern_type)),
        AccessControlEntry(creation.principal, creation.host,
                           _enum(AclOperation, creation.operation),
                           _enum(AclPermissionType, creation.permission_type)))


@handles_on_controller(ApiKey.CREATE_ACLS, Screen(
    ("creations",), "results", _unless_cluster(AclOperation.ALTER, "AclCreationResult")))
async def create_acls(ctx: RequestContext, request) -> object:
    if not ctx.services.config.authorizer_enabled:
        outcomes = [_DISABLED] * len(request.creations)
    else:
        errors = await ctx.services.controller.create_acls(
            [_binding(c) for c in request.creations])
        outcomes = [(ErrorCode.none, None) if error is None else (error.error_code, error.message)
                    for error in errors]
    return ctx.response("CreateAclsResponse", throttle_time=0, results=tuple(
        ctx.response("AclCreationResult", error_code=code, error_message=message)
        for code, message in outcomes))


@handles(ApiKey.DESCRIBE_ACLS)
async def describe_acls(ctx: RequestContext, request) -> object:
    acl_filter = _filter(request)
    if not ctx.services.config.authorizer_enabled:
        refusal = _DISABLED
    elif not allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        refusal = ErrorCode.cluster_authorization_failed, None
    elif problem := filter_problem(acl_filter):
        refusal = ErrorCode.invalid_request, problem
    else:
        refusal = None
    if refusal is not None:
        code, message = refusal
        return ctx.response("DescribeAclsResponse", throttle_time=0, error_code=code,
                            error_message=message, resources=())
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in node_acls(ctx.services).acls(acl_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    resources = tuple(
        ctx.response("DescribeAclsResource", resource_type=pattern.type,
                     resource_name=pattern.name, pattern_type=pattern.pattern_type,
                     acls=tuple(ctx.response("AclDescription", principal=entry.principal,
                                             host=entry.host, operation=entry.operation,
                                             permission_type=entry.permission)
                                for entry in entries))
        for pattern, entries in by_pattern.items())
    return ctx.response("DescribeAclsResponse", throttle_time=0, error_code=ErrorCode.none,
                        error_message=None, resources=resources)


@handles_on_controller(ApiKey.DELETE_ACLS, Screen(
    ("filters",), "filter_results",
    _unless_cluster(AclOperation.ALTER, "DeleteAclsFilterResult", matching_acls=())))
async def delete_acls(ctx: RequestContext, request) -> object:
    if not ctx.services.config.authorizer_enabled:
        code, message = _DISABLED
        results = [ctx.response("DeleteAclsFilterResult", error_code=code,
                                error_message=message, matching_acls=())
                   for _ in request.filters]
    else:
        deletions = await ctx.services.controller.delete_acls(
            [_filter(f) for f in request.filters])
        results = [ctx.response(
            "DeleteAclsFilterResult",
            error_code=deletion.error.error_code if deletion.error else ErrorCode.none,
            error_message=deletion.error.message if deletion.error else None,
            matching_acls=tuple(_matching(ctx, binding) for binding in deletion.removed))
            for deletion in deletions]
    return ctx.response("DeleteAclsResponse", throttle_time=0, filter_results=tuple(results))


def _matching(ctx: RequestContext, binding: AclBinding) -> object:
    pattern, entry = binding.pattern, binding.entry
    return ctx.response("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                        resource_type=pattern.type, resource_name=pattern.name,
                        pattern_type=pattern.pattern_type, principal=entry.principal,
                        host=entry.host, operation=entry.operation,
                        permission_type=entry.permission)
