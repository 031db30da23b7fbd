"""Real v2 record batches built by kafka-python's encoder (not ours)."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder


def build_batch(count: int = 3, first_timestamp: int = 1_700_000_000_000, compression: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=first_timestamp + i, key=f"k{i}".encode(),
                       value=f"value-{i}".encode(), headers=[("h", b"x")])
    return bytes(builder.build())
