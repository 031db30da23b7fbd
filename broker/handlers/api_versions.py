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


# Kafka's TransactionVersion levels: 1 adds flexible transaction log records, 2 the
# transaction protocol version 2 (KIP-890). Clients use version 2 only when the cluster
# finalizes level 2 (and the broker has Produce v12 and TxnOffsetCommit v5).
TRANSACTION_VERSION_FEATURE = "transaction.version"
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)
# Features are reported from ApiVersions v3 on; v3 leaves out features whose lowest
# supported level is 0: some older clients cannot read them (KAFKA-17492).
_FEATURES_SINCE, _FEATURES_WITH_LEVEL_0_SINCE = 3, 4
# The features are a broker setting, never changed while it runs: the epoch of their
# finalized levels (Kafka: the metadata offset that last changed them) stays at its first.
FINALIZED_FEATURES_EPOCH = 0


@handles(ApiKey.API_VERSIONS)
async def api_versions(ctx: RequestContext, request: object) -> object:
    keys = tuple(ctx.response("ApiVersion", api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in supported_versions())
    if ctx.version < _FEATURES_SINCE:
        return ctx.response("ApiVersionsResponse", error_code=ErrorCode.none, api_keys=keys,
                            throttle_time=0)
    low, high = SUPPORTED_TRANSACTION_VERSIONS
    supported = (ctx.response("SupportedFeatureKey", name=TRANSACTION_VERSION_FEATURE,
                              min_version=low, max_version=high),
                 ) if low > 0 or ctx.version >= _FEATURES_WITH_LEVEL_0_SINCE else ()
    # As Kafka, a feature finalized at level 0 is not listed.
    level = ctx.services.config.transaction_version
    finalized = (ctx.response("FinalizedFeatureKey", name=TRANSACTION_VERSION_FEATURE,
                              min_version_level=level, max_version_level=level),
                 ) if level > 0 else ()
    return ctx.response("ApiVersionsResponse", error_code=ErrorCode.none, api_keys=keys,
                        throttle_time=0, supported_features=supported,
                        finalized_features_epoch=FINALIZED_FEATURES_EPOCH if finalized else -1,
                        finalized_features=finalized, zk_migration_ready=False)


def unsupported_version_response(correlation_id: int) -> bytes:
    """KIP-511: answer an ApiVersions version we do not know in v0, listing what we do."""
    keys = tuple(make(ApiVersionV0, api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in supported_versions())
    body = make(ApiVersionsResponseV0, error_code=ErrorCode.unsupported_version, api_keys=keys)
    return encode_response(RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None), body)
