"""The SCRAM credential store of the metadata image (replication/scram_credentials.py):
keys derived as RFC 5802 and scramp derive them, Kafka's mechanism ids and iteration
bounds, and the JSON-safe record form written to the metadata log."""

from __future__ import annotations

import json

import pytest
import scramp

from replication.scram_credentials import (
    InvalidScramCredential,
    ScramCredentialInfo,
    ScramCredentials,
    ScramMechanism,
    UnknownScramMechanism,
    credential_from_password,
    credential_from_record,
    credential_from_salted_password,
    credential_record,
    salted_password,
)

SALT = b"0123456789abcdefghijklmnop"


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_keys_from_a_password_match_scramp(mechanism):
    credential = credential_from_password(mechanism, "alice-secret", 8192, SALT)
    salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism).make_auth_info(
        "alice-secret", iteration_count=8192, salt=SALT)
    assert (credential.salt, credential.stored_key, credential.server_key,
            credential.iterations) == (salt, stored_key, server_key, iterations)


def test_an_upsertion_carries_the_salted_password_and_yields_the_same_keys():
    mechanism = ScramMechanism.SCRAM_SHA_512
    salted = salted_password(mechanism, "pw", SALT, 4096)
    assert len(salted) == 64
    assert credential_from_salted_password(mechanism, salted, SALT, 4096) == \
        credential_from_password(mechanism, "pw", 4096, SALT)


def test_a_fresh_salt_per_password():
    a = credential_from_password(ScramMechanism.SCRAM_SHA_256, "same")
    b = credential_from_password(ScramMechanism.SCRAM_SHA_256, "same")
    assert a.salt != b.salt and a.stored_key != b.stored_key
    assert a.iterations == 4096


def test_kafka_mechanism_type_ids():
    assert ScramMechanism.SCRAM_SHA_256.type_id == 1
    assert ScramMechanism.SCRAM_SHA_512.type_id == 2
    assert ScramMechanism.from_type_id(2) is ScramMechanism.SCRAM_SHA_512
    assert ScramMechanism.from_name("SCRAM-SHA-256") is ScramMechanism.SCRAM_SHA_256
    assert ScramMechanism.SCRAM_SHA_256 == "SCRAM-SHA-256"
    with pytest.raises(UnknownScramMechanism):
        ScramMechanism.from_type_id(0)
    with pytest.raises(UnknownScramMechanism):
        ScramMechanism.from_name("SCRAM-SHA-1")


@pytest.mark.parametrize(("iterations", "message"), [(4095, "Too few iterations"),
                                                     (16385, "Too many iterations")])
def test_kafka_iteration_bounds(iterations, message):
    with pytest.raises(InvalidScramCredential, match=message):
        credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", iterations)
    with pytest.raises(InvalidScramCredential, match=message):
        credential_from_salted_password(ScramMechanism.SCRAM_SHA_256, b"x" * 32, SALT, iterations)


def test_empty_salt_salted_password_or_user_are_refused():
    with pytest.raises(InvalidScramCredential):
        credential_from_salted_password(ScramMechanism.SCRAM_SHA_256, b"x" * 32, b"", 4096)
    with pytest.raises(InvalidScramCredential):
        credential_from_salted_password(ScramMechanism.SCRAM_SHA_256, b"", SALT, 4096)
    with pytest.raises(InvalidScramCredential):
        ScramCredentials().upsert("", credential_from_password(ScramMechanism.SCRAM_SHA_256, "p"))


def test_the_repr_shows_no_key_material():
    credential = credential_from_password(ScramMechanism.SCRAM_SHA_256, "pw", salt=SALT)
    text = repr(credential)
    assert "salt" not in text and "key" not in text and "4096" in text


def test_upsert_lookup_delete_describe():
    store = ScramCredentials()
    alice_256 = credential_from_password(ScramMechanism.SCRAM_SHA_256, "a", 4096)
    alice_512 = credential_from_password(ScramMechanism.SCRAM_SHA_512, "a", 8192)
    bob_256 = credential_from_password(ScramMechanism.SCRAM_SHA_256, "b", 5000)
    store.upsert("alice", alice_512)
    store.upsert("alice", alice_256)
    store.upsert("bob", bob_256)
    assert len(store) == 3
    assert store.lookup("alice", ScramMechanism.SCRAM_SHA_512) is alice_512
    assert store.lookup("bob", ScramMechanism.SCRAM_SHA_512) is None
    assert store.lookup("carol", ScramMechanism.SCRAM_SHA_256) is None

    replacement = credential_from_password(ScramMechanism.SCRAM_SHA_256, "b2", 6000)
    store.upsert("bob", replacement)
    assert store.lookup("bob", ScramMechanism.SCRAM_SHA_256) is replacement

    assert store.describe() == {
        "alice": [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                  ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)],
        "bob": [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 6000)],
    }
    assert store.describe(["bob", "carol"]) == {
        "bob": [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 6000)]}

    assert store.delete("bob", ScramMechanism.SCRAM_SHA_256)
    assert not store.delete("bob", ScramMechanism.SCRAM_SHA_256)
    assert store.delete("alice", ScramMechanism.SCRAM_SHA_256)
    assert store.describe() == {
        "alice": [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)]}


def test_records_are_json_safe_and_round_trip():
    store = ScramCredentials()
    store.upsert("alice", credential_from_password(ScramMechanism.SCRAM_SHA_256, "a"))
    store.upsert("alice", credential_from_password(ScramMechanism.SCRAM_SHA_512, "a", 10000))
    store.upsert("bob=,", credential_from_password(ScramMechanism.SCRAM_SHA_256, "b"))
    records = json.loads(json.dumps(store.to_records()))
    assert [(r["name"], r["mechanism"]) for r in records] == [
        ("alice", 1), ("alice", 2), ("bob=,", 1)]
    restored = ScramCredentials.from_records(records)
    assert restored.to_records() == records
    assert restored.lookup("alice", ScramMechanism.SCRAM_SHA_512) == \
        store.lookup("alice", ScramMechanism.SCRAM_SHA_512)


def test_a_record_with_an_unknown_mechanism_is_refused():
    record = credential_record("alice", credential_from_password(ScramMechanism.SCRAM_SHA_256, "a"))
    assert credential_from_record(record)[0] == "alice"
    with pytest.raises(UnknownScramMechanism):
        credential_from_record({**record, "mechanism": 3})
