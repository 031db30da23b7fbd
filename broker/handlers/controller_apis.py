"""The controller's own APIs: broker registration, heartbeats and ISR changes (KRaft's)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.controller import ControllerError
from protocol.apis import ApiKey

from .registry import RequestContext, handles


@handles(ApiKey.BROKER_REGISTRATION)
async def broker_registration(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None or not request.listeners:
        error = ErrorCode.not_controller if controller is None else ErrorCode.invalid_request
        return ctx.response("BrokerRegistrationResponse", throttle_time=0, error_code=error,
                            broker_epoch=-1)
    listener = request.listeners[0]
    try:
        epoch = await controller.register_broker(request.broker_id, listener.host,
                                                 listener.port, request.rack)
    except ControllerError as e:
        return ctx.response("BrokerRegistrationResponse", throttle_time=0,
                            error_code=e.error_code, broker_epoch=-1)
    return ctx.response("BrokerRegistrationResponse", throttle_time=0,
                        error_code=ErrorCode.none, broker_epoch=epoch)


@handles(ApiKey.BROKER_HEARTBEAT)
async def broker_heartbeat(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None:
        return ctx.response("BrokerHeartbeatResponse", throttle_time=0,
                            error_code=ErrorCode.not_controller, is_caught_up=False,
                            is_fenced=True, should_shut_down=False)
    try:
        error, fenced = await controller.heartbeat(
            request.broker_id, request.broker_epoch, request.want_fence, request.want_shut_down,
            log_dir_offline=bool(request.offline_log_dirs))
    except ControllerError as e:
        error, fenced = e.error_code, True
    return ctx.response("BrokerHeartbeatResponse", throttle_time=0, error_code=error,
                        is_caught_up=True, is_fenced=fenced,
                        should_shut_down=request.want_shut_down)


@handles(ApiKey.ALTER_PARTITION)
async def alter_partition(ctx: RequestContext, request) -> object:
    controller = ctx.services.controller
    if controller is None:
        return ctx.response("AlterPartitionResponse", throttle_time=0,
                            error_code=ErrorCode.not_controller, topics=())
    topics = []
    for topic in request.topics:
        results = []
        for asked in topic.partitions:
            try:
                error, info = await controller.alter_partition(
                    request.broker_id, topic.topic_id, asked.partition_index,
                    asked.leader_epoch, [b.broker_id for b in asked.new_isr_with_epochs],
                    asked.partition_epoch)
            except ControllerError as e:
                error, info = e.error_code, None
            results.append(ctx.response(
                "PartitionData", partition_index=asked.partition_index, error_code=error,
                leader_id=info.leader if info else -1,
                leader_epoch=info.leader_epoch if info else -1,
                isr=tuple(info.isr) if info else (), leader_recovery_state=0,
                partition_epoch=info.partition_epoch if info else -1))
        topics.append(ctx.response("TopicData", topic_id=topic.topic_id, partitions=tuple(results)))
    return ctx.response("AlterPartitionResponse", throttle_time=0, error_code=ErrorCode.none,
                        topics=tuple(topics))
