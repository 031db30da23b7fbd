"""WriteTxnMarkers: a transaction coordinator has the partitions of a decided transaction
end it (Kafka's ``handleWriteTxnMarkersRequest``).

Each partition gets one marker, a control batch (protocol.records.build_marker_batch),
appended as its leader with acks=all, like any batch: classic and active-tiered replicate
it, diskless commits it through the batch coordinator, so in every mode the marker has a
real offset and producer state (storage.producer_state) closes the transaction there. A
``__consumer_offsets`` partition then hands the outcome to the group coordinator, which makes
the transaction's offsets visible or drops them.

Only brokers of this cluster may send it (Kafka's CLUSTER_ACTION): from anyone else every
partition answers CLUSTER_AUTHORIZATION_FAILED and nothing is written. The coordinator of
this broker calls ``write_markers`` in-process (``local_marker_writer``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from coordinator.internal_topic import OFFSETS_TOPIC
from protocol.apis import ApiKey
from protocol.framing import RequestHeader
from protocol.records import TxnMarker, build_marker_batch, iter_batches
from replication.partition import PartitionError
from storage.append_rules import AppendOrigin
from storage.disk_space import log_storage_error
from storage.log import KafkaStorageError, StorageError
from storage.producer_state import ProducerStateError

from .registry import RequestContext, handles

log = logging.getLogger(__name__)
# A marker waits for the in-sync replicas like a Produce with acks=all; the coordinator
# retries a partition that did not answer in time.
MARKER_APPEND_TIMEOUT_S = 30.0
# The version the in-process writer answers in (the newest kipper accepts).
_LOCAL_VERSION = 1


async def _write_marker(ctx: RequestContext, marker: TxnMarker, topic: str,
                        index: int) -> ErrorCode:
    if ctx.broker_node is None:
        return ErrorCode.cluster_authorization_failed
    try:
        partition = ctx.services.replicas.get(topic, index)
        partition.check_leader()
        batch = build_marker_batch(marker, time.time_ns() // 1_000_000)
        await partition.append_as_leader(batch, list(iter_batches(batch)), -1,
                                         MARKER_APPEND_TIMEOUT_S, AppendOrigin.COORDINATOR)
    except PartitionError as e:
        return e.error_code
    except ProducerStateError as e:
        log.info("marker for producer %d refused by %s-%d: %s", marker.producer_id, topic,
                 index, e)
        return e.error_code
    except KafkaStorageError as e:
        log_storage_error(log, f"writing a transaction marker to {topic}-{index}", e)
        return ErrorCode.kafka_storage_error
    except StorageError as e:
        log.warning("writing a transaction marker to %s-%d: %s", topic, index, e)
        return ErrorCode.unknown_server_error
    if topic == OFFSETS_TOPIC and ctx.services.group_coordinator is not None:
        ctx.services.group_coordinator.complete_transaction(index, marker.producer_id,
                                                            marker.commit)
    return ErrorCode.none


@handles(ApiKey.WRITE_TXN_MARKERS)
async def write_txn_markers(ctx: RequestContext, request) -> object:
    results = []
    for entry in request.markers:
        marker = TxnMarker(entry.producer_id, entry.producer_epoch, entry.transaction_result,
                           entry.coordinator_epoch)
        # The partitions of one marker are written concurrently, each waiting for its ISR.
        codes = await asyncio.gather(*(_write_marker(ctx, marker, topic.name, index)
                                       for topic in entry.topics
                                       for index in topic.partition_indexes))
        position = iter(codes)
        results.append(ctx.response(
            "WritableTxnMarkerResult", producer_id=entry.producer_id, topics=tuple(
                ctx.response("WritableTxnMarkerTopicResult", name=topic.name, partitions=tuple(
                    ctx.response("WritableTxnMarkerPartitionResult", partition_index=index,
                                 error_code=next(position))
                    for index in topic.partition_indexes))
                for topic in entry.topics)))
    return ctx.response("WriteTxnMarkersResponse", markers=tuple(results))


MarkerWriter = Callable[[object], Awaitable[object]]


def local_marker_writer(services, node_id: int) -> MarkerWriter:
    """WriteTxnMarkers to this broker without the network: the transaction coordinator's
    path to the partitions it leads itself (a WriteTxnMarkersRequest v1 in, its response
    out)."""
    header = RequestHeader(ApiKey.WRITE_TXN_MARKERS, _LOCAL_VERSION, 0, "transaction-coordinator")

    async def write(request: object) -> object:
        return await write_txn_markers(
            RequestContext(header, services, "in-process", broker_node=node_id), request)
    return write
