"""The batch coordinator's internal API (see protocol.internal, docs/internal-apis.md)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.diskless import NotCoordinator
from protocol.internal import InternalApiKey, JsonBody
from storage.diskless.control_plane import RecordRejected, decode_request

from .registry import RequestContext, handles

APPEND_TIMEOUT_S = 30.0


@handles(InternalApiKey.DISKLESS_COORDINATOR_APPEND)
async def coordinator_append(ctx: RequestContext, request: JsonBody) -> JsonBody:
    coordinator = ctx.services.batch_coordinator
    if coordinator is None:
        return _error(ErrorCode.not_coordinator,
                      "this broker has no object store, so no batch coordinator")
    try:
        record = decode_request(request.value["record"])
        result = await coordinator.append(record, APPEND_TIMEOUT_S)
    except (KeyError, TypeError, ValueError, RecordRejected) as e:
        return _error(ErrorCode.invalid_request, f"the coordinator cannot apply the record: {e!r}")
    except NotCoordinator as e:
        return _error(ErrorCode.not_coordinator, str(e))
    return JsonBody({"error_code": int(ErrorCode.none), "result": result.to_wire()})


def _error(code: ErrorCode, message: str) -> JsonBody:
    return JsonBody({"error_code": int(code), "error_message": message})
