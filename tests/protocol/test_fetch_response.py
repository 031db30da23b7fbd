"""The hand-written Fetch response encoder writes exactly what kio's codec writes."""

import dataclasses

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from protocol.build import make
from protocol.fetch_response import (
    MAX_VERSION,
    MIN_VERSION,
    SEPARATE_BUFFER_BYTES,
    FetchAnswer,
    FetchedPartition,
    FetchedTopic,
    encode_fetch_response,
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


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_same_bytes_as_kio(version):
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


def test_other_versions_are_refused():
    with pytest.raises(ValueError):
        encode_fetch_response(1, MAX_VERSION + 1, _answer())
