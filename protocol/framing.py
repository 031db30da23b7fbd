"""Kafka request/response framing: size prefix, request header v1/v2, response header v0/v1.

Pure functions over bytes; the broker's connection loop does the I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader
from kio.serial.errors import BufferUnderflow

from .encoder import encoder
from .hand_encoded import (
    FetchAnswer,
    ProduceAnswer,
    encode_fetch_response,
    encode_produce_response,
)
from .internal import JsonBody, is_internal, read_json_body, write_json_body
from .shape import BadShape, check_shape

_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
API_VERSIONS_KEY = 18


class MalformedRequest(ValueError):
    """A frame that cannot be a Kafka request: the connection must be closed."""


class UnsupportedVersion(MalformedRequest):
    """A known frame prefix with an API key/version kipper does not speak."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(slots=True, frozen=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@lru_cache(maxsize=None)
def request_schema(api_key: int, api_version: int) -> Any:
    if is_internal(api_key):
        return JsonBody if api_version == 0 else None
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


@lru_cache(maxsize=None)
def response_schema(api_key: int, api_version: int) -> Any:
    if is_internal(api_key):
        return JsonBody
    return load_response_schema(api_key, api_version)


@lru_cache(maxsize=None)
def _reader(schema: type) -> Any:
    return read_json_body if schema is JsonBody else entity_reader(schema)


@lru_cache(maxsize=None)
def _writer(schema: type) -> Any:
    return write_json_body if schema is JsonBody else encoder(schema)


def peek_header_prefix(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: readable before the version is known to be valid."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    return _HEADER_PREFIX.unpack_from(frame, 0)


def parse_request(frame: bytes, supported: dict[int, tuple[int, int]]) -> tuple[RequestHeader, Any]:
    """Decode header and body of one request frame (without its size prefix).

    ``supported`` maps API key to the (min, max) versions the broker answers.
    """
    api_key, api_version, correlation_id = peek_header_prefix(frame)
    versions = supported.get(api_key)
    schema = request_schema(api_key, api_version)
    if versions is None or not versions[0] <= api_version <= versions[1] or schema is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    position = _HEADER_PREFIX.size
    try:
        (client_id_length,) = _INT16.unpack_from(frame, position)
        position += 2
        if client_id_length >= 0:
            if position + client_id_length > len(frame):
                raise MalformedRequest("client id runs past the end of the frame")
            client_id = frame[position:position + client_id_length].decode("utf-8", "replace")
            position += client_id_length
        else:
            client_id = None
        if schema.__flexible__:
            position = _skip_tagged_fields(frame, position)
        if schema is not JsonBody:
            check_shape(schema, frame, position)
        body, _ = _reader(schema)(frame, position)
    except MalformedRequest:
        raise
    except BadShape as e:
        raise MalformedRequest(f"API key {api_key} v{api_version} request: {e}") from e
    except (BufferUnderflow, struct.error, ValueError, TypeError, IndexError, OverflowError,
            UnicodeDecodeError) as e:
        raise MalformedRequest(
            f"cannot decode API key {api_key} v{api_version} request: {e}") from e
    except Exception as e:  # the native codec raises assorted types on garbage
        raise MalformedRequest(
            f"cannot decode API key {api_key} v{api_version} request: {e!r}") from e
    return RequestHeader(api_key, api_version, correlation_id, client_id), body


def _read_uvarint(buf: bytes, position: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if position >= len(buf):
            raise MalformedRequest("varint runs past the end of the frame")
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint is too long")


def _skip_tagged_fields(buf: bytes, position: int) -> int:
    count, position = _read_uvarint(buf, position)
    for _ in range(count):
        _, position = _read_uvarint(buf, position)
        size, position = _read_uvarint(buf, position)
        position += size
        if position > len(buf):
            raise MalformedRequest("tagged field runs past the end of the frame")
    return position


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """Size-prefixed response frame; header v1 for flexible versions except ApiVersions (v0)."""
    if isinstance(body, FetchAnswer):
        return b"".join(encode_fetch_response(header.correlation_id, header.api_version, body))
    if isinstance(body, ProduceAnswer):
        return encode_produce_response(header.correlation_id, header.api_version, body)
    out = bytearray(4)
    out += _SIZE.pack(header.correlation_id)
    if type(body).__flexible__ and header.api_key != API_VERSIONS_KEY:
        out.append(0)  # no tagged fields in the response header
    _writer(type(body))(out, body)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response_buffers(header: RequestHeader, body: Any) -> list:
    """``encode_response`` as buffers to write in order: a Fetch response's record sets are
    not copied into one frame (protocol.hand_encoded)."""
    if isinstance(body, FetchAnswer):
        return encode_fetch_response(header.correlation_id, header.api_version, body)
    return [encode_response(header, body)]


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytes:
    """Size-prefixed request frame (kipper's broker-to-broker and internal calls)."""
    out = bytearray(4)
    out += _HEADER_PREFIX.pack(api_key, api_version, correlation_id)
    if client_id is None:
        out += _INT16.pack(-1)
    else:
        raw = client_id.encode()
        out += _INT16.pack(len(raw))
        out += raw
    if type(body).__flexible__:
        out.append(0)
    _writer(type(body))(out, body)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(frame: bytes, api_key: int, api_version: int) -> tuple[int, Any]:
    """correlation id and body of a response frame (without its size prefix)."""
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    schema = response_schema(api_key, api_version)
    position = 4
    if schema.__flexible__ and api_key != API_VERSIONS_KEY:
        position = _skip_tagged_fields(frame, position)
    body, _ = _reader(schema)(frame, position)
    return correlation_id, body
