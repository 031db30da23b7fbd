"""broker.security.api_authorization: every API kipper serves has its Kafka checks, and the
table is consistent with itself and with Kafka's error for each resource type."""

from __future__ import annotations

import pytest

from broker.handlers import HANDLERS
from broker.security.api_authorization import (
    API_AUTHORIZATION, DENIAL_ERRORS, Scope, authorization_for)
from protocol.apis import ApiKey
from protocol.internal import InternalApiKey
from replication.acls import SUPPORTED_OPERATIONS, AclOperation, ResourceType


def test_every_api_kipper_serves_has_an_entry():
    missing = [api_key for api_key in HANDLERS if api_key not in API_AUTHORIZATION]
    assert not missing, f"APIs served without authorization rules: {missing}"
    assert all(api_key in API_AUTHORIZATION for api_key in ApiKey)


def test_no_entry_overwrites_another():
    """A dict literal keeps the last of two equal keys silently: the two key enums must
    not share a code, so the table has one entry per member of each."""
    assert not {int(key) for key in InternalApiKey} & {int(key) for key in ApiKey}
    assert len(API_AUTHORIZATION) == len(ApiKey) + len(InternalApiKey)


def test_an_unknown_api_is_an_error_not_a_pass():
    with pytest.raises(KeyError):
        authorization_for(4)  # LeaderAndIsr: not served


def test_rules_are_well_formed():
    for api_key, entry in API_AUTHORIZATION.items():
        for rule in entry.rules:
            assert rule.any_of, api_key
            assert (rule.error is None) == (rule.scope is Scope.HIDDEN), api_key
            types = {check.resource_type for check in rule.any_of}
            # A follower's Fetch is the one single-type rule answered with another type's
            # error (test below); rules mixing types have their errors tested below too.
            if (rule.error is not None and len(types) == 1
                    and (api_key, rule.scope) != (ApiKey.FETCH, Scope.REQUEST)):
                assert rule.error == DENIAL_ERRORS[types.pop()], api_key
            for check in rule.any_of:
                # Only operations Kafka lists for the resource type are asked for, but for
                # the controller's DELETE on the cluster (DeleteTopics).
                assert (check.operation in SUPPORTED_OPERATIONS[check.resource_type]
                        or (api_key, check.operation, check.resource_type)
                        == (ApiKey.DELETE_TOPICS, AclOperation.DELETE, ResourceType.CLUSTER)
                        ), api_key


@pytest.mark.parametrize("api_key, error", [
    (ApiKey.FETCH, 29), (ApiKey.OFFSET_FOR_LEADER_EPOCH, 29), (ApiKey.CREATE_TOPICS, 29),
    (ApiKey.DELETE_TOPICS, 29), (ApiKey.WRITE_TXN_MARKERS, 31)])
def test_cluster_wide_permission_standing_in_for_a_resources_keeps_kafkas_error(api_key,
                                                                               error):
    first_rule = authorization_for(api_key).rules[0]
    assert first_rule.any_of[0].resource_type == ResourceType.CLUSTER
    assert first_rule.error == error


def test_errors_of_rules_mixing_resource_types():
    assert authorization_for(ApiKey.INIT_PRODUCER_ID).rules[1].error == 31
    assert authorization_for(ApiKey.METADATA).rules[2].error == 29
    assert authorization_for(ApiKey.DELETE_TOPICS).rules[1].error == 29


def test_denial_error_codes_are_kafkas():
    assert {resource_type.name: int(error) for resource_type, error in DENIAL_ERRORS.items()} \
        == {"TOPIC": 29, "GROUP": 30, "CLUSTER": 31, "TRANSACTIONAL_ID": 53,
            "DELEGATION_TOKEN": 65}


def checks(api_key: int) -> list[tuple[AclOperation, ResourceType]]:
    return [(check.operation, check.resource_type)
            for rule in authorization_for(api_key).rules for check in rule.any_of]


@pytest.mark.parametrize("api_key, expected", [
    (ApiKey.PRODUCE, [(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID),
                      (AclOperation.WRITE, ResourceType.TOPIC)]),
    (ApiKey.FETCH, [(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER),
                    (AclOperation.READ, ResourceType.TOPIC)]),
    (ApiKey.JOIN_GROUP, [(AclOperation.READ, ResourceType.GROUP)]),
    (ApiKey.DELETE_GROUPS, [(AclOperation.DELETE, ResourceType.GROUP)]),
    (ApiKey.CREATE_PARTITIONS, [(AclOperation.ALTER, ResourceType.TOPIC)]),
    (ApiKey.DESCRIBE_PRODUCERS, [(AclOperation.READ, ResourceType.TOPIC)]),
    (ApiKey.ELECT_LEADERS, [(AclOperation.ALTER, ResourceType.CLUSTER)]),
    (ApiKey.CREATE_ACLS, [(AclOperation.ALTER, ResourceType.CLUSTER)]),
    (ApiKey.DESCRIBE_ACLS, [(AclOperation.DESCRIBE, ResourceType.CLUSTER)]),
    (ApiKey.API_VERSIONS, []),
    (ApiKey.SASL_AUTHENTICATE, []),
    (ApiKey.DESCRIBE_CLUSTER, []),
])
def test_checks_of_some_apis(api_key, expected):
    assert checks(api_key) == expected


def test_idempotent_producer_needs_idempotent_write_or_write_on_any_topic():
    (_, idempotent) = authorization_for(ApiKey.INIT_PRODUCER_ID).rules
    cluster, any_topic = idempotent.any_of
    assert (cluster.operation, cluster.resource_type) == (AclOperation.IDEMPOTENT_WRITE,
                                                          ResourceType.CLUSTER)
    assert any_topic.any_resource and any_topic.operation == AclOperation.WRITE
    assert idempotent.scope is Scope.REQUEST


def test_broker_only_apis_need_cluster_action():
    for api_key in (ApiKey.ALTER_PARTITION, ApiKey.BROKER_REGISTRATION,
                    ApiKey.BROKER_HEARTBEAT, ApiKey.FETCH_SNAPSHOT):
        assert checks(api_key) == [(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)]
