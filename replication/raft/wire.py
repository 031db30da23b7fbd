"""The quorum's messages on the Kafka protocol (kio's schemas): Vote (52; v2 carries
KIP-996's pre_vote),
BeginQuorumEpoch (53), EndQuorumEpoch (54) and Fetch v12 of ``__cluster_metadata`` (its
diverging_epoch, current_leader and snapshot_id fields are KIP-595's and KIP-630's)."""

from __future__ import annotations

import datetime

from kio.schema.begin_quorum_epoch.v0 import request as begin_request
from kio.schema.begin_quorum_epoch.v0 import response as begin_response
from kio.schema.end_quorum_epoch.v0 import request as end_request
from kio.schema.end_quorum_epoch.v0 import response as end_response
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.index import load_payload_module
from kio.schema.vote.v2 import request as vote_request
from kio.static.constants import EntityType

from protocol.apis import ApiKey
from protocol.build import make
from replication.cluster_metadata import METADATA_TOPIC

from .messages import (
    BeginQuorumEpoch,
    DivergingEpoch,
    EndQuorumEpoch,
    QuorumAck,
    RaftFetch,
    RaftFetchResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)


def api_key_of(request: object) -> ApiKey:
    return {VoteRequest: ApiKey.VOTE, BeginQuorumEpoch: ApiKey.BEGIN_QUORUM_EPOCH,
            EndQuorumEpoch: ApiKey.END_QUORUM_EPOCH, RaftFetch: ApiKey.FETCH}[type(request)]


# --- what a voter sends, and how it reads the answer -------------------------------------

def encode_request(request: object, max_wait_s: float = 0.0) -> object:
    if isinstance(request, VoteRequest):
        return make(vote_request.VoteRequest, cluster_id=None, topics=(make(
            vote_request.TopicData, topic_name=METADATA_TOPIC, partitions=(make(
                vote_request.PartitionData, partition_index=0, replica_epoch=request.epoch,
                replica_id=request.candidate_id, replica_directory_id=None,
                voter_directory_id=None, last_offset_epoch=request.last_epoch,
                last_offset=request.end_offset, pre_vote=request.pre_vote),)),))
    if isinstance(request, BeginQuorumEpoch):
        return make(begin_request.BeginQuorumEpochRequest, cluster_id=None, topics=(make(
            begin_request.TopicData, topic_name=METADATA_TOPIC, partitions=(make(
                begin_request.PartitionData, partition_index=0, leader_id=request.leader_id,
                leader_epoch=request.epoch),)),))
    if isinstance(request, EndQuorumEpoch):
        return make(end_request.EndQuorumEpochRequest, cluster_id=None, topics=(make(
            end_request.TopicData, topic_name=METADATA_TOPIC, partitions=(make(
                end_request.PartitionData, partition_index=0, leader_id=request.leader_id,
                leader_epoch=request.epoch, preferred_successors=request.successors),)),))
    if isinstance(request, RaftFetch):
        return fetch_of(request, max_wait_s)
    raise TypeError(f"not a quorum request: {request!r}")


def fetch_of(request: RaftFetch, max_wait_s: float) -> object:
    return make(fetch_request.FetchRequest, replica_id=request.replica_id,
                max_wait=datetime.timedelta(seconds=max_wait_s), min_bytes=1,
                max_bytes=request.max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=(), rack_id="", topics=(make(
                    fetch_request.FetchTopic, topic=METADATA_TOPIC, partitions=(make(
                        fetch_request.FetchPartition, partition=0,
                        current_leader_epoch=request.epoch, fetch_offset=request.fetch_offset,
                        last_fetched_epoch=request.last_fetched_epoch, log_start_offset=-1,
                        partition_max_bytes=request.max_bytes),)),))


def decode_response(request: object, response: object) -> object:
    if isinstance(request, RaftFetch):
        return fetch_response_of(response)
    if response.error_code != ErrorCode.none or not response.topics:
        return None  # the whole request was refused (e.g. by a node of no quorum): as if lost
    partition = response.topics[0].partitions[0]
    if isinstance(request, VoteRequest):
        return VoteResponse(partition.error_code, partition.leader_id, partition.leader_epoch,
                            partition.vote_granted)
    return QuorumAck(partition.error_code, partition.leader_id, partition.leader_epoch)


def fetch_response_of(response: object) -> RaftFetchResponse | None:
    if response.error_code != ErrorCode.none or not response.responses:
        return None
    data = response.responses[0].partitions[0]
    diverging = snapshot = None
    if data.diverging_epoch.end_offset >= 0:
        diverging = DivergingEpoch(data.diverging_epoch.epoch, data.diverging_epoch.end_offset)
    if data.snapshot_id.end_offset >= 0:
        snapshot = SnapshotId(data.snapshot_id.end_offset, data.snapshot_id.epoch)
    return RaftFetchResponse(data.error_code, data.current_leader.leader_id,
                             data.current_leader.leader_epoch, data.high_watermark,
                             data.records or b"", diverging, snapshot, data.log_start_offset)


# --- what a voter receives, and how it answers -------------------------------------------

def decode_request(api_key: ApiKey, request: object) -> object:
    """The message of a request whose topic is ``__cluster_metadata`` (checked by the
    handler); Fetch: its one partition."""
    if api_key == ApiKey.FETCH:
        partition = request.topics[0].partitions[0]
        return RaftFetch(request.replica_id, partition.current_leader_epoch,
                         partition.fetch_offset, partition.last_fetched_epoch,
                         min(partition.partition_max_bytes, request.max_bytes))
    partition = request.topics[0].partitions[0]
    if api_key == ApiKey.VOTE:
        return VoteRequest(partition.replica_epoch, partition.replica_id,
                           partition.last_offset_epoch, partition.last_offset,
                           getattr(partition, "pre_vote", False))
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpoch(partition.leader_id, partition.leader_epoch)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        return EndQuorumEpoch(partition.leader_id, partition.leader_epoch,
                              tuple(partition.preferred_successors))
    raise TypeError(f"not a quorum API: {api_key!r}")


def encode_vote_response(answer: VoteResponse, version: int) -> object:
    """The answer in the request's own version."""
    module = load_payload_module(ApiKey.VOTE, version, EntityType.response)
    return make(module.VoteResponse, error_code=ErrorCode.none, topics=(make(
        module.TopicData, topic_name=METADATA_TOPIC, partitions=(make(
            module.PartitionData, partition_index=0, error_code=answer.error,
            leader_id=answer.leader_id, leader_epoch=answer.epoch,
            vote_granted=answer.granted),)),))


# BeginQuorumEpoch's and EndQuorumEpoch's answers: the schema module and its response.
_ACKS = {ApiKey.BEGIN_QUORUM_EPOCH: (begin_response, begin_response.BeginQuorumEpochResponse),
         ApiKey.END_QUORUM_EPOCH: (end_response, end_response.EndQuorumEpochResponse)}


def encode_ack(api_key: ApiKey, answer: QuorumAck) -> object:
    module, response = _ACKS[api_key]
    return make(response, error_code=ErrorCode.none, topics=(make(
        module.TopicData, topic_name=METADATA_TOPIC, partitions=(make(
            module.PartitionData, partition_index=0, error_code=answer.error,
            leader_id=answer.leader_id, leader_epoch=answer.epoch),)),))


def refusal(api_key: ApiKey, version: int, error: ErrorCode) -> object:
    """The whole request refused (a node that is not a voter, another partition)."""
    if api_key == ApiKey.VOTE:
        module = load_payload_module(ApiKey.VOTE, version, EntityType.response)
        return make(module.VoteResponse, error_code=error, topics=())
    return make(_ACKS[api_key][1], error_code=error, topics=())


def fetch_partition_fields(answer: RaftFetchResponse) -> dict:
    """A Fetch answer's partition fields (the fetch handler builds the entry with its own
    version's schema)."""
    return dict(
        error_code=answer.error, high_watermark=answer.high_watermark,
        last_stable_offset=answer.high_watermark, log_start_offset=answer.log_start_offset,
        records=answer.records,
        diverging_epoch=(answer.diverging.epoch, answer.diverging.end_offset)
        if answer.diverging else None,
        current_leader=(answer.leader_id, answer.epoch),
        snapshot_id=(answer.snapshot.end_offset, answer.snapshot.epoch)
        if answer.snapshot else None)

