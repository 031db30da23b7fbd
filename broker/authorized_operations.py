"""What a client may do with a resource, as Metadata, DescribeCluster and DescribeGroups
answer it when asked (``include_*_authorized_operations``, KIP-430): a bitfield with bit
``1 << code`` set for each of Kafka's AclOperation codes the client is allowed.

The operations are those Kafka's authorizer checks for each resource type
(``AclEntry.supportedOperations``). kipper has no ACLs yet (issue #18), so every one of them
is allowed; this module is where an authorizer's check will go, its callers unchanged.
"""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (org.apache.kafka.common.acl.AclOperation)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


# Kafka's "authorized operations not requested" marker (Integer.MIN_VALUE).
OMITTED = -(2**31)

TOPIC_OPERATIONS = frozenset({
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS})
CLUSTER_OPERATIONS = frozenset({
    AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE})
GROUP_OPERATIONS = frozenset({AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE})


def _bitfield(operations: frozenset[AclOperation]) -> int:
    return sum(1 << operation for operation in operations)


def topic_operations(requested: bool, topic: str) -> int:
    """The operations on ``topic`` (every one, with no ACLs), or OMITTED if not requested."""
    return _bitfield(TOPIC_OPERATIONS) if requested else OMITTED


def cluster_operations(requested: bool) -> int:
    """The operations on the cluster, or OMITTED if not requested."""
    return _bitfield(CLUSTER_OPERATIONS) if requested else OMITTED


def group_operations(requested: bool, group_id: str) -> int:
    """The operations on group ``group_id``, or OMITTED if not requested."""
    return _bitfield(GROUP_OPERATIONS) if requested else OMITTED
