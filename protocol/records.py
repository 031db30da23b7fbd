"""Record batches (magic v2) handled as bytes.

The broker never decodes individual records on the produce or fetch path: it reads the
61-byte batch header, checks the CRC-32C, and rewrites the few header fields a broker
owns (base offset, partition leader epoch, and for LogAppendTime topics the timestamp
type and max timestamp, which are covered by the CRC and so force a re-checksum).
"""

from __future__ import annotations

import datetime
import gc
import io
import json
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cramjam
from crc32c import crc32c
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64

from .compression import compress, decompress

HEADER_SIZE = 61
# baseOffset and batchLength precede the part of the header the batch length counts.
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
# The CRC covers everything from the attributes field to the end of the batch.
CRC_COVERED_FROM = 21
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PARTITION_LEADER_EPOCH_OFFSET = 12

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_PRODUCER_ID = struct.Struct(">q")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidRecordBatch(ValueError):
    """The bytes are not a well-formed v2 record batch (maps to INVALID_RECORD)."""


class CorruptRecordBatch(InvalidRecordBatch):
    """The batch's CRC-32C does not match its contents (maps to CORRUPT_MESSAGE)."""


class UnsupportedMagic(InvalidRecordBatch):
    """A batch with magic < 2 (maps to UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


@dataclass(slots=True)
class BatchHeader:
    """The header fields of one batch, plus where the batch sits in its buffer."""

    position: int
    size: int
    base_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    def at(self, position: int) -> BatchHeader:
        """The same header, for the batch where it sits at ``position``. (Not
        dataclasses.replace, which looks the fields up on every call: a follower's every
        fetch of a partition finds its batch this way.)"""
        return BatchHeader(position, self.size, self.base_offset, self.partition_leader_epoch,
                           self.crc, self.attributes, self.last_offset_delta,
                           self.base_timestamp, self.max_timestamp, self.producer_id,
                           self.producer_epoch, self.base_sequence, self.record_count)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap at Int32.MaxValue, as in Kafka's DefaultRecordBatch.
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position``; raise InvalidRecordBatch if it cannot be a batch."""
    if len(buf) - position < HEADER_SIZE:
        raise InvalidRecordBatch(
            f"record batch truncated: {len(buf) - position} bytes left, header needs {HEADER_SIZE}"
        )
    (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta,
     base_ts, max_ts, producer_id, producer_epoch, base_sequence, record_count) = _HEADER.unpack_from(buf, position)
    if magic != 2:
        raise UnsupportedMagic(f"record batch magic {magic} is not supported (only v2)")
    size = batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE:
        raise InvalidRecordBatch(f"record batch length {batch_length} is smaller than its header")
    if position + size > len(buf):
        raise InvalidRecordBatch(
            f"record batch declares {size} bytes but only {len(buf) - position} remain"
        )
    if last_offset_delta < 0 or record_count < 0:
        raise InvalidRecordBatch("record batch has a negative offset delta or record count")
    return BatchHeader(position, size, base_offset, leader_epoch, crc, attributes,
                       last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
                       base_sequence, record_count)


def iter_batches(buf: bytes | bytearray | memoryview, *, verify_crc: bool = False,
                 allow_partial_tail: bool = False) -> Iterator[BatchHeader]:
    """Yield the header of every batch in ``buf``.

    ``allow_partial_tail`` stops quietly at an incomplete last batch, which is what a
    fetch response or a torn log tail may legitimately contain.
    """
    position = 0
    end = len(buf)
    while position < end:
        try:
            header = read_header(buf, position)
        except InvalidRecordBatch:
            if allow_partial_tail and _is_partial(buf, position):
                return
            raise
        if verify_crc:
            verify_batch_crc(buf, header)
        yield header
        position += header.size


def _is_partial(buf: bytes | bytearray | memoryview, position: int) -> bool:
    remaining = len(buf) - position
    if remaining < HEADER_SIZE:
        return True
    batch_length = _LEADER_EPOCH.unpack_from(buf, position + 8)[0]
    return batch_length + LOG_OVERHEAD > remaining


def verify_batch_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    start = header.position + CRC_COVERED_FROM
    end = header.position + header.size
    actual = crc32c(memoryview(buf)[start:end])
    if actual != header.crc:
        raise CorruptRecordBatch(
            f"record batch at base offset {header.base_offset} has CRC {header.crc:#010x}, "
            f"computed {actual:#010x}"
        )


def validate_produce_records(records: bytes) -> list[BatchHeader]:
    """Check a produce request's record set: whole v2 batches with correct CRCs, none of
    them a control batch (only transaction coordinators write markers, as in Kafka)."""
    if not records:
        raise InvalidRecordBatch("produce request carries no record batch")
    batches = list(iter_batches(records, verify_crc=True))
    if any(batch.is_control for batch in batches):
        raise InvalidRecordBatch("clients may not produce control batches")
    return batches


def assign_offsets(buf: bytearray, batches: list[BatchHeader], first_offset: int,
                   leader_epoch: int, log_append_time_ms: int | None = None) -> int:
    """Stamp offsets (and the leader epoch) into ``buf`` in place; return the next offset.

    With ``log_append_time_ms`` the batches become LogAppendTime batches whose max
    timestamp is the broker's clock, which changes CRC-covered bytes.
    """
    next_offset = first_offset
    for batch in batches:
        _BASE_OFFSET.pack_into(buf, batch.position, next_offset)
        _LEADER_EPOCH.pack_into(buf, batch.position + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        batch.base_offset = next_offset
        batch.partition_leader_epoch = leader_epoch
        if log_append_time_ms is not None:
            stamp_log_append_time(buf, batch, log_append_time_ms)
        next_offset = batch.next_offset
    return next_offset


def stamp_log_append_time(buf: bytearray, batch: BatchHeader, log_append_time_ms: int) -> None:
    """Make ``batch`` (at ``batch.position`` in ``buf``) a LogAppendTime batch stamped with
    the broker's clock; these bytes are CRC-covered, so the CRC is recomputed."""
    batch.attributes |= TIMESTAMP_TYPE_LOG_APPEND
    batch.max_timestamp = log_append_time_ms
    _ATTRIBUTES.pack_into(buf, batch.position + ATTRIBUTES_OFFSET, batch.attributes)
    _TIMESTAMP.pack_into(buf, batch.position + MAX_TIMESTAMP_OFFSET, log_append_time_ms)
    crc = crc32c(memoryview(buf)[batch.position + CRC_COVERED_FROM:batch.position + batch.size])
    _CRC.pack_into(buf, batch.position + CRC_OFFSET, crc)
    batch.crc = crc


def rebase(buf: bytearray, position: int, base_offset: int) -> None:
    """Overwrite one batch's base offset (not CRC-covered), e.g. when serving diskless reads."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)


def build_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int, *,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1,
                base_sequence: int = NO_SEQUENCE, attributes: int = 0) -> bytearray:
    """One uncompressed v2 batch of key/value records with offsets 0..n-1 (kipper's own
    internal records: metadata log, consumer offsets, transaction markers)."""
    out = io.BytesIO()
    timestamp = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.timezone.utc)
    write_new_batch(out, NewRecordBatch(
        producer_id=i64(producer_id), producer_epoch=i16(producer_epoch),
        base_sequence=i32(base_sequence), attributes=i16(attributes),
        records=tuple(Record(attributes=i8(0), timestamp=timestamp, offset=i64(i), key=key,
                             value=value, headers=())
                      for i, (key, value) in enumerate(records))))
    return bytearray(out.getvalue())


# Transaction markers: a control batch (transactional, control attributes) of one record
# whose key is the control record type (version 0, type 0 abort / 1 commit) and whose value
# is EndTxnMarker (version 0, coordinator epoch), as Kafka's ControlRecordType and
# EndTransactionMarker write them.
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A commit or abort marker that ends ``producer_id``'s transaction in a partition."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def build_marker_batch(marker: TxnMarker, timestamp_ms: int) -> bytearray:
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if marker.commit else CONTROL_ABORT)
    value = _END_TXN_MARKER.pack(0, marker.coordinator_epoch)
    return build_batch([(key, value)], timestamp_ms, producer_id=marker.producer_id,
                       producer_epoch=marker.producer_epoch,
                       attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)


def read_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> TxnMarker:
    """The marker a control batch carries. Raises InvalidRecordBatch if it carries none
    (an unknown control type, e.g. KRaft's, or records that do not decode)."""
    try:
        batch, _ = read_batch(bytes(buf[header.position:header.position + header.size]), 0)
        record = batch.records[0]
        key_version, control_type = _CONTROL_KEY.unpack(record.key)
        _, coordinator_epoch = _END_TXN_MARKER.unpack_from(record.value or b"", 0)
    except (IndexError, ValueError, TypeError, struct.error) as e:
        raise InvalidRecordBatch(f"control batch at offset {header.base_offset} carries no "
                                 f"transaction marker: {e}") from None
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidRecordBatch(f"control batch at offset {header.base_offset} has control "
                                 f"type {control_type}, not a transaction marker")
    return TxnMarker(header.producer_id, header.producer_epoch, control_type == CONTROL_COMMIT,
                     coordinator_epoch)


# Pointer batches (active-tiered, KIP-1176): what a leader answers a follower's fetch with
# instead of records that an uploaded WAL object holds. A v2 batch, so the Fetch schema is
# unchanged, whose one record carries the payload (the engine's pointers, opaque here); the
# reserved producer id tells it from records, as no producer is ever given a negative id
# other than -1 (none). Only brokers see these batches: consumers never get a follower's read.
POINTER_PRODUCER_ID = -1176
_POINTER_KEY = b"wal-pointers"


def build_pointer_batch(base_offset: int, payload: bytes, timestamp_ms: int) -> bytes:
    """A pointer batch at ``base_offset`` carrying ``payload``."""
    batch = build_batch([(_POINTER_KEY, payload)], timestamp_ms)
    _BASE_OFFSET.pack_into(batch, 0, base_offset)  # not CRC-covered
    _PRODUCER_ID.pack_into(batch, PRODUCER_ID_OFFSET, POINTER_PRODUCER_ID)  # CRC-covered
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[CRC_COVERED_FROM:]))
    return bytes(batch)


def pointer_batch_payload(records: bytes) -> bytes | None:
    """The payload of a pointer batch; None when ``records`` starts with an ordinary
    record batch (or is no batch at all)."""
    try:
        header = read_header(records)
    except InvalidRecordBatch:
        return None
    if header.producer_id != POINTER_PRODUCER_ID:
        return None
    batch, _ = read_batch(records, 0)
    return batch.records[0].value


def encode_json_records(records: list[dict]) -> bytearray:
    """One batch holding each record as a JSON value: the format of kipper's internal logs
    (cluster metadata, the diskless batch coordinator's log)."""
    return build_batch([(None, json.dumps(r, sort_keys=True).encode()) for r in records],
                       int(time.time() * 1000))


def decode_json_records(data: bytes) -> list[tuple[int, dict]]:
    """(offset, record) for every record in whole uncompressed batches of ``data``.

    A metadata log of 10,000 partitions holds hundreds of thousands of records, which the
    controller and every broker decode when they start: each batch's values are parsed by
    one ``json.loads`` of them joined as an array, and only the record fields before the
    value are decoded (a generic record reader took 60 µs a record). The garbage
    collector is paused meanwhile: the decoded values hold no reference cycles, and the
    collections their allocations set off, each scanning all that was decoded so far,
    took three quarters of the time."""
    return [record for chunk in json_record_chunks(data, 1 << 31) for record in chunk]


def json_record_chunks(data: bytes, size: int) -> Iterator[list[tuple[int, dict]]]:
    """``decode_json_records`` a chunk of at most ``size`` records at a time, for callers
    that give the event loop its turn in between: the one batch of a topic of 5,000
    partitions took 60-130 ms to decode."""
    chunks = _json_record_chunks(data, size)
    while True:
        collecting = gc.isenabled()
        gc.disable()  # while decoding only: the caller's code between chunks collects
        try:
            chunk = next(chunks, None)
        finally:
            if collecting:
                gc.enable()
        if chunk is None:
            return
        yield chunk


def _json_record_chunks(data: bytes, size: int) -> Iterator[list[tuple[int, dict]]]:
    for header in iter_batches(data, allow_partial_tail=True):
        offsets, values = [], []
        position = header.position + HEADER_SIZE
        for i in range(header.record_count):
            length, start = _varint(data, position)
            # attributes (int8), timestampDelta (varlong), offsetDelta (varint), key, value
            _, cursor = _varint(data, start + 1)
            offset_delta, cursor = _varint(data, cursor)
            key_length, cursor = _varint(data, cursor)
            value_length, cursor = _varint(data, cursor + max(key_length, 0))
            offsets.append(header.base_offset + offset_delta)
            values.append(data[cursor:cursor + value_length])
            position = start + length
            if len(values) == size or i == header.record_count - 1:
                yield list(zip(offsets, json.loads(b"[" + b",".join(values) + b"]")))
                offsets, values = [], []


def first_matching_record(batch: bytes, header: BatchHeader,
                          match: Callable[[int, int], bool]) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of a whole batch for which ``match(offset,
    timestamp)`` holds, or None when none does or the records cannot be decoded (the CRC
    covers records a broker never validated). LogAppendTime batches answer for the batch."""
    if header.is_log_append_time:
        return None
    try:
        if header.compression:
            batch = batch[:HEADER_SIZE] + decompress(header.compression, batch[HEADER_SIZE:])
        for offset, timestamp in _record_timestamps(batch, header):
            if match(offset, timestamp):
                return offset, timestamp
    except (IndexError, ValueError, cramjam.DecompressionError):
        pass
    return None


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a stored batch: what the log cleaner decides on (offset, timestamp,
    key, whether it is a tombstone) and its bytes as stored (length prefix included),
    copied unchanged into a rewritten batch, whose header keeps the original base offset
    and base timestamp the record's deltas are relative to."""

    offset: int
    timestamp: int
    key: bytes | None
    is_tombstone: bool
    raw: bytes


def stored_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[StoredRecord]:
    """Every record of the whole batch ``header`` describes, decompressed. Raises
    InvalidRecordBatch if the records do not decode."""
    body = bytes(buf[header.position + HEADER_SIZE:header.position + header.size])
    try:
        if header.compression:
            body = decompress(header.compression, body)
        records = []
        position = 0
        for _ in range(header.record_count):
            length, start = _varint(body, position)
            end = start + length
            # attributes (int8), timestampDelta (varlong), offsetDelta (varint), key
            timestamp_delta, cursor = _varint(body, start + 1)
            offset_delta, cursor = _varint(body, cursor)
            key_length, cursor = _varint(body, cursor)
            key = None if key_length < 0 else body[cursor:cursor + key_length]
            cursor += max(key_length, 0)
            value_length, _ = _varint(body, cursor)
            if end > len(body) or cursor > end:
                raise ValueError("record runs past the end of its batch")
            records.append(StoredRecord(header.base_offset + offset_delta,
                                        header.base_timestamp + timestamp_delta, key,
                                        value_length < 0, body[position:end]))
            position = end
    except (IndexError, ValueError, cramjam.DecompressionError) as e:
        raise InvalidRecordBatch(f"records of the batch at offset {header.base_offset} do "
                                 f"not decode: {e}") from None
    return records


def rewrite_batch(header: BatchHeader, records: list[StoredRecord], codec: int,
                  level: int | None = None) -> bytearray:
    """The batch ``header`` describes holding only ``records`` (some of its own, in order),
    compressed with ``codec``. Everything else is kept: base offset, last offset delta,
    timestamps, producer id, epoch and base sequence, the transactional and control flags,
    so offsets and producer state read the same as before (Kafka's cleaner keeps a batch's
    last offset and producer fields too). An empty ``records`` makes an empty batch, as
    Kafka keeps one to retain a producer's last sequence."""
    payload = compress(codec, b"".join(r.raw for r in records), level) if records else b""
    attributes = (header.attributes & ~COMPRESSION_MASK) | (codec if records else 0)
    out = bytearray(_HEADER.size + len(payload))
    _HEADER.pack_into(out, 0, header.base_offset, len(out) - LOG_OVERHEAD,
                      header.partition_leader_epoch, 2, 0, attributes,
                      header.last_offset_delta, header.base_timestamp, header.max_timestamp,
                      header.producer_id, header.producer_epoch, header.base_sequence,
                      len(records))
    out[_HEADER.size:] = payload
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[CRC_COVERED_FROM:]))
    return out


def _record_timestamps(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of an uncompressed batch, decoding only the
    record fields that precede the key."""
    position = HEADER_SIZE
    for _ in range(header.record_count):
        length, position = _varint(batch, position)
        body = position
        timestamp_delta, position = _varint(batch, position + 1)  # after the attributes byte
        offset_delta, _ = _varint(batch, position)
        yield header.base_offset + offset_delta, header.base_timestamp + timestamp_delta
        position = body + length


def _varint(buf: bytes, position: int) -> tuple[int, int]:
    """A zigzag-encoded varint/varlong and the position after it."""
    value = shift = 0
    while True:
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
