from __future__ import annotations


from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

from protocol.apis import ADVERTISED_MIN_VERSION, VERSION_RANGES, ApiKey
from protocol.build import make
from protocol.framing import RequestHeader, encode_response

from .registry import HANDLERS, RequestContext, handles


def supported_versions() -> list[tuple[int, int, int]]:
    return [(int(key), ADVERTISED_MIN_VERSION.get(key, lo), hi)
            for key, (lo, hi) in sorted(VERSION_RANGES.items()) if key in HANDLERS]


@handles(ApiKey.API_VERSIONS)
async def api_versions(ctx: RequestContext, request: object) -> object:
    keys = tuple(ctx.response("ApiVersion", api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in supported_versions())
    return ctx.response("ApiVersionsResponse", error_code=ErrorCode.none, api_keys=keys,
                        throttle_time=0, supported_features=(), finalized_features_epoch=-1,
                        finalized_features=(), zk_migration_ready=False)


def unsupported_version_response(correlation_id: int) -> bytes:
    """KIP-511: answer an ApiVersions version we do not know in v0, listing what we do."""
    keys = tuple(make(ApiVersionV0, api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in supported_versions())
    body = make(ApiVersionsResponseV0, error_code=ErrorCode.unsupported_version, api_keys=keys)
    return encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None), body)
