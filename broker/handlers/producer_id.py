"""InitProducerId for idempotent producers (ids from broker.producer_ids); with a
transactional id it is the transaction coordinator's (broker.handlers.transactions).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError


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
        producer_id = ctx.services.producer_ids.next_id()
    except KafkaStorageError as e:
        log_storage_error(log, "InitProducerId", e)
        return ctx.response("InitProducerIdResponse", throttle_time=0,
                            error_code=ErrorCode.kafka_storage_error, producer_id=-1,
                            producer_epoch=-1)
    return ctx.response("InitProducerIdResponse", throttle_time=0, error_code=ErrorCode.none,
                        producer_id=producer_id, producer_epoch=0)
