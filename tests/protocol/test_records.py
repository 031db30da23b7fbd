import dataclasses

import pytest
from kafka.record.default_records import DefaultRecordBatch

from protocol.records import (
    CorruptRecordBatch,
    InvalidRecordBatch,
    TxnMarker,
    UnsupportedMagic,
    assign_offsets,
    build_marker_batch,
    decode_json_records,
    encode_json_records,
    iter_batches,
    json_record_chunks,
    read_header,
    read_marker,
    rebase,
    validate_produce_records,
)
from support.batches import build_batch as build_values_batch


def build_batch(count: int = 3, **batch_fields) -> bytes:
    """``count`` keyed records with one header each (support.batches: kafka-python's encoder)."""
    return bytes(build_values_batch([f"value-{i}".encode() for i in range(count)],
                                    keys=[f"k{i}".encode() for i in range(count)],
                                    headers=[("h", b"x")], **batch_fields))


def test_header_fields_of_a_client_built_batch():
    raw = build_batch(count=5, producer_id=7, producer_epoch=1, base_sequence=10)
    (header,) = validate_produce_records(raw)
    assert header.size == len(raw)
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.max_timestamp == 1_700_000_000_004
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 10)
    assert header.last_sequence == 14


def test_a_header_moved_to_another_position_keeps_every_other_field():
    (header,) = validate_produce_records(build_batch(producer_id=7, base_sequence=10))
    assert header.at(4096) == dataclasses.replace(header, position=4096)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_parse_without_decompressing(codec):
    (header,) = validate_produce_records(build_batch(count=50, compression=codec))
    assert header.compression == codec
    assert header.record_count == 50


def test_assign_offsets_keeps_the_crc_valid_for_clients():
    raw = bytearray(build_batch(count=3) + build_batch(count=2))
    batches = validate_produce_records(bytes(raw))
    assert assign_offsets(raw, batches, first_offset=100, leader_epoch=4) == 105
    decoded = [DefaultRecordBatch(bytes(raw[b.position:b.position + b.size])) for b in batches]
    assert [d.base_offset for d in decoded] == [100, 103]
    assert all(d.validate_crc() for d in decoded)
    assert [r.offset for r in decoded[1]] == [103, 104]


def test_log_append_time_rewrites_timestamp_and_crc():
    raw = bytearray(build_batch(count=2))
    batches = validate_produce_records(bytes(raw))
    assign_offsets(raw, batches, 0, 0, log_append_time_ms=1_800_000_000_000)
    decoded = DefaultRecordBatch(bytes(raw))
    assert decoded.validate_crc()
    assert decoded.timestamp_type == 1
    assert [r.timestamp for r in decoded] == [1_800_000_000_000] * 2
    validate_produce_records(bytes(raw))  # our own check agrees


def test_flipped_byte_is_a_crc_error():
    raw = bytearray(build_batch())
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordBatch):
        validate_produce_records(bytes(raw))


def test_truncated_and_garbage_input():
    raw = build_batch()
    with pytest.raises(InvalidRecordBatch):
        validate_produce_records(raw[:-3])
    with pytest.raises(InvalidRecordBatch):
        validate_produce_records(b"")
    old_magic = bytearray(raw)
    old_magic[16] = 1
    with pytest.raises(UnsupportedMagic):
        validate_produce_records(bytes(old_magic))


def test_partial_tail_is_tolerated_only_when_asked():
    raw = build_batch() + build_batch()[:30]
    assert len(list(iter_batches(raw, allow_partial_tail=True))) == 1
    with pytest.raises(InvalidRecordBatch):
        list(iter_batches(raw))


def test_a_marker_reads_back_and_clients_may_not_produce_one():
    marker = TxnMarker(producer_id=9, producer_epoch=3, commit=False, coordinator_epoch=7)
    batch = build_marker_batch(marker, 1_000)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    assert read_marker(batch, header) == marker
    with pytest.raises(InvalidRecordBatch, match="control"):
        validate_produce_records(bytes(batch))


def test_json_records_decode_with_their_offsets_keys_skipped_and_a_torn_tail_ignored():
    first = encode_json_records([{"type": "topic", "name": "t"}, {"type": "partition", "n": 1}])
    rebase(first, 0, 10)
    # A client-built batch (keys, headers) of JSON values, at offset 12.
    second = bytearray(build_values_batch([b'{"a": [1, 2]}', b'"s"'], keys=[b"k0", b"k1"],
                                          headers=[("h", b"x")]))
    rebase(second, 0, 12)
    data = bytes(first + second)
    assert decode_json_records(data + second[:30]) == [
        (10, {"type": "topic", "name": "t"}), (11, {"type": "partition", "n": 1}),
        (12, {"a": [1, 2]}), (13, "s")]


def test_json_records_decode_in_chunks_that_end_with_each_batch():
    first = encode_json_records([{"n": n} for n in range(5)])
    second = encode_json_records([{"n": n} for n in range(5, 7)])
    rebase(second, 0, 5)
    data = bytes(first + second)
    chunks = list(json_record_chunks(data + bytes(second[:30]), 2))
    assert [[offset for offset, _ in chunk] for chunk in chunks] == [[0, 1], [2, 3], [4], [5, 6]]
    assert [record for chunk in chunks for record in chunk] == decode_json_records(data)
