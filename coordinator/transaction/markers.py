"""Writing a finished transaction's markers to its partitions (Kafka's
TransactionMarkerChannelManager).

The markers of one transaction go, as a WriteTxnMarkers v1 request, to the leader of each of
its partitions, grouped by broker. A partition is retried, its leader looked up again in the
metadata each time, until its marker is written; it is given up only when its topic is gone
(or its partition), and the whole transaction's markers only when a newer coordinator or
producer epoch has taken over (then the newer one writes them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

from protocol.apis import ApiKey
from protocol.build import make
from replication.cluster_metadata import BrokerInfo, MetadataImage
from replication.node_client import NodeClient

from ..group.timer import Timer, sleep
from .state import TopicPartition

log = logging.getLogger(__name__)
WRITE_TXN_MARKERS_VERSION = 1
_REQUEST_TIMEOUT_S = 30.0
# The transaction was taken over: its markers are another coordinator's or epoch's now.
_SUPERSEDED = (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced)


@dataclass(frozen=True, slots=True)
class TxnMarkers:
    """The markers of one transaction, for ``partitions``."""
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: frozenset[TopicPartition]

    def subset(self, partitions: Iterable[TopicPartition]) -> TxnMarkers:
        return TxnMarkers(self.producer_id, self.producer_epoch, self.commit,
                          self.coordinator_epoch, frozenset(partitions))


# Sends ``markers`` to ``broker``, the leader of all of their partitions; the error of each
# partition. Raises ConnectionError or TimeoutError when the broker does not answer.
MarkerSender = Callable[[BrokerInfo, TxnMarkers], Awaitable[dict[TopicPartition, ErrorCode]]]


def write_txn_markers_request(markers: TxnMarkers) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(markers.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return make(WriteTxnMarkersRequest, markers=(make(
        WritableTxnMarker, producer_id=markers.producer_id,
        producer_epoch=markers.producer_epoch, transaction_result=markers.commit,
        coordinator_epoch=markers.coordinator_epoch,
        topics=tuple(make(WritableTxnMarkerTopic, name=topic, partition_indexes=tuple(indexes))
                     for topic, indexes in by_topic.items())),))


# WriteTxnMarkers handled by this broker itself, without the network (request in, response
# out): the lead's broker.handlers.txn_markers.local_marker_writer.
LocalMarkers = Callable[[WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]


def marker_sender(nodes: NodeClient, node_id: int, local: LocalMarkers) -> MarkerSender:
    """Markers for this broker's own partitions in-process; for other brokers' over their
    authenticated connections, on a connection of their own (each waits for acks=all)."""
    async def send(broker: BrokerInfo, markers: TxnMarkers) -> dict[TopicPartition, ErrorCode]:
        request = write_txn_markers_request(markers)
        if broker.node_id == node_id:
            response = await local(request)
        else:
            response = await nodes.connection(broker.host, broker.port, "txn-markers").call(
                ApiKey.WRITE_TXN_MARKERS, request, _REQUEST_TIMEOUT_S,
                WRITE_TXN_MARKERS_VERSION)
        return {(topic.name, p.partition_index): p.error_code
                for result in response.markers for topic in result.topics
                for p in topic.partitions}
    return send


class MarkerWriter:
    def __init__(self, image: MetadataImage, send: MarkerSender, retry_backoff_ms: int,
                 timer: Timer) -> None:
        self.image = image
        self.send = send
        self.retry_backoff_ms = retry_backoff_ms
        self.timer = timer

    async def write(self, markers: TxnMarkers, still_current: Callable[[], bool]) -> bool:
        """Write every marker; False when the transaction was taken over first (a newer
        coordinator or epoch, or ``still_current`` turned False)."""
        pending = set(markers.partitions)
        while pending:
            if not still_current():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in list(pending):
                if self._gone(tp):
                    log.info("%s-%d is gone: no marker for producer %d", *tp,
                             markers.producer_id)
                    pending.discard(tp)
                    continue
                leader = self._live_leader(tp)
                if leader is not None:
                    by_leader.setdefault(leader.node_id, []).append(tp)
            outcomes = await asyncio.gather(*(
                self._send(self.image.brokers[node_id], markers.subset(partitions))
                for node_id, partitions in by_leader.items()))
            for errors in outcomes:
                for tp, error in errors.items():
                    if error == ErrorCode.none:
                        pending.discard(tp)
                    elif error in _SUPERSEDED:
                        log.info("markers of producer %d (epoch %d) superseded: %s",
                                 markers.producer_id, markers.producer_epoch, error.name)
                        return False
            if pending:
                await sleep(self.timer, self.retry_backoff_ms)
        return True

    def _gone(self, tp: TopicPartition) -> bool:
        topic = self.image.topics.get(tp[0])
        return topic is None or tp[1] not in topic.partitions

    def _live_leader(self, tp: TopicPartition) -> BrokerInfo | None:
        broker = self.image.brokers.get(self.image.topics[tp[0]].partitions[tp[1]].leader)
        return broker if broker is not None and not broker.fenced else None

    async def _send(self, broker: BrokerInfo, markers: TxnMarkers
                    ) -> dict[TopicPartition, ErrorCode]:
        try:
            errors = await self.send(broker, markers)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("markers to broker %d failed, retrying: %s", broker.node_id, e)
            return {}
        for tp, error in errors.items():
            if error not in (ErrorCode.none, *_SUPERSEDED):
                log.debug("marker for %s-%d at broker %d: %s, retrying", *tp, broker.node_id,
                          error.name)
        return errors
