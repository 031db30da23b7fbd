"""Where groups live in __consumer_offsets and what their records look like."""

from __future__ import annotations

import pytest

from coordinator.coordinator_log import java_string_hash, partition_for
from coordinator.group.records import (
    GroupKey,
    GroupValue,
    MalformedGroupRecord,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)


@pytest.mark.parametrize("text, expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("Hello World", -862545276),
    ("\U0001F600", 31 * 0xD83D + 0xDE00),  # one code point, two UTF-16 units in Java
    ("polygenelubricants", -(2**31)),
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_partition_for_follows_kafka_utils_abs():
    assert partition_for("polygenelubricants", 10) == 0  # Utils.abs(MIN_VALUE) is 0
    # Java's abs, then %: not Python's floor modulo of the negative hash (which gives 24).
    assert partition_for("Hello World", 50) == 862545276 % 50 == 26
    assert {partition_for(f"group-{i}", 10) for i in range(200)} == set(range(10))


def test_offset_commit_key_is_kafkas_layout():
    key = encode_offset_key(OffsetKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetKey("g", "t", 3)


def test_records_round_trip():
    value = OffsetValue(offset=12, leader_epoch=4, metadata="m\u00e9ta", commit_timestamp=99)
    assert decode_offset_value(encode_offset_value(value)) == value
    group = GroupValue("consumer", 7, "range", "m-1", 1234, (
        MemberValue("m-1", None, "client", "/127.0.0.1", 60000, 10000, b"sub", b"assign"),
        MemberValue("m-2", "instance", "c2", "/10.0.0.1", 1, 2, b"", b"")))
    assert decode_group_value(encode_group_value(group)) == group
    empty = GroupValue("", 3, None, None, -1, ())
    assert decode_group_value(encode_group_value(empty)) == empty
    assert decode_key(encode_group_key(GroupKey("g"))) == GroupKey("g")


@pytest.mark.parametrize("data", [b"", b"\x00\x07x", b"\x00\x01\x00\x05ab", b"\x00\x02\xff\xff",
                                  b"\x00\x02\x00\x02\xff\xfe"])
def test_malformed_keys_are_rejected(data):
    with pytest.raises(MalformedGroupRecord):
        decode_key(data)


def test_unknown_value_versions_are_rejected():
    with pytest.raises(MalformedGroupRecord):
        decode_offset_value(b"\x00\x01" + bytes(20))
    with pytest.raises(MalformedGroupRecord):
        decode_group_value(b"\x00\x09")
