"""What each Kafka API asks the authorizer before it acts, as data (issue #18).

This is Apache Kafka's behaviour, read from ``KafkaApis``, ``AuthHelper``, ``AclApis``,
``ConfigHelper`` and — for the requests a KRaft broker forwards to the controller
(CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, reassignments, configs, ACLs,
SCRAM credentials) — ``ControllerApis``, whose checks are then the ones that decide. A
handler consults its entry so that a client sees the errors Kafka would give: which
resource (topic, group, transactional id, the cluster) is checked for which operation,
what a denial answers, and whether it fails the request, one resource, or quietly leaves
the resource out of the answer.

The table keys are API keys: ``protocol.apis.ApiKey`` for the Kafka APIs kipper serves,
``protocol.internal.InternalApiKey`` for its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.internal import InternalApiKey
from replication.acls import CLUSTER_RESOURCE_NAME, AclOperation, ResourceType

Op = AclOperation


class Scope(enum.Enum):
    """What a denial does to the request."""

    # The request is refused as a whole: its top-level error code, or that error on every
    # entry of a response that has none (Kafka's getErrorResponse).
    REQUEST = "request"
    # That resource's entries (a topic's partitions, a group, a config resource) carry the
    # error; the rest of the request is served.
    RESOURCE = "resource"
    # The resource is left out of the answer without an error (listings, "all topics").
    HIDDEN = "hidden"


@dataclass(frozen=True, slots=True)
class Check:
    """One authorize() call: ``operation`` on a resource of ``resource_type`` whose name is
    in request field ``name_from`` (``kafka-cluster`` for the cluster). ``any_resource``:
    some resource of the type will do (Authorizer.authorize_any, Kafka's
    authorizeByResourceType), no name is involved."""

    operation: AclOperation
    resource_type: ResourceType
    name_from: str = CLUSTER_RESOURCE_NAME
    any_resource: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    """A requirement: met when one of ``any_of`` is allowed (tried in order, as Kafka does
    when a cluster-wide permission stands in for per-resource ones). ``applies_when``
    says when the rule is checked at all; empty means always."""

    any_of: tuple[Check, ...]
    scope: Scope
    error: ErrorCode | None  # None exactly when the scope is HIDDEN
    applies_when: str = ""


@dataclass(frozen=True, slots=True)
class ApiAuthorization:
    """The rules of one API, in the order Kafka applies them; none: no ACL is consulted."""

    rules: tuple[Rule, ...]
    note: str = ""


TOPIC_DENIED = ErrorCode.topic_authorization_failed  # 29
GROUP_DENIED = ErrorCode.group_authorization_failed  # 30
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed  # 31
TRANSACTIONAL_ID_DENIED = ErrorCode.transactional_id_authorization_failed  # 53
DELEGATION_TOKEN_DENIED = ErrorCode.delegation_token_authorization_failed  # 65

# The error Kafka answers when an operation on a resource of the type is denied
# (AclEntry.authorizationError).
DENIAL_ERRORS: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: TOPIC_DENIED,
    ResourceType.GROUP: GROUP_DENIED,
    ResourceType.CLUSTER: CLUSTER_DENIED,
    ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID_DENIED,
    ResourceType.DELEGATION_TOKEN: DELEGATION_TOKEN_DENIED,
}


def _cluster(operation: AclOperation) -> Check:
    return Check(operation, ResourceType.CLUSTER)


def _topic(operation: AclOperation, name_from: str) -> Check:
    return Check(operation, ResourceType.TOPIC, name_from)


def _group(operation: AclOperation, name_from: str) -> Check:
    return Check(operation, ResourceType.GROUP, name_from)


def _transactional_id(operation: AclOperation, name_from: str) -> Check:
    return Check(operation, ResourceType.TRANSACTIONAL_ID, name_from)


def _rule(*any_of: Check, scope: Scope, applies_when: str = "",
          error: ErrorCode | None = None) -> Rule:
    """A rule whose denial answers ``error``: given where the checks are on different
    resource types (Kafka's choice is then per API), else Kafka's error for their type."""
    if scope is Scope.HIDDEN:
        return Rule(any_of, scope, None, applies_when)
    if error is None:
        (resource_type,) = {check.resource_type for check in any_of}
        error = DENIAL_ERRORS[resource_type]
    return Rule(any_of, scope, error, applies_when)


def _cluster_only(operation: AclOperation, note: str = "") -> ApiAuthorization:
    """An API that needs ``operation`` on the cluster, or fails as a whole."""
    return ApiAuthorization((_rule(_cluster(operation), scope=Scope.REQUEST),), note)


def _configs(operation: AclOperation, note: str) -> ApiAuthorization:
    """DescribeConfigs/AlterConfigs/IncrementalAlterConfigs: per config resource, the
    operation on the topic, the group, or (broker-wide resources) the cluster."""
    name = "resources[].resource_name"
    return ApiAuthorization((
        _rule(_topic(operation, name), scope=Scope.RESOURCE,
              applies_when="resource_type TOPIC (2)"),
        _rule(_cluster(operation), scope=Scope.RESOURCE,
              applies_when="resource_type BROKER (4), BROKER_LOGGER (8) or CLIENT_METRICS (16)"),
        _rule(_group(operation, name), scope=Scope.RESOURCE,
              applies_when="resource_type GROUP (32)"),
    ), note)


def _group_member(note: str = "") -> ApiAuthorization:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group, or nothing."""
    return ApiAuthorization((_rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),), note)


_BROKER_ONLY = ("kipper serves it only on connections proven to be brokers of this cluster "
                "(broker/inter_broker.py); that proof stands for Kafka's CLUSTER_ACTION")

API_AUTHORIZATION: dict[int, ApiAuthorization] = {
    ApiKey.PRODUCE: ApiAuthorization((
        _rule(_transactional_id(Op.WRITE, "transactional_id"), scope=Scope.REQUEST,
              applies_when="the request carries transactional batches (a null "
                           "transactional_id is denied too)"),
        _rule(_topic(Op.WRITE, "topic_data[].name"), scope=Scope.RESOURCE),
    ), note="An idempotent producer needs nothing more here: its IDEMPOTENT_WRITE (or WRITE "
            "on some topic) was checked by InitProducerId; Kafka before 3.0 (KIP-679) also "
            "checked IDEMPOTENT_WRITE on the cluster for idempotent batches."),
    ApiKey.FETCH: ApiAuthorization((
        _rule(_cluster(Op.CLUSTER_ACTION), scope=Scope.REQUEST, error=TOPIC_DENIED,
              applies_when="from a follower (replica_id >= 0): every partition answers "
                           "TOPIC_AUTHORIZATION_FAILED"),
        _rule(_topic(Op.READ, "topics[].topic"), scope=Scope.RESOURCE,
              applies_when="from a consumer (replica_id < 0)"),
    ), note="A follower's Fetch is broker-only in kipper: " + _BROKER_ONLY),
    ApiKey.LIST_OFFSETS: ApiAuthorization((
        _rule(_topic(Op.DESCRIBE, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.METADATA: ApiAuthorization((
        _rule(_topic(Op.DESCRIBE, "topics[].name"), scope=Scope.RESOURCE,
              applies_when="topics listed (by id: the entry keeps the id, name null)"),
        _rule(_topic(Op.DESCRIBE, "every topic"), scope=Scope.HIDDEN,
              applies_when="all topics asked for (topics null)"),
        _rule(_cluster(Op.CREATE), _topic(Op.CREATE, "topics[].name"), scope=Scope.RESOURCE,
              error=TOPIC_DENIED,
              applies_when="a listed, describable topic does not exist and would be "
                           "auto-created (allow_auto_topic_creation and "
                           "auto.create.topics.enable)"),
    ), note="include_topic_authorized_operations: each topic's authorized operations; "
            "include_cluster_authorized_operations (v8-10): the cluster's if DESCRIBE on "
            "the cluster is allowed, else 0."),
    ApiKey.OFFSET_COMMIT: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.OFFSET_FETCH: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "group_id"), scope=Scope.REQUEST, applies_when="v0-7"),
        _rule(_group(Op.DESCRIBE, "groups[].group_id"), scope=Scope.RESOURCE,
              applies_when="v8+ (several groups)"),
        _rule(_topic(Op.DESCRIBE, "topics[].name / groups[].topics[].name"),
              scope=Scope.RESOURCE, applies_when="topics listed"),
        _rule(_topic(Op.DESCRIBE, "the group's topics"), scope=Scope.HIDDEN,
              applies_when="all the group's offsets asked for (topics null)"),
    ), note="DESCRIBE, not READ: fetching offsets reads no records."),
    ApiKey.FIND_COORDINATOR: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "key / coordinator_keys[]"), scope=Scope.RESOURCE,
              applies_when="key_type GROUP (0)"),
        _rule(_transactional_id(Op.DESCRIBE, "key / coordinator_keys[]"),
              scope=Scope.RESOURCE, applies_when="key_type TRANSACTION (1)"),
    ), note="Before v4 there is one key and its error is the response's."),
    ApiKey.JOIN_GROUP: _group_member(),
    ApiKey.HEARTBEAT: _group_member(),
    ApiKey.LEAVE_GROUP: _group_member(),
    ApiKey.SYNC_GROUP: _group_member(),
    ApiKey.DESCRIBE_GROUPS: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "groups[]"), scope=Scope.RESOURCE),
    ), note="include_authorized_operations: each group's authorized operations."),
    ApiKey.LIST_GROUPS: ApiAuthorization((
        _rule(_cluster(Op.DESCRIBE), _group(Op.DESCRIBE, "every group"), scope=Scope.HIDDEN),
    ), note="DESCRIBE on the cluster lists every group; otherwise only the groups the "
            "client may DESCRIBE."),
    ApiKey.API_VERSIONS: ApiAuthorization(()),
    ApiKey.CREATE_TOPICS: ApiAuthorization((
        _rule(_cluster(Op.CREATE), _topic(Op.CREATE, "topics[].name"), scope=Scope.RESOURCE,
              error=TOPIC_DENIED),
        _rule(_topic(Op.DESCRIBE_CONFIGS, "topics[].name"), scope=Scope.RESOURCE,
              applies_when="v5+ returns the new topic's configs: without DESCRIBE_CONFIGS "
                           "they are left out and topic_config_error_code is "
                           "TOPIC_AUTHORIZATION_FAILED; the topic is still created"),
    )),
    ApiKey.DELETE_TOPICS: ApiAuthorization((
        _rule(_cluster(Op.DELETE), _topic(Op.DESCRIBE, "topics[].name / topic_names[]"),
              scope=Scope.RESOURCE, error=TOPIC_DENIED,
              applies_when="before existence is revealed (a topic given by id the client "
                           "may not describe is answered with a null name)"),
        _rule(_cluster(Op.DELETE), _topic(Op.DELETE, "topics[].name / topic_names[]"),
              scope=Scope.RESOURCE, error=TOPIC_DENIED),
    ), note="The controller checks DELETE on the cluster first, an operation Kafka does "
            "not list for the cluster (AclEntry.supportedOperations) but grants through an "
            "ACL for ALL or DELETE on kafka-cluster."),
    ApiKey.DELETE_RECORDS: ApiAuthorization((
        _rule(_topic(Op.DELETE, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.INIT_PRODUCER_ID: ApiAuthorization((
        _rule(_transactional_id(Op.WRITE, "transactional_id"), scope=Scope.REQUEST,
              applies_when="transactional_id set"),
        _rule(_cluster(Op.IDEMPOTENT_WRITE),
              Check(Op.WRITE, ResourceType.TOPIC, "any topic", any_resource=True),
              scope=Scope.REQUEST, error=CLUSTER_DENIED,
              applies_when="transactional_id null (idempotent producer)"),
    ), note="Kafka 3.0+ (KIP-679): WRITE on any topic is enough to be an idempotent "
            "producer."),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ApiAuthorization((
        _rule(_cluster(Op.CLUSTER_ACTION), _topic(Op.DESCRIBE, "topics[].topic"),
              scope=Scope.RESOURCE, error=TOPIC_DENIED),
    ), note="Followers have CLUSTER_ACTION on the cluster; consumers checking for "
            "truncation (KIP-320) need DESCRIBE on the topic."),
    ApiKey.ADD_PARTITIONS_TO_TXN: ApiAuthorization((
        _rule(_cluster(Op.CLUSTER_ACTION), scope=Scope.REQUEST,
              applies_when="v4+ (from partition leaders)"),
        _rule(_transactional_id(Op.WRITE, "v3_and_below_transactional_id"),
              scope=Scope.REQUEST, applies_when="v0-3 (from clients)"),
        _rule(_topic(Op.WRITE, "v3_and_below_topics[].name"), scope=Scope.RESOURCE,
              applies_when="v0-3: the other partitions answer OPERATION_NOT_ATTEMPTED; "
                           "internal topics are always denied"),
    ), note="kipper answers v4+ only on broker connections (broker/handlers/transactions.py)."),
    ApiKey.ADD_OFFSETS_TO_TXN: ApiAuthorization((
        _rule(_transactional_id(Op.WRITE, "transactional_id"), scope=Scope.REQUEST),
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
    )),
    ApiKey.END_TXN: ApiAuthorization((
        _rule(_transactional_id(Op.WRITE, "transactional_id"), scope=Scope.REQUEST),
    )),
    ApiKey.WRITE_TXN_MARKERS: ApiAuthorization((
        _rule(_cluster(Op.ALTER), _cluster(Op.CLUSTER_ACTION), scope=Scope.REQUEST),
    ), note="kipper answers it only on broker connections (broker/handlers/txn_markers.py)."),
    ApiKey.TXN_OFFSET_COMMIT: ApiAuthorization((
        _rule(_transactional_id(Op.WRITE, "transactional_id"), scope=Scope.REQUEST),
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.DESCRIBE_CONFIGS: _configs(
        Op.DESCRIBE_CONFIGS, note="ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS."),
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, note="Checked by the controller."),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(
        Op.ALTER_CONFIGS, note="Checked by the controller; a BROKER_LOGGER resource is "
                               "applied by the broker itself, with the same check."),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster_only(Op.DESCRIBE),
    ApiKey.CREATE_PARTITIONS: ApiAuthorization((
        _rule(_topic(Op.ALTER, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.DELETE_GROUPS: ApiAuthorization((
        _rule(_group(Op.DELETE, "groups_names[]"), scope=Scope.RESOURCE),
    )),
    ApiKey.ELECT_LEADERS: _cluster_only(Op.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster_only(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster_only(Op.DESCRIBE),
    ApiKey.OFFSET_DELETE: ApiAuthorization((
        _rule(_group(Op.DELETE, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.ALTER_PARTITION: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.FETCH_SNAPSHOT: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    # The controller quorum's (KIP-595): voters only, like Kafka's controller listener.
    ApiKey.VOTE: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.BEGIN_QUORUM_EPOCH: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.END_QUORUM_EPOCH: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.DESCRIBE_QUORUM: _cluster_only(Op.DESCRIBE),
    ApiKey.DESCRIBE_CLUSTER: ApiAuthorization((), note=(
        "Open to every client on a broker; include_cluster_authorized_operations: the "
        "cluster's authorized operations if DESCRIBE on the cluster is allowed, else 0. "
        "(Sent to a KRaft controller's own listener it needs ALTER on the cluster.)")),
    ApiKey.DESCRIBE_PRODUCERS: ApiAuthorization((
        _rule(_topic(Op.READ, "topics[].name"), scope=Scope.RESOURCE),
    )),
    ApiKey.BROKER_REGISTRATION: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.BROKER_HEARTBEAT: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.ALLOCATE_PRODUCER_IDS: _cluster_only(Op.CLUSTER_ACTION, _BROKER_ONLY),
    ApiKey.DESCRIBE_TRANSACTIONS: ApiAuthorization((
        _rule(_transactional_id(Op.DESCRIBE, "transactional_ids[]"), scope=Scope.RESOURCE),
        _rule(_topic(Op.DESCRIBE, "each transaction's topics"), scope=Scope.HIDDEN),
    )),
    ApiKey.LIST_TRANSACTIONS: ApiAuthorization((
        _rule(_transactional_id(Op.DESCRIBE, "every transaction"), scope=Scope.HIDDEN),
    )),
    ApiKey.SASL_HANDSHAKE: ApiAuthorization(()),
    ApiKey.SASL_AUTHENTICATE: ApiAuthorization(()),
    ApiKey.DESCRIBE_ACLS: _cluster_only(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: _cluster_only(Op.ALTER),
    ApiKey.DELETE_ACLS: _cluster_only(Op.ALTER),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster_only(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster_only(Op.ALTER),
    InternalApiKey.DISKLESS_COORDINATOR_APPEND: ApiAuthorization((), note=_BROKER_ONLY),
    # KIP-848 consumer groups (KafkaApis.handleConsumerGroupHeartbeatRequest / ...Describe).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
    ), note="Kafka also refuses a subscription naming a topic the client may not DESCRIBE "
            "(TOPIC_AUTHORIZATION_FAILED); kipper does not check that yet."),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "group_ids[]"), scope=Scope.RESOURCE),
    ), note="include_authorized_operations: each group's authorized operations."),
    # Share groups (KIP-932), Kafka's checks (KafkaApis.handleShareFetchRequest, ...).
    ApiKey.SHARE_GROUP_HEARTBEAT: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
    )),
    ApiKey.SHARE_GROUP_DESCRIBE: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "group_ids[]"), scope=Scope.RESOURCE),
    ), note="include_authorized_operations: each group's authorized operations."),
    ApiKey.SHARE_FETCH: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].topic_id"), scope=Scope.RESOURCE),
    )),
    ApiKey.SHARE_ACKNOWLEDGE: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].topic_id"), scope=Scope.RESOURCE),
    )),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ApiAuthorization((
        _rule(_group(Op.DESCRIBE, "groups[].group_id"), scope=Scope.RESOURCE),
        _rule(_topic(Op.DESCRIBE, "groups[].topics[].topic_name"), scope=Scope.RESOURCE),
    )),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: ApiAuthorization((
        _rule(_group(Op.READ, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].topic_name"), scope=Scope.RESOURCE),
    )),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: ApiAuthorization((
        _rule(_group(Op.DELETE, "group_id"), scope=Scope.REQUEST),
        _rule(_topic(Op.READ, "topics[].topic_name"), scope=Scope.RESOURCE),
    )),
    InternalApiKey.SHARE_PARTITION_CALL: ApiAuthorization((), note=_BROKER_ONLY),
    InternalApiKey.STORAGE_SPAN: ApiAuthorization((), note=_BROKER_ONLY),
    InternalApiKey.SHARED_STREAM_COMMIT: ApiAuthorization((), note=_BROKER_ONLY),
    InternalApiKey.BROKER_CHALLENGE: ApiAuthorization((), note="The membership proof itself."),
    InternalApiKey.BROKER_PROOF: ApiAuthorization((), note="The membership proof itself."),
}


def authorization_for(api_key: int) -> ApiAuthorization:
    """The checks of ``api_key``. An API missing from the table raises KeyError rather than
    passing unchecked: serving a new API means deciding its checks."""
    return API_AUTHORIZATION[api_key]
