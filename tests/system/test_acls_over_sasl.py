"""ACLs for authenticated users, end to end: `kipper cluster up --security sasl-ssl` (the
authorizer on, admin a super user), users created by the admin with SCRAM credentials, their
ACLs created by the admin, and each user's unmodified confluent-kafka client allowed or
refused exactly as Kafka's StandardAuthorizer would."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from bench.local_cluster import LocalCluster
from support.authorization import consume_error, produce_error
from support.wait import wait_until

USERS = ("alice", "bob", "carol")


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("acl-sasl"), brokers=1,
                           extra_args=["--security", "sasl-ssl"]).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def user_client(admin_config: dict[str, str], user: str) -> dict[str, str]:
    return {**admin_config, "sasl.username": user, "sasl.password": f"{user}-secret"}


def allow(resource: ResourceType, name: str, user: str, operation: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource, name, pattern, f"User:{user}", "*", operation, permission)


def test_users_may_do_what_their_acls_allow_and_nothing_else(secure):
    admin_config = secure.client_config()
    admin = AdminClient(admin_config)
    orders, private = f"orders-{uuid.uuid4().hex[:6]}", f"orders-private-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(orders, 1, 1), NewTopic(private, 1, 1)]).values():
        future.result(30)
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion(user, ScramCredentialInfo(
                ScramMechanism.SCRAM_SHA_512, 4096), f"{user}-secret".encode())
            for user in USERS]).values():
        future.result(30)
    for future in admin.create_acls([
            # alice writes orders, and may use group ga but read no topic with it.
            allow(ResourceType.TOPIC, orders, "alice", AclOperation.WRITE),
            allow(ResourceType.GROUP, "ga", "alice", AclOperation.READ),
            # bob reads every topic starting "orders-" but the private one, as group g1 only.
            allow(ResourceType.TOPIC, "orders-", "bob", AclOperation.READ,
                  ResourcePatternType.PREFIXED),
            allow(ResourceType.TOPIC, private, "bob", AclOperation.READ,
                  permission=AclPermissionType.DENY),
            allow(ResourceType.GROUP, "g1", "bob", AclOperation.READ)]).values():
        future.result(30)
    alice, bob, carol = (user_client(admin_config, user) for user in USERS)

    # The credentials reach the broker through the metadata log: alice logs in once it has.
    wait_until(lambda: produce_error(alice, orders) is None, timeout=60)
    assert produce_error(admin_config, private) is None
    assert consume_error(alice, orders, group="ga").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume_error(alice, orders, group="gb").code() == \
        KafkaError.GROUP_AUTHORIZATION_FAILED
    assert produce_error(bob, orders).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume_error(bob, orders, group="g1") is None
    assert consume_error(bob, orders, group="g2").code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    # Deny overrides allow: the prefixed ALLOW does not open the private topic.
    assert consume_error(bob, private, group="g1").code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Metadata shows each user the topics it may describe, and carol none.
    def visible(client: dict[str, str]) -> set[str]:
        return {name for name in AdminClient(client).list_topics(timeout=30).topics
                if name.startswith("orders")}
    assert visible(carol) == set()
    assert visible(alice) == {orders}
    # DESCRIBE is implied by an allowed READ, and a DENY of READ denies READ only (Kafka).
    assert visible(bob) == {orders, private}
