"""DescribeLogDirs: this broker's one data directory as one log dir, and each partition it
hosts with its size and how far its log end is behind the high watermark.

Diskless partitions (KIP-1150) have no local log; they are listed under the same log dir
with the bytes their batches take in object storage (``PartitionLog.size_bytes``), on every
broker that serves them, as Metadata names every such broker a replica. Summing the sizes
over brokers thus counts a diskless partition once per broker, as it counts a classic
partition once per replica."""

from __future__ import annotations

from collections import defaultdict

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.acls import AclOperation, ResourceType
from storage.log import PartitionLog

from ..security.authorize import allowed
from .registry import RequestContext, handles


def _wanted(request) -> set[tuple[str, int]] | None:
    """The partitions asked about; None: all of them (a null topic list)."""
    if request.topics is None:
        return None
    return {(topic.topic, index) for topic in request.topics for index in topic.partitions}


def _offset_lag(ctx: RequestContext, log: PartitionLog) -> int:
    """Kafka's getLogEndOffsetLag: the high watermark this replica knows less its log end,
    so 0 on a leader."""
    partition = ctx.services.replicas.partitions.get((log.topic, log.partition))
    if partition is None:
        return 0
    return max(partition.high_watermark - log.log_end_offset, 0)


@handles(ApiKey.DESCRIBE_LOG_DIRS)
async def describe_log_dirs(ctx: RequestContext, request) -> object:
    if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return ctx.response("DescribeLogDirsResponse", throttle_time=0,
                            error_code=ErrorCode.cluster_authorization_failed, results=())
    logs = ctx.services.replicas.logs
    wanted = _wanted(request)
    await ctx.services.replicas.open_hosted(wanted)
    by_topic: dict[str, list] = defaultdict(list)
    for log in sorted(logs.logs(), key=lambda log: (log.topic, log.partition)):
        if wanted is not None and (log.topic, log.partition) not in wanted:
            continue
        by_topic[log.topic].append(ctx.response(
            "DescribeLogDirsPartition", partition_index=log.partition,
            partition_size=log.size_bytes, offset_lag=_offset_lag(ctx, log),
            is_future_key=False))
    space = logs.disk_space
    result = ctx.response(
        "DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=str(logs.data_dir.resolve()),
        total_bytes=space.total_bytes(), usable_bytes=space.free_bytes(), topics=tuple(
            ctx.response("DescribeLogDirsTopic", name=topic, partitions=tuple(partitions))
            for topic, partitions in by_topic.items()))
    return ctx.response("DescribeLogDirsResponse", throttle_time=0, error_code=ErrorCode.none,
                        results=(result,))
