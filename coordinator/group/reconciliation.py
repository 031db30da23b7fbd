"""Moving a member from its current assignment towards its target (Kafka's
CurrentAssignmentBuilder): revoke first, then assign.

Each heartbeat, for a member in state:

- STABLE at an older epoch than the target's: compute its next step (below).
- UNREVOKED_PARTITIONS: it still owns partitions it must give up; once the partitions it
  reports owning no longer include them, compute its next step.
- UNRELEASED_PARTITIONS: it waits for partitions others still hold; recompute, some may be
  free now.

The next step: keep what is both current and target. If anything current is not in the
target, the member is told to revoke it first and keeps its epoch (UNREVOKED_PARTITIONS).
Otherwise it moves to the target epoch and gets every target partition no other member holds;
if some are still held, it is UNRELEASED_PARTITIONS, else STABLE. A partition therefore never
has two owners: it goes to its new member only after the old one has acknowledged it is gone.
"""

from __future__ import annotations

from collections.abc import Callable

from .assignors import Assignment, TopicPartition, as_assignment
from .consumer_group import MemberAssignment, MemberState, partitions_of


def reconcile(current: MemberAssignment, target_epoch: int, target: Assignment,
              owned: set[TopicPartition] | None,
              is_free: Callable[[TopicPartition], bool]) -> MemberAssignment:
    """The member's next assignment; ``owned`` is what its heartbeat says it owns (None: a
    heartbeat that did not say)."""
    if current.state == MemberState.UNREVOKED_PARTITIONS:
        pending = partitions_of(current.pending_revocation)
        if owned is None or owned & pending:
            return current
    elif current.state == MemberState.STABLE and current.member_epoch == target_epoch:
        return current
    return _next_step(current, target_epoch, target, is_free)


def _next_step(current: MemberAssignment, target_epoch: int, target: Assignment,
               is_free: Callable[[TopicPartition], bool]) -> MemberAssignment:
    assigned_now = partitions_of(current.assigned)
    wanted = partitions_of(target)
    kept = assigned_now & wanted
    revoked = assigned_now - wanted
    if revoked:
        return MemberAssignment(current.member_epoch, current.previous_member_epoch,
                                MemberState.UNREVOKED_PARTITIONS, as_assignment(kept),
                                as_assignment(revoked))
    newly = {tp for tp in wanted - assigned_now if is_free(tp)}
    unreleased = wanted - assigned_now - newly
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    previous = (current.previous_member_epoch if current.member_epoch == target_epoch
                else current.member_epoch)
    return MemberAssignment(target_epoch, previous, state, as_assignment(kept | newly), {})

