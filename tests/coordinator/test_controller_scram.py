"""SCRAM credentials through the controller (AlterUserScramCredentials): each user's
changes succeed or fail together with Kafka's codes, bootstrap users are written once, and
credentials and a broker's listener endpoints survive a restart, a snapshot and a
snapshot delta; old broker records still load."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerSettings
from coordinator.scram_changes import ScramDeletion, ScramUpsertion
from replication.cluster_metadata import MetadataImage
from replication.scram_credentials import (
    ScramMechanism,
    credential_from_password,
    credential_record,
    salted_password,
)

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture
async def controller(tmp_path):
    controller = Controller(tmp_path, ControllerSettings())
    await controller.start()
    yield controller
    await controller.stop()


def upsertion(user: str, mechanism: ScramMechanism = SHA512, iterations: int = 4096,
              password: str = "secret") -> ScramUpsertion:
    salt = b"salt-" + user.encode()
    return ScramUpsertion(user, mechanism.type_id, iterations, salt,
                          salted_password(mechanism, password, salt, iterations))


def codes(outcome) -> dict[str, ErrorCode]:
    return {user: ErrorCode.none if error is None else error.error_code
            for user, error in outcome.items()}


async def test_upsert_describe_delete(controller):
    outcome = await controller.alter_scram_credentials([], [upsertion("bob"),
                                                            upsertion("bob", SHA256)])
    assert codes(outcome) == {"bob": ErrorCode.none}
    described = controller.image.scram_credentials.describe()
    assert [(i.mechanism, i.iterations) for i in described["bob"]] == [(SHA256, 4096),
                                                                       (SHA512, 4096)]
    outcome = await controller.alter_scram_credentials([ScramDeletion("bob", SHA256.type_id)], [])
    assert codes(outcome) == {"bob": ErrorCode.none}
    assert controller.image.scram_credentials.lookup("bob", SHA256) is None


async def test_errors_are_per_user_and_refuse_all_of_that_users_changes(controller):
    outcome = await controller.alter_scram_credentials(
        [ScramDeletion("ghost", SHA512.type_id), ScramDeletion("twice", SHA512.type_id)],
        [upsertion("twice"), upsertion("few", iterations=10), upsertion("good"),
         ScramUpsertion("odd", 9, 4096, b"s", b"p"), upsertion("")])
    assert codes(outcome) == {
        "ghost": ErrorCode.resource_not_found, "twice": ErrorCode.duplicate_resource,
        "few": ErrorCode.unacceptable_credential, "good": ErrorCode.none,
        "odd": ErrorCode.unsupported_sasl_mechanism, "": ErrorCode.unacceptable_credential}
    assert set(controller.image.scram_credentials.describe()) == {"good"}


async def test_bootstrap_users_are_written_once_and_survive_a_restart(tmp_path, controller):
    await controller.bootstrap_scram_users({"admin": "one"})
    first = controller.image.scram_credentials.lookup("admin", SHA512)
    await controller.bootstrap_scram_users({"admin": "two"})  # kept: it exists
    assert controller.image.scram_credentials.lookup("admin", SHA512) == first
    await controller.register_broker(0, "127.0.0.1", 9093, None,
                                     {"INTERNAL": ("127.0.0.1", 9093),
                                      "CLIENT": ("10.0.0.1", 9094)})
    await controller.stop()
    restarted = Controller(tmp_path, ControllerSettings())
    await restarted.start()
    try:
        assert restarted.image.scram_credentials.lookup("admin", SHA512) == first
        broker = restarted.image.brokers[0]
        assert broker.endpoint("CLIENT") == ("10.0.0.1", 9094)
        assert broker.endpoint("OTHER") is None
        # A snapshot rebuilds both; an image holding a credential the snapshot lacks drops it.
        rebuilt = MetadataImage()
        for offset, record in enumerate(restarted.image.snapshot_records()):
            rebuilt.apply(offset, record)
        assert rebuilt.scram_credentials.lookup("admin", SHA512) == first
        assert rebuilt.brokers[0].listeners == broker.listeners
        stale = MetadataImage()
        stale.apply(0, {"type": "scram_credential", **_record("zed")})
        delta = stale.snapshot_delta(restarted.image.snapshot_records())
        for offset, record in enumerate(delta):
            stale.apply(offset, record)
        assert stale.scram_credentials.describe().keys() == {"admin"}
    finally:
        await restarted.stop()


def test_a_broker_record_without_listeners_still_loads():
    image = MetadataImage()
    image.apply(0, {"type": "broker", "node_id": 1, "host": "h", "port": 1, "rack": None,
                    "epoch": 0})
    assert image.brokers[1].endpoint("ANY") == ("h", 1)


def _record(user: str) -> dict:
    return credential_record(user, credential_from_password(SHA512, "pw"))
