import struct

import pytest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from protocol.apis import VERSION_RANGES
from protocol.build import make
from protocol.framing import (
    MalformedRequest,
    UnsupportedVersion,
    decode_response,
    encode_request,
    encode_response,
    parse_request,
)

SUPPORTED = {int(k): v for k, v in VERSION_RANGES.items()}


def _strip_size(frame: bytes) -> bytes:
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    return frame[4:]


def test_flexible_request_round_trip():
    body = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="a"),),
                           allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)
    header, parsed = parse_request(_strip_size(encode_request(3, 12, 42, "client", body)), SUPPORTED)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3, 12, 42, "client")
    assert parsed == body


def test_unsupported_version_is_reported_with_its_correlation_id():
    frame = _strip_size(encode_request(3, 12, 7, None, MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)))
    with pytest.raises(UnsupportedVersion) as raised:
        parse_request(frame, {3: (0, 11)})
    assert raised.value.correlation_id == 7


@pytest.mark.parametrize("garbage", [b"", b"\x00\x03", b"\x00\x03\x00\x0c\x00\x00\x00\x01\x7f\xff",
                                     b"\x00\x03\x00\x0c\x00\x00\x00\x01\x00\x00\xff\xff\xff"])
def test_garbage_is_malformed(garbage):
    with pytest.raises(MalformedRequest):
        parse_request(garbage, SUPPORTED)


def test_api_versions_response_uses_header_v0():
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    from protocol.framing import RequestHeader
    body = make(ApiVersionsResponse, error_code=0, api_keys=(), throttle_time=0)
    frame = _strip_size(encode_response(RequestHeader(18, 3, 5, None), body))
    # header v0: correlation id directly followed by the error code (no tag buffer)
    assert frame[:6] == b"\x00\x00\x00\x05\x00\x00"
    assert decode_response(frame, 18, 3) == (5, body)
