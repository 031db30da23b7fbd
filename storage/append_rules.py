"""The rules every append to a partition passes, whatever its engine (what Kafka checks in
``UnifiedLog.append`` and ``LogValidator`` before a batch reaches the log).

``PartitionLog.append`` (storage.log) applies them and only then hands the batches to the
engine's ``_append``, so no engine can skip them. Each rule, and where it is applied:

- **Well-formed batches** (whole magic-v2 batches with a correct CRC-32C):
  ``protocol.records.validate_produce_records``, called by the produce handler before it
  picks a partition. It needs no topic config, so it stays in the sans-I/O protocol layer.
- **Size** (here, ``check_append``): every batch at most ``max.message.bytes``, and the whole
  record set at most ``segment.bytes`` (a segment must be able to hold it). Refused,
  before anything is stored, with MESSAGE_TOO_LARGE and RECORD_LIST_TOO_LARGE respectively
  (Kafka's RecordTooLargeException and RecordBatchTooLargeException).
- **Keys on compacted topics** (here, ``AppendDecision.invalid``): a ``cleanup.policy`` with
  ``compact`` refuses a client's record without a key with INVALID_RECORD, as Kafka's
  LogValidator: the cleaner keeps the latest record of each key, a keyless one has none.
  This is the one rule that decodes records, and only for compacted topics.
- **Timestamp type** (here, ``AppendDecision.log_append_time``): ``message.timestamp.type=
  LogAppendTime`` means the batches are stamped with the broker's clock. Which reading of
  the clock is the engine's business: classic stamps when it appends; diskless has the batch
  coordinator stamp when it commits the batch, so that replaying its log stamps the same.
- **Compression** (here, ``target_codec`` and ``recompressed``): a topic whose
  ``compression.type`` is not ``producer`` stores its batches with that codec, as Kafka's
  LogValidator does: a client batch with another codec is decompressed and recompressed
  (``uncompressed`` only decompresses) before the engine sees it, so every engine stores,
  replicates and uploads the rewritten batch. Each batch is rewritten on its own and keeps
  its offsets delta, timestamps and producer id, epoch and sequence, so idempotence reads
  it as the producer sent it. Records that do not decode are refused with INVALID_RECORD.
  Coordinator batches (offset commits, markers) keep their codec, as control batches do.
  The size rule is checked again on the rewritten batches (Kafka's
  ``messageSizeMaybeChanged``).
- **Producer state** (idempotence: epochs, sequences, retries): the rules are written once,
  in storage.producer_state, and are checked where each engine assigns offsets, because
  only there is the previous batch known: classic in ``ClassicLog._append`` before the write;
  diskless in the batch coordinator when it commits the batch, deterministically, from its
  own log. Both go through ``ProducerState.check_append``.

This module is pure (no I/O, no engine state), like storage.producer_state; the interface
turns a refusal into ``RecordTooLarge``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.compression import CODECS
from protocol.records import BatchHeader, iter_batches, rewrite_batch, stored_records

from .config import LogConfig


class AppendOrigin(enum.Enum):
    """Who wrote the batches (Kafka's AppendOrigin): a client's batches carry sequence
    numbers that idempotence checks; a coordinator's (transactional offset commits in
    ``__consumer_offsets``) carry none, and are checked only for epochs and transactions."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class SizeRefusal:
    """Why batches are too large to store: one batch over max.message.bytes, or the whole
    record set of the partition over segment.bytes (``whole_record_set``)."""

    message: str
    whole_record_set: bool


@dataclass(frozen=True, slots=True)
class AppendDecision:
    """What the rules decided about one append's batches."""

    # Why the batches are refused for their size; None when they may be stored.
    too_large: SizeRefusal | None
    # Stamp the batches with the broker's clock (message.timestamp.type=LogAppendTime);
    # else they keep their producers' CreateTime.
    log_append_time: bool
    origin: AppendOrigin = AppendOrigin.CLIENT
    # The codec id batches are stored with (compression.type); None keeps the producer's.
    target_codec: int | None = None
    # Why the batches are refused with INVALID_RECORD (a keyless record of a compacted
    # topic); None when they may be stored.
    invalid: str | None = None

    def append_time_ms(self, now_ms: int) -> int | None:
        """The timestamp to stamp the batches with at ``now_ms``: None keeps CreateTime."""
        return now_ms if self.log_append_time else None


def check_append(config: LogConfig, records: bytes | bytearray | memoryview,
                 batches: Sequence[BatchHeader],
                 origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendDecision:
    """The rules of a topic with ``config`` for the well-formed batches ``records`` holds."""
    invalid = _keyless(records, batches) if config.compact and origin == AppendOrigin.CLIENT \
        else None
    return AppendDecision(_too_large(config, len(records), batches), config.log_append_time,
                          origin, target_codec(config, origin), invalid)


def _keyless(records: bytes | bytearray | memoryview,
             batches: Sequence[BatchHeader]) -> str | None:
    for batch in batches:
        if not batch.is_control and any(r.key is None for r in stored_records(records, batch)):
            return (f"compacted topic cannot accept a record without a key (batch at "
                    f"offset {batch.base_offset})")
    return None


def target_codec(config: LogConfig, origin: AppendOrigin) -> int | None:
    """The codec a client's batches are stored with; None: as produced."""
    if config.compression_type == "producer" or origin is not AppendOrigin.CLIENT:
        return None
    return CODECS[config.compression_type]


def needs_recompression(decision: AppendDecision, batches: Sequence[BatchHeader]) -> bool:
    codec = decision.target_codec
    return codec is not None and any(
        batch.compression != codec and not batch.is_control for batch in batches)


def recompressed(config: LogConfig, records: bytearray, batches: Sequence[BatchHeader],
                 codec: int) -> tuple[bytearray, list[BatchHeader], SizeRefusal | None]:
    """``records`` with every batch of another codec rewritten with ``codec`` (at the
    topic's level), their new headers, and why the result is too large (None if it is
    not). Raises InvalidRecordBatch when records do not decode."""
    out = bytearray()
    for batch in batches:
        if batch.compression == codec or batch.is_control:
            out += records[batch.position:batch.position + batch.size]
        else:
            out += rewrite_batch(batch, stored_records(records, batch), codec,
                                 config.compression_level)
    headers = list(iter_batches(out))
    return out, headers, _too_large(config, len(out), headers)


def _too_large(config: LogConfig, records_size: int,
               batches: Sequence[BatchHeader]) -> SizeRefusal | None:
    for batch in batches:
        if batch.size > config.max_message_bytes:
            return SizeRefusal(f"record batch of {batch.size} bytes exceeds max.message.bytes="
                               f"{config.max_message_bytes}", whole_record_set=False)
    if records_size > config.segment_bytes:
        return SizeRefusal(f"{records_size} bytes of batches exceed segment.bytes="
                           f"{config.segment_bytes}", whole_record_set=True)
    return None
