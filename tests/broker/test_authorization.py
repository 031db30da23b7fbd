"""Authorization (issue #18) at the handlers: a broker started in-process with
``authorizer_enabled``, its request handlers called with RequestContexts of different
principals (no SASL is needed to be someone here), the ACLs managed through the
CreateAcls/DescribeAcls/DeleteAcls handlers as a client would."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from broker.config import BrokerConfig
from broker.handlers import HANDLERS, RequestContext
from broker.server import Broker
from broker.security.authorize import OMITTED
from protocol.apis import ApiKey
from protocol.build import make
from protocol.framing import RequestHeader
from protocol.records import build_batch
from replication.acls import AclOperation as Op
from replication.acls import AclPermissionType, PatternType, ResourceType
from replication.cluster_metadata import MetadataImage

ADMIN = "User:admin"
ALICE, BOB, CAROL, DAVE = "User:alice", "User:bob", "User:carol", "User:dave"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


@pytest.fixture
async def start_broker(tmp_path: Path):
    """Start in-process brokers with the given settings (authorizer on, User:admin a super
    user, unless told otherwise); all stopped at teardown."""
    started: list[Broker] = []

    async def start(data_dir: Path | None = None, **settings) -> Broker:
        config = BrokerConfig(**{
            "node_id": 0, "listener": "127.0.0.1:0",
            "data_dir": data_dir or tmp_path / f"broker-{len(started)}",
            "authorizer_enabled": True,
            "super_users": ADMIN, **settings})
        broker = Broker(config)
        started.append(broker)
        await broker.start()
        return broker

    yield start
    for broker in started:
        await broker.stop()


class Client:
    """Requests to a broker's handlers as ``principal``, at the versions given."""

    def __init__(self, broker: Broker, principal: str) -> None:
        self.broker = broker
        self.principal = principal

    async def call(self, api_key: ApiKey, version: int, entity: str = "", **fields):
        schema = load_payload_module(api_key, version, EntityType.request)
        name = entity or type_name(schema)
        context = RequestContext(RequestHeader(api_key, version, 1, "authz-test"),
                                 self.broker.services, "127.0.0.1:1", None, self.principal,
                                 "127.0.0.1")
        return await HANDLERS[api_key](context, make(getattr(schema, name), **fields))


def type_name(schema) -> str:
    return next(name for name, value in vars(schema).items()
                if isinstance(value, type) and getattr(value, "__type__", None)
                == EntityType.request)


def entity(api_key: ApiKey, version: int, entity_name: str, **fields):
    return make(getattr(load_payload_module(api_key, version, EntityType.request),
                        entity_name), **fields)


async def create_acls(client: Client, *acls: tuple) -> list:
    """(resource type, name, pattern type, principal, operation, permission) each, host *."""
    response = await client.call(ApiKey.CREATE_ACLS, 3, creations=tuple(
        entity(ApiKey.CREATE_ACLS, 3, "AclCreation", resource_type=rt, resource_name=name,
               resource_pattern_type=pt, principal=principal, host="*", operation=op,
               permission_type=permission)
        for rt, name, pt, principal, op, permission in acls))
    return [(r.error_code, r.error_message) for r in response.results]


async def created_topic(client: Client, name: str):
    """CreateTopics v7's result for one topic."""
    response = await client.call(ApiKey.CREATE_TOPICS, 7, timeout=30_000, validate_only=False,
                                 topics=(entity(ApiKey.CREATE_TOPICS, 7, "CreatableTopic",
                                                name=name, num_partitions=1,
                                                replication_factor=1, assignments=(),
                                                configs=()),))
    return response.topics[0]


async def create_topic(client: Client, name: str) -> ErrorCode:
    return (await created_topic(client, name)).error_code


async def delete_topic(client: Client, name: str) -> ErrorCode:
    response = await client.call(ApiKey.DELETE_TOPICS, 5, topic_names=(name,), timeout=30_000)
    return response.responses[0].error_code


async def produce(client: Client, topic: str, transactional_id: str | None = None) -> ErrorCode:
    batch = bytes(build_batch([(b"k", b"v")], 1_700_000_000_000))
    response = await client.call(
        ApiKey.PRODUCE, 9, transactional_id=transactional_id, acks=1, timeout=5000,
        topic_data=(entity(ApiKey.PRODUCE, 9, "TopicProduceData", name=topic, partition_data=(
            entity(ApiKey.PRODUCE, 9, "PartitionProduceData", index=0, records=batch),)),))
    return response.responses[0].partition_responses[0].error_code


async def fetch(client: Client, topic: str) -> ErrorCode:
    response = await client.call(
        ApiKey.FETCH, 12, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
        rack_id="", topics=(entity(ApiKey.FETCH, 12, "FetchTopic", topic=topic, partitions=(
            entity(ApiKey.FETCH, 12, "FetchPartition", partition=0, current_leader_epoch=-1,
                   fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                   partition_max_bytes=1 << 20),)),))
    return response.responses[0].partitions[0].error_code


async def metadata(client: Client, *topics: str, operations: bool = False):
    response = await client.call(
        ApiKey.METADATA, 12, allow_auto_topic_creation=False,
        include_topic_authorized_operations=operations,
        topics=tuple(entity(ApiKey.METADATA, 12, "MetadataRequestTopic", topic_id=None,
                            name=name) for name in topics) if topics else None)
    return {t.name: (t.error_code, t.topic_authorized_operations) for t in response.topics}


async def join(client: Client, group_id: str) -> ErrorCode:
    response = await client.call(
        ApiKey.JOIN_GROUP, 5, group_id=group_id, session_timeout=10_000,
        rebalance_timeout=10_000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=(entity(
            ApiKey.JOIN_GROUP, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),))
    return response.error_code


def bits(*operations: Op) -> int:
    return sum(1 << op for op in operations)


async def test_acls_are_managed_by_those_allowed_and_validated(start_broker):
    broker = await start_broker()
    admin, alice = Client(broker, ADMIN), Client(broker, ALICE)
    assert await create_acls(admin, (TOPIC, "orders", LITERAL, ALICE, Op.WRITE, ALLOW),
                             (TOPIC, "ord", PREFIXED, BOB, Op.READ, DENY),
                             (TOPIC, "orders", LITERAL, ALICE, Op.WRITE, ALLOW)) == [
        (ErrorCode.none, None)] * 3
    # Kafka's INVALID_REQUEST reasons, each creation on its own.
    assert await create_acls(admin, (TOPIC, "x", LITERAL, "alice", Op.READ, ALLOW),
                             (CLUSTER, "other", LITERAL, ALICE, Op.ALTER, ALLOW),
                             (TOPIC, "x", PatternType.MATCH, ALICE, Op.READ, ALLOW),
                             (TOPIC, "x", LITERAL, ALICE, Op.ANY, ALLOW)) == [
        (ErrorCode.invalid_request, "expected a string in format principalType:principalName "
                                    "but got 'alice'"),
        (ErrorCode.invalid_request,
         "The only valid name for the CLUSTER resource is kafka-cluster"),
        (ErrorCode.invalid_request, "Invalid patternType MATCH"),
        (ErrorCode.invalid_request, "Invalid operation ANY")]
    # Without ALTER (DESCRIBE to list) on the cluster a client manages no ACLs.
    assert await create_acls(alice, (TOPIC, "t", LITERAL, ALICE, Op.ALL, ALLOW)) == [
        (ErrorCode.cluster_authorization_failed, None)]

    async def describe(client: Client, **filters):
        fields = dict(resource_type_filter=ResourceType.ANY, resource_name_filter=None,
                      pattern_type_filter=PatternType.ANY, principal_filter=None,
                      host_filter=None, operation=Op.ANY, permission_type=AclPermissionType.ANY)
        response = await client.call(ApiKey.DESCRIBE_ACLS, 3, **(fields | filters))
        return response.error_code, sorted(
            (r.resource_name, r.pattern_type, a.principal, a.operation, a.permission_type)
            for r in response.resources for a in r.acls)

    assert await describe(admin) == (ErrorCode.none, [
        ("ord", PREFIXED, BOB, Op.READ, DENY), ("orders", LITERAL, ALICE, Op.WRITE, ALLOW)])
    # MATCH: every ACL that applies to the name.
    assert await describe(admin, resource_type_filter=TOPIC, resource_name_filter="ordersX",
                          pattern_type_filter=PatternType.MATCH) == (ErrorCode.none, [
        ("ord", PREFIXED, BOB, Op.READ, DENY)])
    assert (await describe(alice))[0] == ErrorCode.cluster_authorization_failed
    assert (await describe(admin, operation=0))[0] == ErrorCode.invalid_request

    response = await admin.call(ApiKey.DELETE_ACLS, 3, filters=(
        entity(ApiKey.DELETE_ACLS, 3, "DeleteAclsFilter", resource_type_filter=TOPIC,
               resource_name_filter=None, pattern_type_filter=PREFIXED, principal_filter=None,
               host_filter=None, operation=Op.ANY, permission_type=AclPermissionType.ANY),))
    [result] = response.filter_results
    assert result.error_code == ErrorCode.none
    assert [(m.resource_name, m.principal) for m in result.matching_acls] == [("ord", BOB)]
    assert await describe(admin) == (ErrorCode.none, [
        ("orders", LITERAL, ALICE, Op.WRITE, ALLOW)])
    # The controller's image and this broker's agree, and a snapshot carries the ACLs.
    image = MetadataImage()
    for offset, record in enumerate(broker.controller.image.snapshot_records()):
        image.apply(offset, record)
    assert image.acls.acls() == broker.services.image.acls.acls() != []


async def test_producer_writes_but_does_not_read_and_consumer_reads_as_its_group(start_broker):
    broker = await start_broker()
    admin, alice, bob = Client(broker, ADMIN), Client(broker, ALICE), Client(broker, BOB)
    assert await create_topic(admin, "orders") == ErrorCode.none
    await create_acls(admin, (TOPIC, "orders", LITERAL, ALICE, Op.WRITE, ALLOW),
                      (TOPIC, "orders", LITERAL, BOB, Op.READ, ALLOW),
                      (GROUP, "g1", LITERAL, BOB, Op.READ, ALLOW))
    assert await produce(alice, "orders") == ErrorCode.none
    assert await fetch(alice, "orders") == ErrorCode.topic_authorization_failed
    assert await fetch(bob, "orders") == ErrorCode.none
    assert await produce(bob, "orders") == ErrorCode.topic_authorization_failed
    # Groups: READ on g1 only.
    assert await join(bob, "g2") == ErrorCode.group_authorization_failed
    assert await join(alice, "g1") == ErrorCode.group_authorization_failed
    assert await join(bob, "g1") != ErrorCode.group_authorization_failed
    found = await bob.call(ApiKey.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=("g1", "g2"))
    assert [c.error_code for c in found.coordinators] == [
        ErrorCode.none, ErrorCode.group_authorization_failed]
    committed = await bob.call(ApiKey.OFFSET_COMMIT, 8, group_id="g2",
                               generation_id_or_member_epoch=-1, member_id="",
                               group_instance_id=None, topics=(entity(
                                   ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestTopic",
                                   name="orders", partitions=(entity(
                                       ApiKey.OFFSET_COMMIT, 8, "OffsetCommitRequestPartition",
                                       partition_index=0, committed_offset=1,
                                       committed_leader_epoch=-1, committed_metadata=""),)),))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.group_authorization_failed
    # WRITE implies DESCRIBE: alice sees the topic and what she may do with it.
    assert await metadata(alice, operations=True) == {
        "orders": (ErrorCode.none, bits(Op.WRITE, Op.DESCRIBE))}
    # An idempotent producer: WRITE on some topic is enough (KIP-679).
    for client, error in ((alice, ErrorCode.none),
                          (bob, ErrorCode.cluster_authorization_failed)):
        response = await client.call(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None,
                                     transaction_timeout=60_000, producer_id=-1,
                                     producer_epoch=-1)
        assert response.error_code == error
    # Transactional writes need WRITE on the transactional id as well.
    assert await produce(alice, "orders", "tx-1") == ErrorCode.transactional_id_authorization_failed


async def test_deny_overrides_allow_and_prefixes_apply(start_broker):
    broker = await start_broker()
    admin = Client(broker, ADMIN)
    for topic in ("orders", "orders-eu", "other"):
        assert await create_topic(admin, topic) == ErrorCode.none
    await create_acls(admin, (TOPIC, "orders", LITERAL, "User:*", Op.READ, ALLOW),
                      (TOPIC, "orders", LITERAL, CAROL, Op.READ, DENY),
                      (TOPIC, "ord", PREFIXED, DAVE, Op.WRITE, ALLOW),
                      (TOPIC, "orders-", PREFIXED, DAVE, Op.ALL, DENY))
    assert await fetch(Client(broker, DAVE), "orders") == ErrorCode.none
    assert await fetch(Client(broker, CAROL), "orders") == ErrorCode.topic_authorization_failed
    dave = Client(broker, DAVE)
    assert await produce(dave, "orders") == ErrorCode.none
    assert await produce(dave, "orders-eu") == ErrorCode.topic_authorization_failed
    assert await produce(dave, "other") == ErrorCode.topic_authorization_failed


async def test_metadata_hides_what_a_client_may_not_describe(start_broker):
    broker = await start_broker()
    admin, nobody = Client(broker, ADMIN), Client(broker, "User:nobody")
    assert await create_topic(admin, "orders") == ErrorCode.none
    assert await metadata(nobody) == {}
    # Named: refused, whether it exists or not.
    assert await metadata(nobody, "orders", "missing") == {
        "orders": (ErrorCode.topic_authorization_failed, OMITTED),
        "missing": (ErrorCode.topic_authorization_failed, OMITTED)}
    # A super user sees all and may do all.
    assert (await created_topic(admin, "described")).configs != ()
    assert (await metadata(admin, operations=True))["orders"] == (
        ErrorCode.none, bits(Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
                             Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))
    response = await nobody.call(ApiKey.DESCRIBE_CLUSTER, 1,
                                 include_cluster_authorized_operations=True,
                                 endpoint_type=1)
    assert response.cluster_authorized_operations == 0


async def test_creating_and_deleting_topics_need_their_operations(start_broker):
    broker = await start_broker()
    admin, frank = Client(broker, ADMIN), Client(broker, "User:frank")
    assert await create_topic(admin, "orders") == ErrorCode.none
    assert await create_topic(frank, "frank-1") == ErrorCode.topic_authorization_failed
    await create_acls(admin, (TOPIC, "frank-", PREFIXED, "User:frank", Op.CREATE, ALLOW),
                      (TOPIC, "frank-", PREFIXED, "User:frank", Op.DELETE, ALLOW))
    created = await created_topic(frank, "frank-1")
    assert created.error_code == ErrorCode.none
    # Created, but its configs are not frank's to see (no DESCRIBE_CONFIGS).
    assert (created.configs, created.topic_config_error_code) == (
        (), ErrorCode.topic_authorization_failed)
    assert await create_topic(frank, "elsewhere") == ErrorCode.topic_authorization_failed
    assert "elsewhere" not in broker.services.image.topics
    assert await delete_topic(frank, "orders") == ErrorCode.topic_authorization_failed
    assert await delete_topic(frank, "frank-1") == ErrorCode.none
    assert set(broker.services.image.topics) == {"orders"}
    # CREATE on the cluster allows any topic.
    await create_acls(admin, (CLUSTER, "kafka-cluster", LITERAL, "User:frank", Op.CREATE,
                              ALLOW))
    assert await create_topic(frank, "elsewhere") == ErrorCode.none


async def test_allow_everyone_if_no_acl_found(start_broker):
    broker = await start_broker(allow_everyone_if_no_acl_found=True)
    admin, anyone = Client(broker, ADMIN), Client(broker, "User:ANONYMOUS")
    for topic in ("open", "guarded"):
        assert await create_topic(anyone, topic) == ErrorCode.none
    await create_acls(admin, (TOPIC, "guarded", LITERAL, ALICE, Op.WRITE, ALLOW))
    assert await produce(anyone, "open") == ErrorCode.none
    # Once an ACL names the resource, only what the ACLs allow is.
    assert await produce(anyone, "guarded") == ErrorCode.topic_authorization_failed
    assert await produce(Client(broker, ALICE), "guarded") == ErrorCode.none


async def test_without_an_authorizer_everything_is_allowed_and_acls_are_disabled(start_broker):
    broker = await start_broker(authorizer_enabled=False)
    anyone = Client(broker, "User:ANONYMOUS")
    assert await create_topic(anyone, "t") == ErrorCode.none
    assert await produce(anyone, "t") == ErrorCode.none
    assert await create_acls(anyone, (TOPIC, "t", LITERAL, ALICE, Op.READ, ALLOW)) == [
        (ErrorCode.security_disabled, "No Authorizer is configured.")]


async def test_configs_groups_and_cluster_apis_check_their_resources(start_broker):
    broker = await start_broker()
    admin, grace = Client(broker, ADMIN), Client(broker, "User:grace")
    assert await create_topic(admin, "orders") == ErrorCode.none

    async def describe_configs(client: Client) -> list[ErrorCode]:
        response = await client.call(ApiKey.DESCRIBE_CONFIGS, 4, include_synonyms=False,
                                     include_documentation=False, resources=tuple(
            entity(ApiKey.DESCRIBE_CONFIGS, 4, "DescribeConfigsResource", resource_type=rt,
                   resource_name=name, configuration_keys=None)
            for rt, name in ((2, "orders"), (4, "0"), (32, "g1"))))
        return [r.error_code for r in response.results]

    async def alter_retention(client: Client) -> ErrorCode:
        response = await client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False,
                                     resources=(entity(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterConfigsResource", resource_type=2,
            resource_name="orders", configs=(entity(
                ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, "AlterableConfig", name="retention.ms",
                config_operation=0, value="60000"),)),))
        return response.responses[0].error_code

    async def cluster_errors(client: Client) -> list[ErrorCode]:
        log_dirs = await client.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
        reassignments = await client.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                                          timeout=30_000, topics=None)
        return [log_dirs.error_code, reassignments.error_code]

    async def groups(client: Client) -> tuple:
        described = await client.call(ApiKey.DESCRIBE_GROUPS, 5, groups=("g1",),
                                      include_authorized_operations=True)
        fetched = await client.call(ApiKey.OFFSET_FETCH, 7, group_id="g1", topics=None,
                                    require_stable=False)
        # (The group coordinator may still be loading: NOT_COORDINATOR is no refusal.)
        return (described.groups[0].error_code == ErrorCode.group_authorization_failed,
                described.groups[0].authorized_operations,
                fetched.error_code == ErrorCode.group_authorization_failed)

    denied = ErrorCode.topic_authorization_failed, ErrorCode.cluster_authorization_failed
    assert await describe_configs(grace) == [*denied, ErrorCode.group_authorization_failed]
    assert await alter_retention(grace) == ErrorCode.topic_authorization_failed
    assert "retention.ms" not in broker.services.image.topics["orders"].configs
    assert await cluster_errors(grace) == [ErrorCode.cluster_authorization_failed] * 2
    assert await groups(grace) == (True, OMITTED, True)
    response = await grace.call(ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0,
                                topics=(entity(ApiKey.LIST_OFFSETS, 7, "ListOffsetsTopic",
                                               name="orders", partitions=(entity(
                                                   ApiKey.LIST_OFFSETS, 7,
                                                   "ListOffsetsPartition", partition_index=0,
                                                   current_leader_epoch=-1, timestamp=-1),)),))
    assert response.topics[0].partitions[0].error_code == ErrorCode.topic_authorization_failed

    await create_acls(admin, (TOPIC, "orders", LITERAL, "User:grace", Op.ALTER_CONFIGS, ALLOW),
                      (CLUSTER, "kafka-cluster", LITERAL, "User:grace", Op.DESCRIBE, ALLOW),
                      (GROUP, "g", PREFIXED, "User:grace", Op.DESCRIBE, ALLOW))
    # ALTER_CONFIGS implies DESCRIBE_CONFIGS; DESCRIBE on the cluster is not DESCRIBE_CONFIGS.
    assert await describe_configs(grace) == [ErrorCode.none, denied[1],
                                             ErrorCode.group_authorization_failed]
    assert await alter_retention(grace) == ErrorCode.none
    assert broker.services.image.topics["orders"].configs["retention.ms"] == "60000"
    assert await cluster_errors(grace) == [ErrorCode.none] * 2
    assert await groups(grace) == (False, bits(Op.DESCRIBE), False)


@pytest.mark.parametrize("snapshots", [False, True])
async def test_acls_survive_a_restart(start_broker, tmp_path, snapshots):
    """Replayed from the metadata log, or loaded from a snapshot (one after every commit)."""
    settings = {"metadata_log_max_record_bytes_between_snapshots": 1} if snapshots else {}
    broker = await start_broker(tmp_path / "restarted", **settings)
    admin = Client(broker, ADMIN)
    assert await create_topic(admin, "orders") == ErrorCode.none
    await create_acls(admin, (TOPIC, "orders", LITERAL, ALICE, Op.WRITE, ALLOW),
                      (TOPIC, "ord", PREFIXED, BOB, Op.ALL, DENY))
    before = broker.services.image.acls.acls()
    await broker.stop()
    broker = await start_broker(tmp_path / "restarted", **settings)
    if snapshots:
        assert broker.controller.log.latest_snapshot() is not None
    assert broker.services.image.acls.acls() == before
    assert await produce(Client(broker, ALICE), "orders") == ErrorCode.none
    assert await produce(Client(broker, BOB), "orders") == ErrorCode.topic_authorization_failed


def test_snapshot_delta_removes_acls_the_snapshot_lacks():
    from replication.acls import (AccessControlEntry, AclBinding, ResourcePattern, acl_record)
    kept, dropped = (AclBinding(ResourcePattern(TOPIC, name, LITERAL),
                                AccessControlEntry(ALICE, "*", Op.READ, ALLOW))
                     for name in ("kept", "dropped"))
    lagging = MetadataImage()
    for offset, binding in enumerate((kept, dropped)):
        lagging.apply(offset, acl_record(binding))
    current = MetadataImage()
    current.apply(0, acl_record(kept))
    for record in lagging.snapshot_delta(current.snapshot_records()):
        lagging.apply(5, record)
    assert lagging.acls.acls() == [kept]
