"""Compress and decompress a record batch's records section (rare paths only: the produce
and fetch paths never touch records unless a topic's compression.type asks the broker to
recompress, and the log cleaner rewrites batches)."""

from __future__ import annotations

import struct

import cramjam

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
# compression.type names (Kafka's) of the codec ids a batch's attributes carry.
CODECS = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
# The Java client (and librdkafka) frame snappy data the way snappy-java's Xerial
# stream does: a magic header, then length-prefixed raw snappy blocks.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_BLOCK_LENGTH = struct.Struct(">i")
# snappy-java writes Xerial version 1, compatible with version 1, in blocks of 32 KiB.
_XERIAL_VERSIONS = struct.Struct(">ii")
_XERIAL_BLOCK = 32 * 1024


class UnsupportedCompression(ValueError):
    pass


def _snappy(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    position = _XERIAL_HEADER_SIZE
    while position < len(data):
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += _BLOCK_LENGTH.size
        out += cramjam.snappy.decompress_raw(data[position:position + length])
        position += length
    return bytes(out)


def decompress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == SNAPPY:
        return _snappy(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise UnsupportedCompression(f"unknown compression codec {codec}")


def _snappy_xerial(data: bytes) -> bytes:
    """Snappy framed as Kafka's Java broker writes it (snappy-java's stream), which every
    client reads; raw snappy is not read by the Java consumer."""
    out = bytearray(_XERIAL_MAGIC + _XERIAL_VERSIONS.pack(1, 1))
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + _XERIAL_BLOCK]))
        out += _BLOCK_LENGTH.pack(len(block)) + block
    return bytes(out)


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` (a batch's codec id) at ``level`` (None: the
    codec's default), in the framing Kafka's own broker writes."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == SNAPPY:
        return _snappy_xerial(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise UnsupportedCompression(f"unknown compression codec {codec}")
