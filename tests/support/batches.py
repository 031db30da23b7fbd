"""Record batches for tests, built by another client's encoder (kafka-python's), never by
kipper's own: a test that feeds kipper bytes from kipper's encoder would only check that
kipper agrees with itself."""

from __future__ import annotations

import time
from collections.abc import Sequence

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

# Record i of a batch gets timestamp T0 + i unless the test passes timestamps.
T0 = 1_700_000_000_000
CODEC_NONE = DefaultRecordBatch.CODEC_NONE


def build_batch(values: Sequence[bytes], *, keys: Sequence[bytes] | None = None,
                timestamps: Sequence[int] | None = None, first_timestamp: int = T0,
                headers: Sequence[tuple[str, bytes]] = (), compression: int = CODEC_NONE,
                producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False) -> bytearray:
    """One v2 batch of ``values`` at relative offsets 0..n-1, with no keys unless given, the
    same ``headers`` on every record and timestamps ``first_timestamp + i`` unless given."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        batch_size=1 << 30)
    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps is not None else first_timestamp + i
        builder.append(i, timestamp=timestamp, key=keys[i] if keys is not None else None,
                       value=value, headers=list(headers))
    return builder.build()


def build_batch_now(values: Sequence[bytes], **fields) -> bytearray:
    """A batch stamped now, as a real client's: test nodes apply retention.ms every 2 s, and
    the default timestamps (2023) are past the default retention of 7 days, so a segment of
    them rolls at once and is deleted by the next check."""
    return build_batch(values, first_timestamp=int(time.time() * 1000), **fields)
