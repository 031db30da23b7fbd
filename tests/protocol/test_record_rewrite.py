"""Rewriting a stored batch (the log cleaner, recompression): records decode as stored and a
rewritten batch keeps the header fields offsets and producer state are read from."""

import pytest

from protocol.compression import CODECS, decompress
from protocol.records import (
    build_batch,
    read_header,
    rewrite_batch,
    stored_records,
    verify_batch_crc,
)


def _batch(compression: int = 0):
    batch = build_batch([(b"k1", b"v1"), (b"k2", None), (None, b"v3")], 1_700_000_000_123,
                        producer_id=5, producer_epoch=1, base_sequence=10)
    header = read_header(batch)
    if compression:
        batch = rewrite_batch(header, stored_records(batch, header), compression)
        header = read_header(batch)
    return batch, header


@pytest.mark.parametrize("source", sorted(CODECS.values()))
@pytest.mark.parametrize("target", sorted(CODECS.values()))
def test_a_rewritten_batch_keeps_offsets_producer_fields_and_record_bytes(source, target):
    batch, header = _batch(source)
    records = stored_records(batch, header)
    assert [(r.offset, r.key, r.is_tombstone) for r in records] == [
        (0, b"k1", False), (1, b"k2", True), (2, None, False)]
    assert {r.timestamp for r in records} == {1_700_000_000_123}

    rewritten = rewrite_batch(header, records[1:], target, level=None)
    new = read_header(rewritten)
    verify_batch_crc(rewritten, new)
    assert new.compression == target and new.record_count == 2
    for name in ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence"):
        assert getattr(new, name) == getattr(header, name), name
    assert [r.raw for r in stored_records(rewritten, new)] == [r.raw for r in records[1:]]


def test_an_emptied_batch_keeps_its_offsets_and_carries_no_records():
    batch, header = _batch()
    empty = rewrite_batch(header, [], CODECS["gzip"])
    new = read_header(empty)
    assert (new.record_count, new.compression, new.size) == (0, 0, 61)
    assert (new.base_offset, new.last_offset, new.base_sequence) == (0, 2, 10)
    assert stored_records(empty, new) == []


def test_snappy_is_written_in_the_java_clients_framing():
    batch, header = _batch(CODECS["snappy"])
    assert bytes(batch[61:69]) == b"\x82SNAPPY\x00"
    assert decompress(CODECS["snappy"], bytes(batch[61:]))
