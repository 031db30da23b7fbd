"""Fixtures for the storage tests: record batches are built and decoded by a real client's
codec (kafka-python, support.batches), never by our own encoder.

The helpers are handed out as fixtures so that test modules need not import this file."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from kafka.record.memory_records import MemoryRecords

from protocol.records import validate_produce_records
from storage.active_tiered import ActiveTiered
from storage.classic import ClassicLog
from storage.config import LogConfig
from storage.objectstore import ObjectNotFound
from storage.objectstore.missing import MissingObjects
from support.batches import build_batch as _build_batch


def _decode(records: bytes) -> list[tuple[int, int, bytes]]:
    """(offset, timestamp, value) of every record, as a consumer would see them."""
    out = []
    for batch in MemoryRecords(bytes(records)):
        batch.validate_crc()
        out.extend((r.offset, r.timestamp, r.value) for r in batch)
    return out


@pytest.fixture
def make_log(tmp_path):
    """make_log(name="t-0", **LogConfig fields) -> ClassicLog in tmp_path/name."""
    def make(name: str = "t-0", **config) -> ClassicLog:
        return ClassicLog("t", 0, LogConfig(**config), tmp_path / name)
    return make


async def _produce(log: ClassicLog, vals: Sequence[bytes], *, epoch: int = 0, **batch_kwargs):
    """Append one batch the way the broker's produce path does."""
    records = _build_batch(vals, **batch_kwargs)
    return await log.append(records, validate_produce_records(records), epoch)


async def _read_all(log: ClassicLog, offset: int | None = None) -> list[tuple[int, int, bytes]]:
    """Fetch from ``offset`` to the log end like a consumer, dropping records below it."""
    offset = log.log_start_offset if offset is None else offset
    out = []
    while offset < log.log_end_offset:
        result = await log.read(offset, 1 << 20)
        records = [r for r in _decode(result.records) if r[0] >= offset]
        assert records, f"no progress at offset {offset}"
        out.extend(records)
        offset = records[-1][0] + 1
    return out


@pytest.fixture
def build_batch():
    """build_batch(values, timestamps=None, compression=CODEC_NONE) -> bytearray."""
    return _build_batch


@pytest.fixture
def decode():
    """decode(records) -> [(offset, timestamp, value)]."""
    return _decode


@pytest.fixture
def produce():
    """await produce(log, values, epoch=0, timestamps=..., compression=...) -> AppendResult."""
    return _produce


@pytest.fixture
def read_all():
    """await read_all(log, offset=log start) -> [(offset, timestamp, value)] up to the end."""
    return _read_all


class MemoryObjectStore:
    """The part of storage.objectstore.ObjectStore the active-tiered engine uses, in memory."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], bytes] = {}
        self.missing = MissingObjects()

    async def put(self, bucket: str, key: str, data: bytes) -> None:
        self.objects[bucket, key] = bytes(data)

    async def get_ranges(self, bucket: str, key: str,
                         ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        data = self.objects.get((bucket, key))
        if data is None:
            raise ObjectNotFound(f"{bucket}/{key} does not exist", "NoSuchKey", bucket, key)
        return [data[start:start + length] for start, length in ranges]

    async def delete(self, bucket: str, keys) -> None:
        for key in keys:
            self.objects.pop((bucket, key), None)


@pytest.fixture
def tiered_engine():
    """An active-tiered engine (one broker's ActiveTiered, node 1 in az1) over an in-memory
    store (``engine.uploader.store``), not started: uploads happen when a test calls
    ``engine.uploader.upload_once()`` after starting it."""
    return ActiveTiered(MemoryObjectStore(), node_id=1, az="az1", key_prefix="test/",
                        upload_interval_ms=3_600_000, upload_max_bytes=1 << 30,
                        upload_timeout_ms=1000, download_timeout_ms=1000)
