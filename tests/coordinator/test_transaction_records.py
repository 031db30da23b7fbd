"""``__transaction_state`` records in Kafka's layout (TransactionLogKey v0,
TransactionLogValue v0 and v1)."""

from __future__ import annotations

import pytest

from coordinator.transaction.records import (
    MalformedTransactionRecord,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from coordinator.transaction.state import TransactionState

ONGOING = TransactionLogValue(1000, 2, 60_000, TransactionState.ONGOING,
                              (("a", 0), ("a", 1), ("b", 3)), 1_700_000_000_123,
                              1_700_000_000_000)
# Kafka's bytes for ONGOING (TransactionLogValue v0, field by field from its schema).
ONGOING_V0 = bytes.fromhex(
    "0000"                  # version 0
    "00000000000003e8"      # producer id 1000
    "0002"                  # producer epoch 2
    "0000ea60"              # transaction timeout 60000 ms
    "01"                    # status Ongoing
    "00000002"              # two topics
    "000161" "00000002" "00000000" "00000001"  # "a": [0, 1]
    "000162" "00000001" "00000003"             # "b": [3]
    "0000018bcfe5687b"      # last update 1700000000123
    "0000018bcfe56800")     # start 1700000000000
# The same as TransactionLogValue v1 (flexible), with Kafka 4's tagged fields
# PreviousProducerId (tag 0) and ClientTransactionVersion (tag 2) set.
ONGOING_V1 = bytes.fromhex(
    "0001" "00000000000003e8" "0002" "0000ea60" "01"
    "03"                                        # two topics (compact: n + 1)
    "0261" "03" "00000000" "00000001" "00"      # "a": [0, 1], no tagged fields
    "0262" "02" "00000003" "00"                 # "b": [3]
    "0000018bcfe5687b" "0000018bcfe56800"
    "02" "00" "08" "00000000000003e7" "02" "02" "0002")


def test_key_is_version_0_and_the_transactional_id() -> None:
    assert encode_key("txn") == bytes.fromhex("0000" "0003" "74786e")
    assert decode_key(encode_key("tx-é")) == "tx-é"


def test_value_v0_is_kafkas_layout() -> None:
    assert encode_value(ONGOING) == ONGOING_V0
    assert decode_value(ONGOING_V0) == ONGOING


def test_value_v1_is_read_past_its_tagged_fields() -> None:
    assert decode_value(ONGOING_V1) == ONGOING


def test_an_empty_transaction_has_null_partitions() -> None:
    empty = TransactionLogValue(7, 0, 60_000, TransactionState.EMPTY, (), 5, -1)
    encoded = encode_value(empty)
    assert encoded[17:21] == bytes.fromhex("ffffffff")
    assert decode_value(encoded) == empty


@pytest.mark.parametrize("data", [
    b"", bytes.fromhex("0002"), ONGOING_V0[:-3], bytes.fromhex("0000") + bytes(14) + b"\x09",
])
def test_malformed_values_are_refused(data: bytes) -> None:
    with pytest.raises(MalformedTransactionRecord):
        decode_value(data)


def test_malformed_keys_are_refused() -> None:
    with pytest.raises(MalformedTransactionRecord):
        decode_key(bytes.fromhex("0001" "0001" "61"))
