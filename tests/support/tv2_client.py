"""A transactional producer over raw Kafka frames that speaks transaction protocol version 2
(KIP-890) as Apache Kafka's Java client does when the broker lets it, and version 1 otherwise.

No client available here speaks version 2, so this driver does what the Java client's
TransactionManager does: it uses version 2 when ApiVersions finalizes `transaction.version`
>= 2 and the broker has Produce v12+ and TxnOffsetCommit v5+. Then it sends InitProducerId
v5, transactional Produce v12 without AddPartitionsToTxn, TxnOffsetCommit v5 without
AddOffsetsToTxn, and EndTxn v5, adopting the producer id and epoch it answers (sequences
restart at 0). On version 1 it adds partitions and offsets itself and keeps its epoch.
One broker: it is every coordinator and every partition's leader.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey

from .batches import build_batch_now
from .raw import call, entity

TRANSACTION_VERSION_FEATURE = "transaction.version"
# Errors the Java client retries after a backoff.
_RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
              ErrorCode.not_enough_replicas}
_RETRY_FOR_S = 30.0


class TransactionError(Exception):
    def __init__(self, what: str, error: ErrorCode) -> None:
        super().__init__(f"{what}: {error.name}")
        self.error = error


@dataclass(frozen=True)
class Versions:
    """What this driver sends, as the Java client picks them."""
    transaction_v2: bool
    produce: int
    txn_offset_commit: int
    end_txn: int
    init_producer_id: int


def negotiate(sock: socket.socket) -> Versions:
    response = call(sock, ApiKey.API_VERSIONS, 4, entity(
        ApiKey.API_VERSIONS, 4, "ApiVersionsRequest", client_software_name="kipper-tv2-test",
        client_software_version="1"))
    highest = {key.api_key: key.max_version for key in response.api_keys}
    level = next((f.max_version_level for f in response.finalized_features
                  if f.name == TRANSACTION_VERSION_FEATURE), 0)
    v2 = (level >= 2 and highest[ApiKey.PRODUCE] > 11
          and highest[ApiKey.TXN_OFFSET_COMMIT] > 4)
    return Versions(v2, produce=12 if v2 else 11, txn_offset_commit=5 if v2 else 4,
                    end_txn=5 if v2 else 4, init_producer_id=5 if v2 else 4)


def _retrying(what: str, send):
    """Call ``send`` (returning (error, result)) until its error is not retriable."""
    deadline = time.monotonic() + _RETRY_FOR_S
    while True:
        error, result = send()
        if error == ErrorCode.none:
            return result
        if error not in _RETRIABLE or time.monotonic() > deadline:
            raise TransactionError(what, error)
        time.sleep(0.1)


@dataclass
class RawTransactionalProducer:
    sock: socket.socket
    transactional_id: str
    versions: Versions = None
    producer_id: int = -1
    producer_epoch: int = -1
    next_sequence: dict[tuple[str, int], int] = field(default_factory=dict)
    # Version 1 only: what this transaction has added at the coordinator.
    added: set[tuple[str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.versions = self.versions or negotiate(self.sock)

    def init(self) -> None:
        self._find_coordinator(1, self.transactional_id)
        v = self.versions.init_producer_id

        def send():
            r = call(self.sock, ApiKey.INIT_PRODUCER_ID, v, entity(
                ApiKey.INIT_PRODUCER_ID, v, "InitProducerIdRequest",
                transactional_id=self.transactional_id, transaction_timeout=60_000,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch))
            return r.error_code, (r.producer_id, r.producer_epoch)
        self._adopt(*_retrying("InitProducerId", send))

    def send(self, topic: str, partition: int, values: list[bytes]) -> int:
        """One transactional batch; its base offset."""
        if not self.versions.transaction_v2 and (topic, partition) not in self.added:
            self._add_partition(topic, partition)
        sequence = self.next_sequence.get((topic, partition), 0)
        batch = bytes(build_batch_now(values, producer_id=self.producer_id,
                                      producer_epoch=self.producer_epoch, base_sequence=sequence,
                                      transactional=True))
        v = self.versions.produce

        def send():
            r = call(self.sock, ApiKey.PRODUCE, v, entity(
                ApiKey.PRODUCE, v, "ProduceRequest", transactional_id=self.transactional_id,
                acks=-1, timeout=10_000, topic_data=(entity(
                    ApiKey.PRODUCE, v, "TopicProduceData", name=topic, partition_data=(
                        entity(ApiKey.PRODUCE, v, "PartitionProduceData", index=partition,
                               records=batch),)),)))
            answer = r.responses[0].partition_responses[0]
            return answer.error_code, answer.base_offset
        offset = _retrying("Produce", send)
        self.next_sequence[(topic, partition)] = sequence + len(values)
        return offset

    def send_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` of ``group_id`` in the transaction (sendOffsetsToTransaction)."""
        self._find_coordinator(0, group_id)
        if not self.versions.transaction_v2:
            self._call_ok("AddOffsetsToTxn", ApiKey.ADD_OFFSETS_TO_TXN, 3,
                          "AddOffsetsToTxnRequest", group_id=group_id)
        v = self.versions.txn_offset_commit
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append((partition, offset))

        def send():
            r = call(self.sock, ApiKey.TXN_OFFSET_COMMIT, v, entity(
                ApiKey.TXN_OFFSET_COMMIT, v, "TxnOffsetCommitRequest",
                transactional_id=self.transactional_id, group_id=group_id,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                generation_id=-1, member_id="", group_instance_id=None, topics=tuple(
                    entity(ApiKey.TXN_OFFSET_COMMIT, v, "TxnOffsetCommitRequestTopic",
                           name=topic, partitions=tuple(
                               entity(ApiKey.TXN_OFFSET_COMMIT, v,
                                      "TxnOffsetCommitRequestPartition", partition_index=p,
                                      committed_offset=o, committed_leader_epoch=-1,
                                      committed_metadata="") for p, o in partitions))
                    for topic, partitions in by_topic.items())))
            errors = {p.error_code for t in r.topics for p in t.partitions} - {ErrorCode.none}
            return (errors.pop() if errors else ErrorCode.none), None
        _retrying("TxnOffsetCommit", send)

    def commit(self) -> None:
        self._end(True)

    def abort(self) -> None:
        self._end(False)

    def _end(self, commit: bool) -> None:
        v = self.versions.end_txn

        def send():
            r = call(self.sock, ApiKey.END_TXN, v, entity(
                ApiKey.END_TXN, v, "EndTxnRequest", transactional_id=self.transactional_id,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                committed=commit))
            return r.error_code, (getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1))
        producer_id, producer_epoch = _retrying("EndTxn", send)
        self.added.clear()
        if producer_id != -1:  # version 2: the next transaction's id and epoch
            self._adopt(producer_id, producer_epoch)

    def _adopt(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.next_sequence.clear()

    def _add_partition(self, topic: str, partition: int) -> None:
        def send():
            r = call(self.sock, ApiKey.ADD_PARTITIONS_TO_TXN, 3, entity(
                ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnRequest",
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=(entity(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                            "AddPartitionsToTxnTopic", name=topic,
                                            partitions=(partition,)),)))
            return r.results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code, None
        _retrying("AddPartitionsToTxn", send)
        self.added.add((topic, partition))

    def _call_ok(self, what: str, api_key: ApiKey, version: int, request: str, **fields):
        def send():
            r = call(self.sock, api_key, version, entity(
                api_key, version, request, transactional_id=self.transactional_id,
                producer_id=self.producer_id, producer_epoch=self.producer_epoch, **fields))
            return r.error_code, None
        _retrying(what, send)

    def _find_coordinator(self, key_type: int, key: str) -> None:
        """Wait until this broker coordinates ``key`` (it creates the internal topic)."""
        def send():
            r = call(self.sock, ApiKey.FIND_COORDINATOR, 4, entity(
                ApiKey.FIND_COORDINATOR, 4, "FindCoordinatorRequest", key_type=key_type,
                coordinator_keys=(key,)))
            return r.coordinators[0].error_code, None
        _retrying("FindCoordinator", send)
