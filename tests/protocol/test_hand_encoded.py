"""The hand-written Fetch and Produce response encoders write exactly what kio's codec
writes, at every version."""

import dataclasses

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from protocol.build import make
from protocol.hand_encoded import (
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    SEPARATE_BUFFER_BYTES,
    FetchAnswer,
    FetchedPartition,
    FetchedTopic,
    ProduceAnswer,
    ProducedPartition,
    ProducedTopic,
    RecordError,
    encode_fetch_response,
    encode_produce_response,
)
from protocol.framing import RequestHeader, decode_response, encode_response
from storage.producer_state import AbortedTransaction


def _answer() -> FetchAnswer:
    aborted = [AbortedTransaction(7, 100, 120), AbortedTransaction(2**40, 130, 131)]
    return FetchAnswer(throttle_time=3, error_code=0, session_id=12345, responses=[
        FetchedTopic("orders", [
            FetchedPartition(0, 0, 500, 480, 10, None, -1, b"x" * 100),
            FetchedPartition(1, 0, 500, 480, 10, [], -1, b""),
            FetchedPartition(2, 0, 2**40, 2**40 - 5, 0, aborted, 2,
                             b"y" * (SEPARATE_BUFFER_BYTES + 1)),
            FetchedPartition(3, 6, -1, -1, -1),  # an error entry
        ]),
        FetchedTopic("t" * 200, [FetchedPartition(9, 0, 1, 1, 0, None, -1, b"z" * 200)]),
        FetchedTopic("empty", []),
    ])


def _as_kio(version: int, answer: FetchAnswer):
    """The same response built from kio entities (fields the version lacks are dropped)."""
    module = load_payload_module(1, version, EntityType.response)
    topics = tuple(make(module.FetchableTopicResponse, topic=t.topic, partitions=tuple(
        make(module.PartitionData, **{
            **{f.name: getattr(p, f.name) for f in dataclasses.fields(p)},
            "records": bytes(p.records),
            "aborted_transactions": None if p.aborted_transactions is None else tuple(
                make(module.AbortedTransaction, producer_id=a.producer_id,
                     first_offset=a.first_offset) for a in p.aborted_transactions)})
        for p in t.partitions)) for t in answer.responses)
    return make(module.FetchResponse, throttle_time=answer.throttle_time,
                error_code=answer.error_code, session_id=answer.session_id,
                responses=topics)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_same_bytes_as_kio(version):
    answer = _answer()
    expected = _as_kio(version, answer)
    header = RequestHeader(1, version, 77, None)
    buffers = encode_fetch_response(77, version, answer)
    assert b"".join(buffers) == encode_response(header, expected)
    # A large record set is its own buffer, not a copy.
    assert any(buffer is answer.responses[0].partitions[2].records for buffer in buffers)
    assert encode_response(header, answer) == b"".join(buffers)
    correlation_id, decoded = decode_response(b"".join(buffers)[4:], 1, version)
    assert correlation_id == 77 and decoded == expected


def _produced() -> ProduceAnswer:
    return ProduceAnswer(throttle_time=5, responses=[
        ProducedTopic("orders", [
            ProducedPartition(0, 0, 1234, -1, 0),
            ProducedPartition(1, 0, 2**40, 1_700_000_000_000, 17),
            ProducedPartition(2, 87, error_message="bad batch",
                              record_errors=[RecordError(3, "no"), RecordError(4)]),
        ]),
        ProducedTopic("é" * 30, [ProducedPartition(5, 6, error_message=None)]),
    ])


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_same_bytes_as_kio(version):
    answer = _produced()
    module = load_payload_module(0, version, EntityType.response)
    expected = make(module.ProduceResponse, throttle_time=answer.throttle_time, responses=tuple(
        make(module.TopicProduceResponse, name=t.name, partition_responses=tuple(
            make(module.PartitionProduceResponse, **{
                **{f.name: getattr(p, f.name) for f in dataclasses.fields(p)},
                "record_errors": tuple(make(module.BatchIndexAndErrorMessage,
                                            batch_index=e.batch_index,
                                            batch_index_error_message=e.batch_index_error_message)
                                       for e in p.record_errors)
                if hasattr(module, "BatchIndexAndErrorMessage") else ()})
            for p in t.partition_responses)) for t in answer.responses))
    header = RequestHeader(0, version, 78, None)
    encoded = encode_produce_response(78, version, answer)
    assert encoded == encode_response(header, expected)
    assert encode_response(header, answer) == encoded
    assert decode_response(encoded[4:], 0, version) == (78, expected)


def test_other_versions_are_refused():
    with pytest.raises(ValueError):
        encode_fetch_response(1, FETCH_VERSIONS.stop, _answer())
    with pytest.raises(ValueError):
        encode_produce_response(1, PRODUCE_VERSIONS.stop, _produced())
