"""replication.acls: the StandardAuthorizer rules, checked case by case against what Kafka's
StandardAuthorizerData, ResourcePatternFilter and AclControlManager do."""

from __future__ import annotations

import json

import pytest

from replication.acls import (
    CLUSTER_RESOURCE_NAME, AccessControlEntry, AccessControlEntryFilter, AclBinding,
    AclBindingFilter, AclOperation, AclPermissionType, Authorizer, PatternType,
    ResourcePattern, ResourcePatternFilter, ResourceType, acl_record, binding_from_record,
    binding_problem, filter_problem, operations_bitfield, remove_acl_record,
    super_users_from_config)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acl(name: str, operation: AclOperation = Op.READ, permission=ALLOW, principal=ALICE,
        host="*", pattern_type=LITERAL, resource_type=TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


def authorizer(*bindings: AclBinding, **config) -> Authorizer:
    result = Authorizer(**config)
    for binding in bindings:
        assert result.add(binding)
    return result


def test_wire_codes_are_kafkas():
    assert [(t.name, t.value) for t in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [(t.name, t.value) for t in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert [t.value for t in AclOperation] == list(range(15))
    assert (Op.ALL, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_TOKENS) == (2, 12, 14)
    assert [(t.name, t.value) for t in AclPermissionType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3)]


def test_literal_acl_applies_to_its_name_only():
    auth = authorizer(acl("orders"))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders-eu")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "order")
    assert not auth.authorize(ALICE, HOST, Op.READ, GROUP, "orders")


def test_prefixed_acl_applies_to_names_starting_with_it():
    auth = authorizer(acl("orders", pattern_type=PREFIXED))
    for name in ("orders", "orders-eu", "orders.v2"):
        assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, name)
    for name in ("order", "my-orders", "Orders"):
        assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, name)


def test_prefixes_of_several_lengths_are_all_consulted():
    auth = authorizer(acl("o", pattern_type=PREFIXED),
                      acl("orders-", Op.WRITE, pattern_type=PREFIXED),
                      acl("orders-eu", Op.WRITE, DENY, pattern_type=PREFIXED))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders-eu-1")
    assert auth.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders-us")
    assert not auth.authorize(ALICE, HOST, Op.WRITE, TOPIC, "orders-eu-1")


def test_wildcard_literal_applies_to_every_name_of_its_type():
    auth = authorizer(acl("*"))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "anything")
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "*")
    assert not auth.authorize(ALICE, HOST, Op.READ, GROUP, "anything")


def test_a_prefixed_star_is_a_prefix_not_a_wildcard():
    auth = authorizer(acl("*", pattern_type=PREFIXED))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "*x")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


@pytest.mark.parametrize("deny", [
    acl("orders", permission=DENY),
    acl("ord", permission=DENY, pattern_type=PREFIXED),
    acl("*", permission=DENY),
    acl("orders", Op.ALL, DENY),
    acl("orders", permission=DENY, principal="User:*"),
])
def test_deny_overrides_allow(deny):
    auth = authorizer(acl("orders", Op.ALL), acl("*"), deny)
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


def test_deny_of_another_principal_or_host_does_not_apply():
    auth = authorizer(acl("orders"), acl("orders", permission=DENY, principal=BOB),
                      acl("orders", permission=DENY, host="10.9.9.9"))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, "10.9.9.9", Op.READ, TOPIC, "orders")


def test_super_users_may_do_anything_even_when_denied():
    auth = authorizer(acl("*", Op.ALL, DENY, principal="User:*"),
                      super_users=super_users_from_config(" User:admin ; User:ops;;"))
    assert auth.super_users == {"User:admin", "User:ops"}
    assert auth.authorize("User:admin", HOST, Op.ALTER, CLUSTER, CLUSTER_RESOURCE_NAME)
    assert auth.authorize("User:ops", HOST, Op.DELETE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


def test_super_users_config_needs_principals():
    with pytest.raises(ValueError, match="principalType:principalName"):
        super_users_from_config("User:admin;admin")


def test_allow_everyone_if_no_acl_found_only_where_no_acl_names_the_resource():
    strict = authorizer(acl("orders", principal=BOB))
    lenient = authorizer(acl("orders", principal=BOB), allow_everyone_if_no_acl_found=True)
    for auth in (strict, lenient):
        # An ACL names "orders" (for someone else): the default no longer applies.
        assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not strict.authorize(ALICE, HOST, Op.READ, TOPIC, "payments")
    assert lenient.authorize(ALICE, HOST, Op.READ, TOPIC, "payments")
    assert lenient.authorize(ALICE, HOST, Op.READ, GROUP, "g")
    assert not Authorizer().authorize(ALICE, HOST, Op.READ, GROUP, "g")


def test_allow_everyone_if_no_acl_found_counts_wildcard_and_prefixed_acls():
    auth = authorizer(acl("pay", principal=BOB, pattern_type=PREFIXED),
                      acl("*", Op.WRITE, principal=BOB, resource_type=GROUP),
                      allow_everyone_if_no_acl_found=True)
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "payments")
    assert not auth.authorize(ALICE, HOST, Op.READ, GROUP, "g")
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_allow_of_read_write_delete_alter_implies_describe(granted):
    auth = authorizer(acl("orders", granted))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "orders")


def test_implications_are_only_those_kafka_defines():
    auth = authorizer(acl("orders", Op.ALTER_CONFIGS), acl("g", Op.CREATE, resource_type=GROUP),
                      acl("t", Op.DESCRIBE))
    assert auth.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, GROUP, "g")
    # DESCRIBE implies nothing else; READ does not imply WRITE.
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert not authorizer(acl("t")).authorize(ALICE, HOST, Op.WRITE, TOPIC, "t")


def test_allow_all_implies_every_operation():
    auth = authorizer(acl("orders", Op.ALL))
    for operation in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
                      Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert auth.authorize(ALICE, HOST, operation, TOPIC, "orders")


def test_deny_all_denies_every_operation_but_a_deny_denies_nothing_it_implies():
    everything = authorizer(acl("orders", Op.ALL), acl("orders", Op.ALL, DENY))
    assert not any(everything.authorize(ALICE, HOST, operation, TOPIC, "orders")
                   for operation in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS))
    # A DENY covers its own operation only, in both directions.
    deny_read = authorizer(acl("orders", Op.ALL), acl("orders", Op.READ, DENY))
    assert not deny_read.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert deny_read.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    deny_describe = authorizer(acl("orders", Op.ALL), acl("orders", Op.DESCRIBE, DENY))
    assert not deny_describe.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert deny_describe.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    deny_alter_configs = authorizer(acl("orders", Op.ALL),
                                    acl("orders", Op.ALTER_CONFIGS, DENY))
    assert deny_alter_configs.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "orders")


def test_wildcard_principal_applies_to_every_user():
    auth = authorizer(acl("orders", principal="User:*"))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert auth.authorize(BOB, HOST, Op.READ, TOPIC, "orders")
    # Another principal type named "*" is no wildcard.
    assert not authorizer(acl("orders", principal="Group:*")).authorize(
        ALICE, HOST, Op.READ, TOPIC, "orders")


def test_host_must_be_the_clients_or_the_wildcard():
    auth = authorizer(acl("orders", host=HOST), acl("orders", Op.WRITE))
    assert auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    assert not auth.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "orders")
    assert auth.authorize(ALICE, "10.0.0.2", Op.WRITE, TOPIC, "orders")


def test_add_and_remove_change_the_decisions():
    auth = Authorizer()
    binding = acl("orders")
    assert auth.add(binding) and not auth.add(binding)
    assert len(auth) == 1 and binding in auth
    assert auth.remove(binding) and not auth.remove(binding)
    assert len(auth) == 0
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")
    prefixed = acl("ord", pattern_type=PREFIXED)
    auth.add(prefixed)
    auth.remove(prefixed)
    assert not auth.authorize(ALICE, HOST, Op.READ, TOPIC, "orders")


def test_adding_an_invalid_binding_is_refused():
    with pytest.raises(ValueError, match="Invalid patternType MATCH"):
        Authorizer().add(acl("orders", pattern_type=PatternType.MATCH))


STORED = [
    acl("orders"),
    acl("orders", Op.WRITE, principal=BOB),
    acl("ord", Op.DESCRIBE, pattern_type=PREFIXED),
    acl("*", Op.READ, DENY, host="10.9.9.9"),
    acl("g1", resource_type=GROUP),
    acl(CLUSTER_RESOURCE_NAME, Op.ALTER, resource_type=CLUSTER),
]


@pytest.mark.parametrize("acl_filter, expected", [
    (AclBindingFilter(), STORED),
    (AclBindingFilter(ResourcePatternFilter(TOPIC)), STORED[:4]),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", PatternType.ANY)), STORED[:2]),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", LITERAL)), STORED[:2]),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "ord", PREFIXED)), STORED[2:3]),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "ord", LITERAL)), []),
    # MATCH: everything that would apply to the name, the wildcard and prefixes included.
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "orders", PatternType.MATCH)), STORED[:4]),
    (AclBindingFilter(ResourcePatternFilter(TOPIC, "other", PatternType.MATCH)), STORED[3:4]),
    (AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.MATCH)), STORED),
    (AclBindingFilter(ResourcePatternFilter(pattern_type=PREFIXED)), STORED[2:3]),
    (AclBindingFilter(entry=AccessControlEntryFilter(principal=BOB)), STORED[1:2]),
    (AclBindingFilter(entry=AccessControlEntryFilter(host="10.9.9.9")), STORED[3:4]),
    (AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.READ)),
     [STORED[0], STORED[3], STORED[4]]),
    (AclBindingFilter(entry=AccessControlEntryFilter(permission=DENY)), STORED[3:4]),
    # Filters compare principals as strings: "User:*" only finds ACLs for "User:*".
    (AclBindingFilter(entry=AccessControlEntryFilter(principal="User:*")), []),
])
def test_filters_select_acls_for_describe_and_delete(acl_filter, expected):
    auth = authorizer(*STORED)
    assert auth.acls(acl_filter) == expected
    assert auth.remove_matching(acl_filter) == expected
    assert auth.acls() == [binding for binding in STORED if binding not in expected]


def test_deleting_by_filter_updates_the_index():
    auth = authorizer(*STORED)
    auth.remove_matching(AclBindingFilter(ResourcePatternFilter(TOPIC, "orders",
                                                                PatternType.MATCH)))
    assert not auth.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "orders")
    assert auth.authorize(ALICE, HOST, Op.READ, GROUP, "g1")


def test_filter_with_unknown_codes_is_invalid():
    assert filter_problem(AclBindingFilter()) is None
    assert filter_problem(AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN))) == \
        "Unknown patternFilter."
    assert filter_problem(AclBindingFilter(
        entry=AccessControlEntryFilter(permission=AclPermissionType.UNKNOWN))) == \
        "Unknown entryFilter."


def test_records_round_trip_through_json():
    source = authorizer(*STORED)
    records = json.loads(json.dumps(source.snapshot_records()))
    assert [binding_from_record(record) for record in records] == STORED
    replica = Authorizer()
    for record in records + records:  # replaying twice changes nothing
        replica.apply(record)
    assert replica.acls() == STORED
    record = remove_acl_record(STORED[0])
    assert record["type"] == "remove_acl" and acl_record(STORED[0])["type"] == "acl"
    replica.apply(json.loads(json.dumps(record)))
    assert replica.acls() == STORED[1:]
    with pytest.raises(ValueError, match="not an ACL record"):
        replica.apply({"type": "topic", "name": "orders"})


@pytest.mark.parametrize("binding, problem", [
    (acl("t", resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
    (acl("t", resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl("t", pattern_type=PatternType.MATCH), "Invalid patternType MATCH"),
    (acl("t", pattern_type=PatternType.ANY), "Invalid patternType ANY"),
    (acl("t", pattern_type=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", permission=AclPermissionType.ANY), "Invalid permissionType ANY"),
    (acl("", Op.READ), "Invalid empty resource name"),
    (acl("my-cluster", Op.ALTER, resource_type=CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("t", principal="alice"),
     "expected a string in format principalType:principalName but got 'alice'"),
])
def test_create_acls_validation_reasons(binding, problem):
    assert binding_problem(binding) == problem


@pytest.mark.parametrize("binding", [
    acl("t"),
    acl("t", principal="User:*"),
    acl("*", Op.ALL, DENY, host="*"),
    acl("t-", pattern_type=PREFIXED, host="192.168.1.7"),
    acl(CLUSTER_RESOURCE_NAME, Op.IDEMPOTENT_WRITE, resource_type=CLUSTER),
    acl("User:bob", Op.CREATE_TOKENS, resource_type=ResourceType.USER),
])
def test_valid_bindings_have_no_problem(binding):
    assert binding_problem(binding) is None


def test_authorized_operations_and_their_bitfield():
    auth = authorizer(acl("orders", Op.WRITE), acl("orders", Op.ALTER_CONFIGS),
                      acl("g1", Op.READ, resource_type=GROUP),
                      acl(CLUSTER_RESOURCE_NAME, Op.ALL, resource_type=CLUSTER),
                      acl(CLUSTER_RESOURCE_NAME, Op.CLUSTER_ACTION, DENY,
                          resource_type=CLUSTER))
    topic_ops = auth.authorized_operations(ALICE, HOST, TOPIC, "orders")
    assert topic_ops == {Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert operations_bitfield(topic_ops) == (1 << 4) | (1 << 8) | (1 << 11) | (1 << 10)
    assert auth.authorized_operations(ALICE, HOST, GROUP, "g1") == {Op.READ, Op.DESCRIBE}
    assert auth.authorized_operations(ALICE, HOST, CLUSTER, CLUSTER_RESOURCE_NAME) == {
        Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE}
    assert auth.authorized_operations(BOB, HOST, TOPIC, "orders") == set()
    assert operations_bitfield(()) == 0
    # A super user gets every operation a topic supports, bits 3-8, 10 and 11.
    root = Authorizer(super_users={"User:root"})
    assert operations_bitfield(root.authorized_operations("User:root", HOST, TOPIC, "x")) == \
        sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))


def test_authorize_any_finds_a_resource_not_entirely_denied():
    """InitProducerId's "WRITE on any topic" (Kafka's authorizeByResourceType)."""
    write = Op.WRITE
    assert not Authorizer().authorize_any(ALICE, HOST, write, TOPIC)
    assert Authorizer(allow_everyone_if_no_acl_found=True).authorize_any(ALICE, HOST, write,
                                                                         TOPIC)
    assert Authorizer(super_users={ALICE}).authorize_any(ALICE, HOST, write, TOPIC)
    assert authorizer(acl("orders", write)).authorize_any(ALICE, HOST, write, TOPIC)
    assert authorizer(acl("orders", Op.ALL)).authorize_any(ALICE, HOST, write, TOPIC)
    assert authorizer(acl("ord", write, pattern_type=PREFIXED)).authorize_any(
        ALICE, HOST, write, TOPIC)
    # READ is not WRITE; another principal's or host's ACL does not count.
    assert not authorizer(acl("orders", Op.READ)).authorize_any(ALICE, HOST, write, TOPIC)
    assert not authorizer(acl("orders", write, principal=BOB)).authorize_any(
        ALICE, HOST, write, TOPIC)
    assert not authorizer(acl("orders", write, host="10.9.9.9")).authorize_any(
        ALICE, HOST, write, TOPIC)
    # Every allowed name denied: literally, by a prefix, or by the wildcard.
    assert not authorizer(acl("orders", write), acl("orders", write, DENY)).authorize_any(
        ALICE, HOST, write, TOPIC)
    assert not authorizer(acl("orders", write), acl("or", write, DENY, pattern_type=PREFIXED),
                          acl("ord", write, pattern_type=PREFIXED)).authorize_any(
        ALICE, HOST, write, TOPIC)
    assert not authorizer(acl("*", write), acl("*", write, DENY)).authorize_any(
        ALICE, HOST, write, TOPIC)
    # One allowed name escaping the denials is enough.
    assert authorizer(acl("orders", write), acl("payments", write),
                      acl("orders", write, DENY)).authorize_any(ALICE, HOST, write, TOPIC)
    # ACLs for every user count, for allowing and for denying.
    assert authorizer(acl("orders", write, principal="User:*")).authorize_any(
        ALICE, HOST, write, TOPIC)
    assert not authorizer(acl("orders", write),
                          acl("*", write, DENY, principal="User:*")).authorize_any(
        ALICE, HOST, write, TOPIC)


def test_authorize_any_follows_removals():
    auth = authorizer(acl("orders", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert not auth.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    auth.remove(acl("*", Op.WRITE, DENY))
    assert auth.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)
    auth.remove(acl("orders", Op.WRITE))
    assert not auth.authorize_any(ALICE, HOST, Op.WRITE, TOPIC)


def test_ten_thousand_acls():
    """Many ACLs of every kind: decisions stay right (and come from the index: each one
    looks at the few ACLs that name the resource, not at all 10,000)."""
    auth = Authorizer()
    for i in range(10_000):
        kind = i % 4
        if kind == 0:
            auth.add(acl(f"topic-{i}", principal=f"User:u{i}"))
        elif kind == 1:
            auth.add(acl(f"team-{i}.", Op.WRITE, pattern_type=PREFIXED, principal=f"User:u{i}"))
        elif kind == 2:
            auth.add(acl(f"group-{i}", resource_type=GROUP, principal=f"User:u{i}"))
        else:
            auth.add(acl(f"topic-{i - 3}", Op.READ, DENY, host="10.9.9.9",
                         principal=f"User:u{i - 3}"))
    assert len(auth) == 10_000
    for i in range(0, 10_000, 4):
        principal = f"User:u{i}"
        assert auth.authorize(principal, HOST, Op.READ, TOPIC, f"topic-{i}")
        assert not auth.authorize(principal, "10.9.9.9", Op.READ, TOPIC, f"topic-{i}")
        assert not auth.authorize(principal, HOST, Op.READ, TOPIC, f"topic-{i + 4}")
        assert auth.authorize(f"User:u{i + 1}", HOST, Op.WRITE, TOPIC, f"team-{i + 1}.x")
        assert auth.authorize(f"User:u{i + 2}", HOST, Op.DESCRIBE, GROUP, f"group-{i + 2}")
    assert len(auth.remove_matching(AclBindingFilter(ResourcePatternFilter(GROUP)))) == 2_500
    assert not auth.authorize("User:u2", HOST, Op.READ, GROUP, "group-2")
