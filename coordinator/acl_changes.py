"""CreateAcls and DeleteAcls as the controller decides them (Kafka's AclControlManager):
which records to write, and each creation's or filter's outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from replication.acls import (
    AclBinding,
    AclBindingFilter,
    Authorizer,
    acl_record,
    binding_problem,
    filter_problem,
    remove_acl_record,
)


@dataclass(frozen=True, slots=True)
class AclError:
    """Why one creation or filter was refused (INVALID_REQUEST and Kafka's message)."""

    error_code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class AclDeletion:
    """The ACLs one DeleteAcls filter matched (and removes), or why it was refused."""

    removed: tuple[AclBinding, ...] = ()
    error: AclError | None = None


def creation_records(acls: Authorizer, bindings: Sequence[AclBinding]
                     ) -> tuple[list[dict], list[AclError | None]]:
    """The records that add ``bindings`` and each one's outcome: an invalid binding is
    refused on its own, one that exists already (or twice in the request) succeeds
    without a record."""
    records: list[dict] = []
    outcomes: list[AclError | None] = []
    added: set[AclBinding] = set()
    for binding in bindings:
        if problem := binding_problem(binding):
            outcomes.append(AclError(ErrorCode.invalid_request, problem))
            continue
        if binding not in acls and binding not in added:
            added.add(binding)
            records.append(acl_record(binding))
        outcomes.append(None)
    return records, outcomes


def deletion_records(acls: Authorizer, filters: Sequence[AclBindingFilter]
                     ) -> tuple[list[dict], list[AclDeletion]]:
    """The records that remove what ``filters`` match and each filter's outcome: an ACL
    two filters match is listed under both and removed once."""
    records: list[dict] = []
    outcomes: list[AclDeletion] = []
    removed: set[AclBinding] = set()
    for acl_filter in filters:
        if problem := filter_problem(acl_filter):
            outcomes.append(AclDeletion(error=AclError(ErrorCode.invalid_request, problem)))
            continue
        matched = tuple(acls.acls(acl_filter))
        for binding in matched:
            if binding not in removed:
                removed.add(binding)
                records.append(remove_acl_record(binding))
        outcomes.append(AclDeletion(matched))
    return records, outcomes
