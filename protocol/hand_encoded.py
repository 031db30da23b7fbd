"""The Fetch (v4-v12) and Produce (v3-v12) responses, encoded by hand.

These two answers are the broker's traffic: a producer sends a Produce request per
partition batch (librdkafka one partition per request, so thousands of partitions mean
thousands of small requests), and a Fetch response carries an entry per partition
(thousands in a consumer's full fetch, or a follower's) and the partitions' record bytes.
Built as kio entities and written by kio's codec, a Fetch response cost ~14 us per
partition (entity construction with field conversion, then a generic writer per field) and
three copies of every record byte (into the codec's buffer, out of it into one frame, into
the socket buffer); a one-partition Produce response ~60 us. Here a partition's fixed fields
are packed with one ``struct`` call, and a Fetch partition's records stay the buffer the log
read them into: ``encode_fetch_response`` returns the frame as a list of buffers for a
vectored write (small record sets are copied into the frame, where one more buffer would
cost more than the copy).

The answers mirror kio's ``FetchResponse`` and ``ProduceResponse`` entities field for field
(same names; ints for enums, durations and times), so code that reads a response reads
either. Byte-for-byte equality with kio's encoding is tested for every version
(tests/protocol/test_hand_encoded.py). Every other response is kio's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .encoder import uvarint

FETCH_VERSIONS = range(4, 13)
PRODUCE_VERSIONS = range(3, 13)
# Record sets at least this large go out as their own buffer rather than copied.
SEPARATE_BUFFER_BYTES = 16 * 1024

# Fetch v12 is the first flexible version (compact arrays and strings, tagged fields).
_FLEXIBLE_SINCE = 12
_LOG_START_SINCE = 5
_SESSION_SINCE = 7
_PREFERRED_REPLICA_SINCE = 11
# Produce versions.
_PRODUCE_FLEXIBLE_SINCE = 9
_PRODUCE_LOG_START_SINCE = 5
_PRODUCE_ERRORS_SINCE = 8

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_ABORTED = struct.Struct(">qq")
_HEAD_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_HEAD_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_PRODUCED_V3 = struct.Struct(">ihqq")  # partition, error, base offset, log append time
_PRODUCED_V5 = struct.Struct(">ihqqq")  # ... and log start offset


class AbortedTxn(Protocol):
    producer_id: int
    first_offset: int


@dataclass(slots=True)
class FetchedPartition:
    """One partition's answer (kio's PartitionData)."""

    partition_index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    # None for read_uncommitted (a null array), else the aborted transactions in the records.
    aborted_transactions: Sequence[AbortedTxn] | None = None
    preferred_read_replica: int = -1
    records: bytes | memoryview = b""


@dataclass(slots=True)
class FetchedTopic:
    """kio's FetchableTopicResponse."""

    topic: str
    partitions: Sequence[FetchedPartition]


@dataclass(slots=True)
class FetchAnswer:
    """kio's FetchResponse; ``throttle_time`` in milliseconds."""

    throttle_time: int
    error_code: int
    session_id: int
    responses: Sequence[FetchedTopic]


@dataclass(slots=True)
class RecordError:
    """kio's BatchIndexAndErrorMessage."""

    batch_index: int
    batch_index_error_message: str | None = None


@dataclass(slots=True)
class ProducedPartition:
    """One partition's answer (kio's PartitionProduceResponse); ``log_append_time`` in ms
    since the epoch, -1 unless the topic uses LogAppendTime."""

    index: int
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    record_errors: Sequence[RecordError] = ()
    error_message: str | None = None


@dataclass(slots=True)
class ProducedTopic:
    """kio's TopicProduceResponse."""

    name: str
    partition_responses: Sequence[ProducedPartition]


@dataclass(slots=True)
class ProduceAnswer:
    """kio's ProduceResponse; ``throttle_time`` in milliseconds."""

    responses: Sequence[ProducedTopic]
    throttle_time: int = 0


def encode_fetch_response(correlation_id: int, version: int, answer: FetchAnswer) -> list:
    """The size-prefixed response frame (header v0, or v1 from v12) as buffers to write in
    order."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch v{version} is not encoded here")
    flexible = version >= _FLEXIBLE_SINCE
    head = _HEAD_V5 if version >= _LOG_START_SINCE else _HEAD_V4
    with_log_start = version >= _LOG_START_SINCE
    with_preferred = version >= _PREFERRED_REPLICA_SINCE
    chunks: list = []
    out = bytearray(b"\0\0\0\0")  # the size, filled in last
    out += _INT32.pack(correlation_id)
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    out += _INT32.pack(answer.throttle_time)
    if version >= _SESSION_SINCE:
        out += _INT16.pack(answer.error_code)
        out += _INT32.pack(answer.session_id)
    _array_length(out, len(answer.responses), flexible)
    size = 0
    for topic in answer.responses:
        _string(out, topic.topic, flexible)
        _array_length(out, len(topic.partitions), flexible)
        for p in topic.partitions:
            if with_log_start:
                out += head.pack(p.partition_index, p.error_code, p.high_watermark,
                                 p.last_stable_offset, p.log_start_offset)
            else:
                out += head.pack(p.partition_index, p.error_code, p.high_watermark,
                                 p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                _array_length(out, len(aborted), flexible)
                for txn in aborted:
                    out += _ABORTED.pack(txn.producer_id, txn.first_offset)
                    if flexible:
                        out.append(0)
            if with_preferred:
                out += _INT32.pack(p.preferred_read_replica)
            records = p.records
            length = len(records)
            if flexible:
                out += uvarint(length + 1)
            else:
                out += _INT32.pack(length)
            if length >= SEPARATE_BUFFER_BYTES:
                size += len(out)
                chunks.append(out)
                chunks.append(records)
                size += length
                out = bytearray()
            elif length:
                out += records
            if flexible:
                out.append(0)  # the partition's tagged fields
        if flexible:
            out.append(0)  # the topic's tagged fields
    if flexible:
        out.append(0)  # the response's tagged fields
    size += len(out)
    chunks.append(out)
    _INT32.pack_into(chunks[0], 0, size - 4)
    return chunks


def encode_produce_response(correlation_id: int, version: int, answer: ProduceAnswer) -> bytes:
    """The size-prefixed response frame (header v0, or v1 from v9)."""
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"Produce v{version} is not encoded here")
    flexible = version >= _PRODUCE_FLEXIBLE_SINCE
    with_log_start = version >= _PRODUCE_LOG_START_SINCE
    with_errors = version >= _PRODUCE_ERRORS_SINCE
    out = bytearray(b"\0\0\0\0")  # the size, filled in last
    out += _INT32.pack(correlation_id)
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    _array_length(out, len(answer.responses), flexible)
    for topic in answer.responses:
        _string(out, topic.name, flexible)
        _array_length(out, len(topic.partition_responses), flexible)
        for p in topic.partition_responses:
            if with_log_start:
                out += _PRODUCED_V5.pack(p.index, p.error_code, p.base_offset,
                                         p.log_append_time, p.log_start_offset)
            else:
                out += _PRODUCED_V3.pack(p.index, p.error_code, p.base_offset,
                                         p.log_append_time)
            if with_errors:
                _array_length(out, len(p.record_errors), flexible)
                for error in p.record_errors:
                    out += _INT32.pack(error.batch_index)
                    _string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                _string(out, p.error_message, flexible)
            if flexible:
                out.append(0)  # the partition's tagged fields
        if flexible:
            out.append(0)  # the topic's tagged fields
    out += _INT32.pack(answer.throttle_time)
    if flexible:
        out.append(0)  # the response's tagged fields
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _array_length(out: bytearray, length: int, flexible: bool) -> None:
    if flexible:
        out += uvarint(length + 1)
    else:
        out += _INT32.pack(length)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    """A (nullable) string."""
    if value is None:
        out += b"\0" if flexible else b"\xff\xff"
        return
    raw = value.encode()
    if flexible:
        out += uvarint(len(raw) + 1)
    else:
        out += _INT16.pack(len(raw))
    out += raw
