"""Access control lists as Kafka's StandardAuthorizer keeps and applies them (issue #18).

The ACLs are cluster metadata: the controller validates CreateAcls/DeleteAcls, writes one
record per ACL added or removed to the metadata log, and every node replays them into an
``Authorizer`` (``replication.cluster_metadata`` holds it next to the topics). That is why
this module lives in the replication layer and imports nothing above it.

The semantics are those of Kafka's KRaft authorizer
(``org.apache.kafka.metadata.authorizer.StandardAuthorizerData``), so that ACLs written for
Apache Kafka mean the same here:

- ``super.users`` may do anything, whatever the ACLs say;
- an ACL applies to a resource when its pattern is the resource's name (LITERAL), the
  wildcard name ``*`` (LITERAL) or a prefix of the name (PREFIXED), its principal is the
  client's or ``User:*``, and its host is the client's address or ``*``;
- any applicable DENY wins over every ALLOW;
- ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, ALLOW of ALTER_CONFIGS also
  allows DESCRIBE_CONFIGS, and ALL (ALLOW or DENY) covers every operation; a DENY covers
  only its own operation (or ALL): a DENY of DESCRIBE does not deny READ, and a DENY of
  READ does not deny DESCRIBE;
- when no ACL at all names the resource (any principal, host or operation), the answer is
  ``allow.everyone.if.no.acl.found`` (default: deny); once one does, what it does not allow
  is denied.

The enums carry Kafka's wire codes (``org.apache.kafka.common.acl.AclOperation``,
``AclPermissionType``, ``org.apache.kafka.common.resource.ResourceType``, ``PatternType``),
which the CreateAcls/DescribeAcls/DeleteAcls schemas and the KIP-430 "authorized operations"
bitfields use.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

# The only name a CLUSTER resource has (Kafka's Resource.CLUSTER_NAME).
CLUSTER_RESOURCE_NAME = "kafka-cluster"
# A LITERAL pattern with this name, or an ACL with this host, matches any name or host.
WILDCARD = "*"
# An ACL with this principal applies to every client.
WILDCARD_PRINCIPAL = "User:*"

ACL_RECORD = "acl"
REMOVE_ACL_RECORD = "remove_acl"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, the name matched exactly
    MATCH = 2  # filters only: every pattern that would apply to the name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# The operations an ALLOW ACL for the key grants besides itself (StandardAuthorizerData's
# IMPLIES_DESCRIBE and IMPLIES_DESCRIBE_CONFIGS, read the other way round).
_IMPLIED_BY_ALLOW: dict[AclOperation, AclOperation] = {
    AclOperation.READ: AclOperation.DESCRIBE,
    AclOperation.WRITE: AclOperation.DESCRIBE,
    AclOperation.DELETE: AclOperation.DESCRIBE,
    AclOperation.ALTER: AclOperation.DESCRIBE,
    AclOperation.ALTER_CONFIGS: AclOperation.DESCRIBE_CONFIGS,
}

# What each resource type can be asked for (Kafka's AclEntry.supportedOperations): the
# operations an "authorized operations" answer (KIP-430) reports on.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """What an ACL is about: a resource type and a name, taken literally or as a prefix."""

    type: ResourceType
    name: str
    pattern_type: PatternType


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``Type:name`` principal, from which host) may or may not do which operation."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """The resource half of a DescribeAcls/DeleteAcls filter (Kafka's ResourcePatternFilter):
    ANY and a ``None`` name match everything; pattern type MATCH selects the patterns that
    would apply to ``name`` (the literal name, the wildcard, the prefixes of it)."""

    type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.type != ResourceType.ANY and self.type != pattern.type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH,
                                     pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD)
        return pattern.pattern_type == PatternType.PREFIXED and self.name.startswith(pattern.name)


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """The entry half of a filter (Kafka's AccessControlEntryFilter): ``None`` and ANY
    match everything, anything else must be equal (``User:*`` only matches ``User:*``)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission in (AclPermissionType.ANY, entry.permission))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs a DescribeAcls lists or a DeleteAcls removes; the default matches all."""

    pattern: ResourcePatternFilter = field(default_factory=ResourcePatternFilter)
    entry: AccessControlEntryFilter = field(default_factory=AccessControlEntryFilter)

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


def binding_problem(binding: AclBinding) -> str | None:
    """Why CreateAcls must refuse ``binding`` with INVALID_REQUEST, in one line, or None.

    Kafka's checks (AclApis.handleCreateAcls, AclControlManager.validateNewAcl): a binding
    names one concrete resource pattern and one concrete entry, so the filter-only values
    ANY and MATCH (and UNKNOWN, a code this version does not know) are refused; the cluster
    has a single name; a principal is ``Type:name`` (``User:*`` being every user)."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {pattern.type.name}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern.pattern_type.name}"
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {entry.operation.name}"
    if entry.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {entry.permission.name}"
    if not pattern.name:
        return "Invalid empty resource name"
    if pattern.type == ResourceType.CLUSTER and pattern.name != CLUSTER_RESOURCE_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
    return principal_problem(entry.principal)


def filter_problem(acl_filter: AclBindingFilter) -> str | None:
    """Why DescribeAcls/DeleteAcls must refuse ``acl_filter`` with INVALID_REQUEST, or None:
    a field with a code this version does not know (AclControlManager.validateFilter)."""
    if (acl_filter.pattern.type == ResourceType.UNKNOWN
            or acl_filter.pattern.pattern_type == PatternType.UNKNOWN):
        return "Unknown patternFilter."
    if (acl_filter.entry.operation == AclOperation.UNKNOWN
            or acl_filter.entry.permission == AclPermissionType.UNKNOWN):
        return "Unknown entryFilter."
    return None


def principal_problem(principal: str) -> str | None:
    """Why ``principal`` is not a ``Type:name`` principal (SecurityUtils.parseKafkaPrincipal
    splits at the first colon and needs one), or None."""
    if ":" not in principal:
        return ("expected a string in format principalType:principalName but got "
                f"{principal!r}")
    return None


def super_users_from_config(value: str) -> frozenset[str]:
    """The principals of a ``super.users`` setting: ``;``-separated, blanks ignored, as
    Kafka's StandardAuthorizer reads it. A malformed principal is a configuration error."""
    users = frozenset(part.strip() for part in value.split(";") if part.strip())
    for user in users:
        if problem := principal_problem(user):
            raise ValueError(f"super.users: {problem}")
    return users


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """KIP-430's encoding of a set of operations: bit ``1 << code`` per operation
    (Kafka's Utils.to32BitField)."""
    bits = 0
    for operation in operations:
        bits |= 1 << operation
    return bits


def acl_record(binding: AclBinding) -> dict:
    """The metadata-log record that adds ``binding`` (Kafka's AccessControlEntryRecord),
    JSON-safe: enums as their wire codes."""
    return _record(ACL_RECORD, binding)


def remove_acl_record(binding: AclBinding) -> dict:
    """The metadata-log record that removes ``binding``. kipper identifies an ACL by its
    content rather than by an id as Kafka does: the controller never stores two equal
    ACLs, so the content is as unique, and a replayed log needs no id map."""
    return _record(REMOVE_ACL_RECORD, binding)


def _record(kind: str, binding: AclBinding) -> dict:
    pattern, entry = binding.pattern, binding.entry
    return {"type": kind, "resource_type": int(pattern.type), "resource_name": pattern.name,
            "pattern_type": int(pattern.pattern_type), "principal": entry.principal,
            "host": entry.host, "operation": int(entry.operation),
            "permission": int(entry.permission)}


def binding_from_record(record: dict) -> AclBinding:
    """The binding an ``acl_record``/``remove_acl_record`` carries."""
    return AclBinding(
        ResourcePattern(ResourceType(record["resource_type"]), record["resource_name"],
                        PatternType(record["pattern_type"])),
        AccessControlEntry(record["principal"], record["host"],
                           AclOperation(record["operation"]),
                           AclPermissionType(record["permission"])))


def _grants(entry: AccessControlEntry, operation: AclOperation) -> bool:
    """Whether ``entry``'s verdict is about ``operation`` (principal and host aside): ALL
    covers everything, an ALLOW also covers what it implies, a DENY only its own operation
    (StandardAuthorizerData.findResult)."""
    if entry.operation in (AclOperation.ALL, operation):
        return True
    return (entry.permission == AclPermissionType.ALLOW
            and _IMPLIED_BY_ALLOW.get(entry.operation) == operation)


@dataclass(slots=True)
class _TypeIndex:
    """The ACLs of one resource type, laid out so that those applying to a name are found
    without scanning the rest: literal names (the wildcard among them) by dict lookup, and
    prefixes by looking up the name's prefix of each length some PREFIXED ACL has."""

    literal: dict[str, set[AccessControlEntry]] = field(default_factory=dict)
    prefixed: dict[str, set[AccessControlEntry]] = field(default_factory=dict)
    prefix_lengths: Counter[int] = field(default_factory=Counter)

    def add(self, pattern: ResourcePattern, entry: AccessControlEntry) -> None:
        if pattern.pattern_type == PatternType.PREFIXED:
            entries = self.prefixed.setdefault(pattern.name, set())
            if not entries:
                self.prefix_lengths[len(pattern.name)] += 1
        else:
            entries = self.literal.setdefault(pattern.name, set())
        entries.add(entry)

    def remove(self, pattern: ResourcePattern, entry: AccessControlEntry) -> None:
        by_name = self.prefixed if pattern.pattern_type == PatternType.PREFIXED else self.literal
        entries = by_name[pattern.name]
        entries.discard(entry)
        if entries:
            return
        del by_name[pattern.name]
        if pattern.pattern_type == PatternType.PREFIXED:
            length = len(pattern.name)
            self.prefix_lengths[length] -= 1
            if not self.prefix_lengths[length]:
                del self.prefix_lengths[length]

    def applicable(self, name: str) -> Iterator[AccessControlEntry]:
        """Every entry whose pattern applies to resource ``name``."""
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        for length in self.prefix_lengths:
            if length <= len(name):
                yield from self.prefixed.get(name[:length], ())


class Authorizer:
    """The ACLs of the cluster and the decisions they make (StandardAuthorizer).

    Not thread-safe: like the rest of the metadata image it is changed and read on the
    broker's event loop."""

    def __init__(self, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        # Insertion order, so DescribeAcls lists ACLs in the order they were created.
        self._bindings: dict[AclBinding, None] = {}
        self._by_type: dict[ResourceType, _TypeIndex] = {}
        # For authorize_any, which looks across a type's names: only the client's own ACLs
        # and those for every user can concern it.
        self._by_principal: dict[str, set[AclBinding]] = {}

    def __len__(self) -> int:
        return len(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._bindings

    def add(self, binding: AclBinding) -> bool:
        """Add ``binding``; False if it was there already. An invalid binding (a filter
        value such as ANY, see ``binding_problem``) is a caller's bug: ValueError."""
        if problem := binding_problem(binding):
            raise ValueError(f"not a valid ACL ({problem}): {binding}")
        if binding in self._bindings:
            return False
        self._bindings[binding] = None
        self._by_type.setdefault(binding.pattern.type, _TypeIndex()).add(binding.pattern,
                                                                          binding.entry)
        self._by_principal.setdefault(binding.entry.principal, set()).add(binding)
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove ``binding``; False if it was not there."""
        if binding not in self._bindings:
            return False
        del self._bindings[binding]
        self._by_type[binding.pattern.type].remove(binding.pattern, binding.entry)
        principal_bindings = self._by_principal[binding.entry.principal]
        principal_bindings.discard(binding)
        if not principal_bindings:
            del self._by_principal[binding.entry.principal]
        return True

    def acls(self, acl_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches (DescribeAcls)."""
        return [binding for binding in self._bindings if acl_filter.matches(binding)]

    def remove_matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove the ACLs ``acl_filter`` matches and return them (DeleteAcls)."""
        removed = self.acls(acl_filter)
        for binding in removed:
            self.remove(binding)
        return removed

    def apply(self, record: dict) -> None:
        """Replay an ``acl_record`` or ``remove_acl_record``. Replaying one twice changes
        nothing, so a snapshot loaded over a partly applied log gives the same ACLs."""
        if record["type"] == ACL_RECORD:
            self.add(binding_from_record(record))
        elif record["type"] == REMOVE_ACL_RECORD:
            self.remove(binding_from_record(record))
        else:
            raise ValueError(f"not an ACL record: {record['type']!r}")

    def snapshot_records(self) -> list[dict]:
        """Records that rebuild these ACLs in an empty authorizer."""
        return [acl_record(binding) for binding in self._bindings]

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, resource_name: str) -> bool:
        """May ``principal`` connected from ``host`` do ``operation`` on the resource?"""
        if principal in self.super_users:
            return True
        index = self._by_type.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        resource_has_acls = allowed = False
        for entry in index.applicable(resource_name):
            resource_has_acls = True
            if (entry.principal in (principal, WILDCARD_PRINCIPAL)
                    and entry.host in (host, WILDCARD) and _grants(entry, operation)):
                if entry.permission == AclPermissionType.DENY:
                    return False
                allowed = True
        return allowed or (not resource_has_acls and self.allow_everyone_if_no_acl_found)

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of the type, not
        every one of which is denied? Kafka's Authorizer.authorizeByResourceType, which
        InitProducerId uses to let a client that may WRITE some topic be an idempotent
        producer without IDEMPOTENT_WRITE on the cluster.

        As in Kafka: the answer for a resource named ``hardcode`` first (it lets super
        users and, where nothing names it, ``allow.everyone.if.no.acl.found`` through);
        then the principal's and host's ACLs of the type for exactly ``operation`` or ALL
        (no implied operations): a wildcard DENY denies, a wildcard ALLOW allows, and
        otherwise some allowed name must escape every DENY — a literal one the same
        literal name and every denied prefix of it, a prefixed one every denied prefix.
        It reads only the ACLs of ``principal`` and ``User:*``."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        # pattern type -> permission -> names, of the ACLs that concern this request.
        names: dict[PatternType, dict[AclPermissionType, set[str]]] = {
            pattern_type: {AclPermissionType.ALLOW: set(), AclPermissionType.DENY: set()}
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)}
        for acl_principal in {principal, WILDCARD_PRINCIPAL}:
            for binding in self._by_principal.get(acl_principal, ()):
                pattern, entry = binding.pattern, binding.entry
                if (pattern.type == resource_type and entry.host in (host, WILDCARD)
                        and entry.operation in (operation, AclOperation.ALL)):
                    names[pattern.pattern_type][entry.permission].add(pattern.name)
        literal, prefixed = names[PatternType.LITERAL], names[PatternType.PREFIXED]
        if WILDCARD in literal[AclPermissionType.DENY]:
            return False
        if WILDCARD in literal[AclPermissionType.ALLOW]:
            return True
        denied_prefixes = prefixed[AclPermissionType.DENY]

        def escapes_denied_prefixes(name: str) -> bool:
            return not any(name[:length] in denied_prefixes for length in range(1, len(name) + 1))

        return (any(name not in literal[AclPermissionType.DENY] and escapes_denied_prefixes(name)
                    for name in literal[AclPermissionType.ALLOW])
                or any(escapes_denied_prefixes(name) for name in prefixed[AclPermissionType.ALLOW]))

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              resource_name: str) -> set[AclOperation]:
        """Which of the operations the resource type supports ``principal`` may do on the
        resource: the "authorized operations" of Metadata, DescribeCluster and
        DescribeGroups (KIP-430; ``operations_bitfield`` encodes them)."""
        return {operation for operation in SUPPORTED_OPERATIONS[resource_type]
                if self.authorize(principal, host, operation, resource_type, resource_name)}
