"""ACLs with real clients (issue #18): CreateAcls/DescribeAcls/DeleteAcls from
confluent-kafka, kafka-python and kafkajs (kcat manages no ACLs), and produce/consume refused
once a DENY names the client.

Until a listener authenticates clients every one of them is ``User:ANONYMOUS``: the brokers
run the authorizer with ``allow_everyone_if_no_acl_found``, so anonymous clients may manage
ACLs (no ACL names the cluster) and use any topic no ACL names."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
                                   ResourceType)

from protocol.apis import ApiKey
from support.authorization import consume_error, produce_error
from support.processes import BrokerProcess, Cluster
from support.raw import call, connect
from support.wait import wait_until

AUTHORIZER_ENV = {"KIPPER_AUTHORIZER_ENABLED": "true",
                  "KIPPER_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"}
ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", env=AUTHORIZER_ENV).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A controller-only node and two brokers: ACL changes sent to a broker are forwarded
    to the controller, and every broker applies them from the metadata log."""
    cluster = Cluster(tmp_path_factory.mktemp("acls-cluster"), brokers=2,
                      broker_env=AUTHORIZER_ENV)
    cluster.start()
    yield cluster
    cluster.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)


def topic_acl(topic: str, principal: str, operation: AclOperation,
              permission: AclPermissionType,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", operation, permission)


def test_confluent_kafka_admin_creates_describes_and_deletes_acls(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = name("conf")
    allow = topic_acl(topic, "User:alice", AclOperation.READ, AclPermissionType.ALLOW)
    deny = topic_acl(topic[:4], "User:bob", AclOperation.WRITE, AclPermissionType.DENY,
                     ResourcePatternType.PREFIXED)
    for future in admin.create_acls([allow, deny]).values():
        assert future.result(30) is None
    # The cluster has a single name: Kafka's INVALID_REQUEST reason reaches the client.
    bad = AclBinding(ResourceType.BROKER, "other", ResourcePatternType.LITERAL, "User:a", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST

    matching = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None,
                                None, AclOperation.ANY, AclPermissionType.ANY)
    assert set(admin.describe_acls(matching).result(30)) == {allow, deny}
    removed = admin.delete_acls([matching])[matching].result(30)
    assert set(removed) == {allow, deny}
    assert admin.describe_acls(matching).result(30) == []


def test_kafka_python_admin_creates_describes_and_deletes_acls(broker):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType,
                             ACLResourcePatternType, KafkaAdminClient, ResourcePattern,
                             ResourcePatternFilter)
    from kafka.admin import ResourceType as KafkaPythonResourceType

    topic = name("kpy")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acl = ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
                  ResourcePattern(KafkaPythonResourceType.TOPIC, topic,
                                  ACLResourcePatternType.LITERAL))
        created = admin.create_acls([acl])
        assert (len(created["succeeded"]), created["failed"]) == (1, [])
        acl_filter = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(KafkaPythonResourceType.TOPIC, topic,
                                                     ACLResourcePatternType.LITERAL))
        described, error = admin.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name)
                for a in described] == [("User:carol", ACLOperation.DESCRIBE, topic)]
        [(_, deleted, error)] = admin.delete_acls([acl_filter])
        assert error.errno == 0
        assert [a.principal for a in deleted] == ["User:carol"]
        assert admin.describe_acls(acl_filter)[0] == []
    finally:
        admin.close()


def test_kafkajs_admin_creates_describes_and_deletes_acls(broker, kafkajs):
    topic = name("kjs")
    proc = subprocess.run(
        [shutil.which("node"), str(kafkajs / "acls.mjs"), "--bootstrap", broker.bootstrap,
         "--topic", topic], capture_output=True, stdin=subprocess.DEVNULL, timeout=90)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    result = json.loads(proc.stdout)

    assert result["created"] is True
    described = {(r["resourceName"], r["resourcePatternType"]): r["acls"]
                 for r in result["described"]}
    # kafkajs's pattern codes are Kafka's: LITERAL 3, PREFIXED 4; operations READ 3,
    # WRITE 4; permissions DENY 2, ALLOW 3.
    assert described == {
        (topic, 3): [{"principal": "User:alice", "host": "*", "operation": 3,
                      "permissionType": 3}],
        (topic[:3], 4): [{"principal": "User:bob", "host": "*", "operation": 4,
                          "permissionType": 2}]}
    [deleted] = result["deleted"]
    assert deleted["errorCode"] == 0
    assert [(a["resourceName"], a["principal"]) for a in deleted["matchingAcls"]] == [
        (topic[:3], "User:bob")]
    assert [r["resourceName"] for r in result["after"]] == [topic]


def plain(bootstrap: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap}


def add_acls(bootstrap: str, *acls: AclBinding) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_acls(list(acls)).values():
        future.result(30)


def test_a_deny_for_anonymous_refuses_its_produce_and_consume(broker):
    written, read = name("deny-write"), name("deny-read")
    create_topics(broker.bootstrap, written, read)
    assert produce_error(plain(broker.bootstrap), read) is None
    add_acls(broker.bootstrap,
             topic_acl(written, ANONYMOUS, AclOperation.WRITE, AclPermissionType.DENY),
             topic_acl(read, ANONYMOUS, AclOperation.READ, AclPermissionType.DENY),
             # Describing stays allowed, so the clients get to the refused operation.
             topic_acl(written, ANONYMOUS, AclOperation.DESCRIBE, AclPermissionType.ALLOW),
             topic_acl(read, ANONYMOUS, AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    assert produce_error(plain(broker.bootstrap), written).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert consume_error(plain(broker.bootstrap), read).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_prefixed_deny_refuses_every_topic_it_names(broker):
    prefix = name("secret") + "-"
    secret, public = prefix + "a", name("public")
    create_topics(broker.bootstrap, secret, public)
    add_acls(broker.bootstrap,
             topic_acl(prefix, ANONYMOUS, AclOperation.WRITE, AclPermissionType.DENY,
                       ResourcePatternType.PREFIXED),
             topic_acl(prefix, ANONYMOUS, AclOperation.DESCRIBE, AclPermissionType.ALLOW,
                       ResourcePatternType.PREFIXED))
    assert produce_error(plain(broker.bootstrap), secret).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(plain(broker.bootstrap), public) is None


def acls_of(broker: BrokerProcess) -> int:
    """How many ACLs ``broker`` itself knows (DescribeAcls answers from its own image)."""
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest
    from protocol.build import make
    with connect(broker) as sock:
        response = call(sock, ApiKey.DESCRIBE_ACLS, 3, make(
            DescribeAclsRequest, resource_type_filter=1, resource_name_filter=None,
            pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
            permission_type=1))
    return sum(len(resource.acls) for resource in response.resources)


def add_cluster_acls(cluster: Cluster, *acls: AclBinding) -> None:
    """Add ``acls`` and wait until every broker has applied them (as in Kafka, a broker
    learns them from the metadata log, a moment after the controller)."""
    expected = acls_of(cluster.brokers[0]) + len(acls)
    add_acls(cluster.brokers[0].bootstrap, *acls)
    for broker in cluster.brokers:
        wait_until(lambda: acls_of(broker) >= expected, timeout=30)


def test_acls_reach_every_broker_of_a_cluster(cluster):
    """CreateAcls sent to one broker goes through the controller; the other broker refuses
    what the ACL denies."""
    first, second = (b.bootstrap for b in cluster.brokers)
    topic = name("clustered")
    create_topics(first, topic)
    assert produce_error(plain(second), topic) is None
    add_cluster_acls(cluster,
                     topic_acl(topic, ANONYMOUS, AclOperation.WRITE, AclPermissionType.DENY),
                     topic_acl(topic, ANONYMOUS, AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    assert produce_error(plain(second), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_forwarded_request_is_refused_only_where_the_acls_say(cluster):
    """CreateTopics through a broker that is not the controller: the topic the ACLs refuse
    is answered by that broker, the other one created by the controller."""
    refused_prefix = name("nope") + "-"
    # CREATE on the cluster would allow any topic: denied, and everything else on the
    # cluster (managing ACLs) allowed, since an ACL now names it.
    add_cluster_acls(
        cluster,
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                   ANONYMOUS, "*", AclOperation.CREATE, AclPermissionType.DENY),
        AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                   ANONYMOUS, "*", AclOperation.ALL, AclPermissionType.ALLOW),
        topic_acl(refused_prefix, ANONYMOUS, AclOperation.CREATE, AclPermissionType.DENY,
                  ResourcePatternType.PREFIXED))
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap})
    allowed, refused = name("fine"), refused_prefix + "x"
    futures = admin.create_topics([NewTopic(allowed, 1, 1), NewTopic(refused, 1, 1)])
    assert futures[allowed].result(30) is None
    with pytest.raises(KafkaException) as error:
        futures[refused].result(30)
    assert error.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(admin.list_topics(timeout=30).topics) >= {allowed}
    assert refused not in admin.list_topics(timeout=30).topics


def test_a_denied_group_and_kafka_python_producer_see_the_refusal(broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic, group = name("grp-topic"), name("denied-group")
    create_topics(broker.bootstrap, topic)
    assert produce_error(plain(broker.bootstrap), topic) is None
    add_acls(broker.bootstrap,
             AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, ANONYMOUS, "*",
                        AclOperation.READ, AclPermissionType.DENY),
             topic_acl(topic, ANONYMOUS, AclOperation.WRITE, AclPermissionType.DENY),
             topic_acl(topic, ANONYMOUS, AclOperation.READ, AclPermissionType.ALLOW))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        error = wait_until(lambda: (m := consumer.poll(1)) is not None and m.error(), timeout=30)
        assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"v").get(timeout=30)
    finally:
        producer.close()
