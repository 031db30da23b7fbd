"""Decompress a record batch's records section (rare paths only: the produce and fetch
paths never decompress)."""

from __future__ import annotations

import struct

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# The Java client (and librdkafka) frame snappy data the way snappy-java's Xerial
# stream does: a magic header, then length-prefixed raw snappy blocks.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_BLOCK_LENGTH = struct.Struct(">i")


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
