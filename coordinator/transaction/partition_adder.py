"""A partition leader adding its partition to a producer's transaction (transaction protocol
version 2, KIP-890; Kafka's AddPartitionsToTxnManager).

Under version 2 the client sends no AddPartitionsToTxn (nor AddOffsetsToTxn): the leader of
a partition that gets a transactional Produce v12+ (or the group coordinator that gets a
TxnOffsetCommit v5+) asks the transactional id's coordinator to add the partition before
appending. The coordinator is this broker's own TransactionCoordinator when this broker leads
the id's ``__transaction_state`` partition, else the leader of that partition, asked with an
AddPartitionsToTxn v5 request over the broker's authenticated connection (broker-only).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from kio.schema.add_partitions_to_txn.v5.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import make
from replication.node_client import NodeClient

from .service import TransactionCoordinator
from .state import TopicPartition

log = logging.getLogger(__name__)
ADD_PARTITIONS_VERSION = 5
_REQUEST_TIMEOUT_S = 30.0
# Errors of an add that pass once the coordinator is found or its transaction has moved on:
# the request that needed the add is answered with an error its client retries (Produce:
# NOT_ENOUGH_REPLICAS, TxnOffsetCommit: COORDINATOR_NOT_AVAILABLE, as Kafka).
RETRIABLE_ADD_ERRORS = frozenset({
    ErrorCode.concurrent_transactions, ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator,
    ErrorCode.network_exception})


class TransactionPartitionAdder:
    def __init__(self, coordinator: TransactionCoordinator, nodes: NodeClient,
                 node_id: int) -> None:
        self.coordinator = coordinator
        self.nodes = nodes
        self.node_id = node_id

    async def add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  partitions: Collection[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Add ``partitions`` to the producer's open transaction (opening one if needed); the
        error of each partition that was not added, as the partition leader answers its
        producer: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what producers expect from
        a partition), an unreachable coordinator NETWORK_EXCEPTION."""
        store = self.coordinator.store
        broker = store.coordinator_node(store.partition_for(transactional_id))
        if broker is None:
            errors = dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        elif broker.node_id == self.node_id:
            error = await self.coordinator.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions)
            errors = dict.fromkeys(partitions, error)
        else:
            errors = await self._ask(broker, transactional_id, producer_id, producer_epoch,
                                     partitions)
        return {tp: (ErrorCode.invalid_producer_epoch if error == ErrorCode.producer_fenced
                     else error)
                for tp, error in errors.items() if error != ErrorCode.none}

    async def _ask(self, broker, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: Collection[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        request = make(AddPartitionsToTxnRequest, transactions=(make(
            AddPartitionsToTxnTransaction, transactional_id=transactional_id,
            producer_id=producer_id, producer_epoch=producer_epoch, verify_only=False,
            topics=tuple(make(AddPartitionsToTxnTopic, name=topic, partitions=tuple(indexes))
                         for topic, indexes in by_topic.items())),))
        try:
            response = await self.nodes.connection(
                broker.host, broker.port, "txn-add-partitions").call(
                    ApiKey.ADD_PARTITIONS_TO_TXN, request, _REQUEST_TIMEOUT_S,
                    ADD_PARTITIONS_VERSION)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.info("adding partitions of %s at broker %d failed: %s", transactional_id,
                     broker.node_id, e)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if response.error_code != ErrorCode.none:
            # Kafka: the client must not see CLUSTER_AUTHORIZATION_FAILED from this exchange.
            error = (ErrorCode.invalid_txn_state
                     if response.error_code == ErrorCode.cluster_authorization_failed
                     else response.error_code)
            return dict.fromkeys(partitions, error)
        errors = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for partition in topic.results_by_partition:
                    errors[(topic.name, partition.partition_index)] = \
                        partition.partition_error_code
        return errors
