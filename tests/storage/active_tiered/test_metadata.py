"""WAL refs and pointer batches, without a cluster."""

from __future__ import annotations

from protocol.records import build_batch, iter_batches
from storage.active_tiered.metadata import (WalIndex, WalMetadataFile, WalPointers, WalRef,
                                            decode_pointers, encode_pointers)


def ref(base: int, last: int, key: str = "k", position: int = 0, at: int = 0) -> WalRef:
    return WalRef("kipper-fast-az1", key, "t", 0, base, last, position, 100 * (last - base + 1),
                  at)


def test_pointer_batch_round_trip_and_is_a_valid_batch():
    pointers = WalPointers(10, 29, [ref(10, 19), ref(20, 29, position=1000)])
    encoded = encode_pointers(pointers)
    [header] = iter_batches(encoded, verify_crc=True)
    assert header.base_offset == 10
    assert decode_pointers(encoded) == pointers
    assert decode_pointers(encode_pointers(WalPointers(5, 7, None))) == WalPointers(5, 7, None)


def test_ordinary_records_are_not_pointers():
    assert decode_pointers(bytes(build_batch([(None, b"v")], 0))) is None
    assert decode_pointers(b"") is None


def test_index_covers_consecutive_refs_within_max_bytes():
    index = WalIndex()
    for base in (0, 10, 20):
        index.add(ref(base, base + 9))
    assert index.covering(5, 10_000) == [ref(0, 9), ref(10, 19), ref(20, 29)]
    assert index.covering(15, 1_500) == [ref(10, 19)]  # at least one, then within budget
    assert index.covering(30, 10_000) == []
    # A new leader re-uploading offsets from 15 replaces what overlaps.
    index.add(ref(15, 40, key="new"))
    assert [r.key for r in index.refs()] == ["k", "new"]


def test_metadata_file_drops_expired_and_torn_lines(tmp_path):
    file = WalMetadataFile(tmp_path)
    file.append([ref(0, 9, at=1), ref(10, 19, at=2**62)])
    with open(file.path, "a") as f:
        f.write('{"bucket": "torn')
    assert file.load(retention_ms=1000) == [ref(10, 19, at=2**62)]
