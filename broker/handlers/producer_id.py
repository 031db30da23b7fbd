"""InitProducerId for idempotent producers (ids from broker.producer_ids, in blocks from the
controller); with a transactional id it is the transaction coordinator's
(broker.handlers.transactions).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType

from ..producer_ids import ProducerIdsUnavailable
from ..security.authorize import allowed, allowed_any
from .registry import RequestContext, handles
from .transactions import init_transactional_producer_id

log = logging.getLogger(__name__)


@handles(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(ctx: RequestContext, request) -> object:
    if request.transactional_id is not None:
        return await init_transactional_producer_id(ctx, request)
    # An idempotent producer needs IDEMPOTENT_WRITE on the cluster or, since Kafka 3.0
    # (KIP-679), WRITE on some topic.
    if not (allowed(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or allowed_any(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return ctx.response("InitProducerIdResponse", throttle_time=0,
                            error_code=ErrorCode.cluster_authorization_failed, producer_id=-1,
                            producer_epoch=-1)
    # Without a transactional id Kafka always issues a fresh id at epoch 0, also when an
    # idempotent producer asks to bump the epoch of its current one (KIP-360).
    try:
        producer_id = await ctx.services.producer_ids.allocate()
    except ProducerIdsUnavailable as e:
        log.warning("InitProducerId answered COORDINATOR_LOAD_IN_PROGRESS: %s", e)
        return ctx.response("InitProducerIdResponse", throttle_time=0,
                            error_code=ErrorCode.coordinator_load_in_progress, producer_id=-1,
                            producer_epoch=-1)
    return ctx.response("InitProducerIdResponse", throttle_time=0, error_code=ErrorCode.none,
                        producer_id=producer_id, producer_epoch=0)
