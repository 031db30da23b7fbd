"""The batch coordinator's internal API (see protocol.internal, docs/internal-apis.md)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.batch_coordinator import NotCoordinator
from protocol.internal import InternalApiKey, JsonBody

from .registry import RequestContext, handles

APPEND_TIMEOUT_S = 30.0


@handles(InternalApiKey.DISKLESS_COORDINATOR_APPEND)
async def coordinator_append(ctx: RequestContext, request: JsonBody) -> JsonBody:
    coordinator = ctx.services.batch_coordinator
    if coordinator is None:
        return _not_coordinator("this broker has no object store, so no batch coordinator")
    try:
        result = await coordinator.append(request.value["record"], APPEND_TIMEOUT_S)
    except NotCoordinator as e:
        return _not_coordinator(str(e))
    return JsonBody({"error_code": int(ErrorCode.none), "result": result})


def _not_coordinator(message: str) -> JsonBody:
    return JsonBody({"error_code": int(ErrorCode.not_coordinator), "error_message": message})
