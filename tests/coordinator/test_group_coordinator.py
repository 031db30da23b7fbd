"""The classic group protocol state machine, driven on virtual time.

The coordinator runs over an in-memory ``CoordinatorLog`` and a ``ManualTimer`` whose time
jumps to the next deadline whenever every task waits, so session and rebalance timeouts,
rebalances and reloads take no real time; the real topic and real clients are covered by
the other tests in this directory.
"""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.classic import JoinRequest
from coordinator.group.offsets import OffsetCommit
from coordinator.coordinator_log import TxnProducer
from coordinator.group.service import GroupCoordinator
from coordinator.group.state import GroupState
from coordinator.group_config import GroupConfig
from coordinator.group.timer import ManualTimer
from support.coordinators import Clock, MemoryCoordinatorLog

SESSION_MS = 400
REBALANCE_MS = 400
CONFIG = GroupConfig(initial_rebalance_delay_ms=50, min_session_timeout_ms=10)
RANGE = [("range", b"range-metadata")]


async def started(store: MemoryCoordinatorLog, clock: Clock) -> GroupCoordinator:
    coordinator = GroupCoordinator(CONFIG, store, clock.timer)
    await coordinator.start()
    await clock.sleep(10)
    return coordinator


@pytest.fixture
async def settle(clock):
    """Let ``ms`` of virtual time pass (10 by default)."""
    async def settle(ms: int = 10) -> None:
        await clock.sleep(ms)
    return settle


@pytest.fixture
async def store():
    return MemoryCoordinatorLog()


@pytest.fixture
async def coordinator(store, clock):
    coordinator = await started(store, clock)
    yield coordinator
    await coordinator.stop()


def request(member_id: str = "", *, group: str = "g", instance: str | None = None,
            protocols=RANGE, protocol_type: str = "consumer", session_ms: int = SESSION_MS,
            v4: bool = True) -> JoinRequest:
    return JoinRequest(group, member_id, instance, "client", "/127.0.0.1", session_ms,
                       REBALANCE_MS, protocol_type, list(protocols), v4)


async def join(coordinator: GroupCoordinator, member_id: str = "", **kwargs):
    """JoinGroup as a v4+ client does it: retry with the id MEMBER_ID_REQUIRED hands out."""
    result = await coordinator.join_group(request(member_id, **kwargs))
    if result.error == ErrorCode.member_id_required:
        result = await coordinator.join_group(request(result.member_id, **kwargs))
    return result


async def join_all(coordinator: GroupCoordinator, *member_ids: str, **kwargs):
    return await asyncio.gather(*(join(coordinator, m, **kwargs) for m in member_ids))


async def sync(coordinator, result, assignment: dict[str, bytes] | None = None, group="g"):
    return await coordinator.sync_group(group, result.generation_id, result.member_id, None,
                                        None, None, assignment or {})


async def stable_group(coordinator, count: int):
    """``count`` members joined together and synced: their join results, leader first."""
    joined = await join_all(coordinator, *[""] * count)
    leader = next(r for r in joined if r.member_id == r.leader_id)
    assignment = {r.member_id: r.member_id.encode() for r in joined}
    synced = await asyncio.gather(*(sync(coordinator, r, assignment if r is leader else None)
                                     for r in joined))
    for r, s in zip(joined, synced):
        assert s.error == ErrorCode.none and s.assignment == r.member_id.encode()
    return [leader] + [r for r in joined if r is not leader]


def state(coordinator, group="g") -> GroupState:
    return coordinator.groups[group].state


# --- joining ------------------------------------------------------------------------------


async def test_first_join_requires_a_member_id_then_forms_generation_one(coordinator):
    first = await coordinator.join_group(request())
    assert first.error == ErrorCode.member_id_required
    assert first.member_id.startswith("client-")
    result = await coordinator.join_group(request(first.member_id))
    assert (result.error, result.generation_id, result.leader_id) == (
        ErrorCode.none, 1, first.member_id)
    assert result.protocol_name == "range" and result.protocol_type == "consumer"
    assert result.members == ((first.member_id, None, b"range-metadata"),)
    assert state(coordinator) == GroupState.COMPLETING_REBALANCE
    synced = await sync(coordinator, result, {first.member_id: b"a"})
    assert (synced.error, synced.assignment) == (ErrorCode.none, b"a")
    assert state(coordinator) == GroupState.STABLE
    assert coordinator.heartbeat("g", 1, first.member_id, None) == ErrorCode.none


async def test_old_join_versions_join_without_a_member_id_round_trip(coordinator):
    result = await coordinator.join_group(request(v4=False))
    assert result.error == ErrorCode.none and result.generation_id == 1


async def test_only_the_leader_gets_the_member_list(coordinator):
    joined = await join_all(coordinator, "", "", "")
    leaders = [r for r in joined if r.members]
    assert len(leaders) == 1 and leaders[0].member_id == leaders[0].leader_id
    assert {m for m, _, _ in leaders[0].members} == {r.member_id for r in joined}
    assert {r.generation_id for r in joined} == {1}


async def test_members_arriving_during_the_initial_delay_share_the_first_generation(coordinator,
                                                                                     settle):
    first = asyncio.ensure_future(join(coordinator))
    await settle(30)
    second = asyncio.ensure_future(join(coordinator))
    await settle(30)  # past the first delay: the second member extended it
    third = asyncio.ensure_future(join(coordinator))
    results = await asyncio.gather(first, second, third)
    assert {r.generation_id for r in results} == {1}


async def test_protocol_chosen_by_member_votes(coordinator):
    both = [("roundrobin", b"r"), ("range", b"x")]
    joined = await asyncio.gather(join(coordinator, protocols=both),
                                  join(coordinator, protocols=both),
                                  join(coordinator, protocols=[("range", b"y"),
                                                               ("roundrobin", b"z")]))
    assert {r.protocol_name for r in joined} == {"roundrobin"}


async def test_new_member_triggers_a_rebalance_of_a_stable_group(coordinator, settle):
    leader, follower = await stable_group(coordinator, 2)
    newcomer = asyncio.ensure_future(join(coordinator))
    await settle()
    assert state(coordinator) == GroupState.PREPARING_REBALANCE
    assert coordinator.heartbeat("g", 1, follower.member_id, None) == \
        ErrorCode.rebalance_in_progress
    # Committing is still allowed while the others have not rejoined.
    assert await coordinator.commit_offsets("g", 1, follower.member_id, None, {
        ("t", 0): OffsetCommit(5, -1, "")}) == {("t", 0): ErrorCode.none}
    rejoined = await join_all(coordinator, leader.member_id, follower.member_id)
    new = await newcomer
    assert {r.generation_id for r in [*rejoined, new]} == {2}
    assert coordinator.heartbeat("g", 1, leader.member_id, None) == ErrorCode.illegal_generation


async def test_follower_rejoining_unchanged_gets_the_current_generation(coordinator):
    leader, follower = await stable_group(coordinator, 2)
    again = await join(coordinator, follower.member_id)
    assert (again.error, again.generation_id, again.members) == (ErrorCode.none, 1, ())
    assert state(coordinator) == GroupState.STABLE


async def test_leader_rejoining_forces_a_rebalance(coordinator, settle):
    leader, follower = await stable_group(coordinator, 2)
    rejoin = asyncio.ensure_future(join(coordinator, leader.member_id))
    await settle()
    assert state(coordinator) == GroupState.PREPARING_REBALANCE
    follower_again = await join(coordinator, follower.member_id)
    assert (await rejoin).generation_id == follower_again.generation_id == 2


# --- leaving, expiring --------------------------------------------------------------------


async def test_leave_group_rebalances_the_rest(coordinator):
    leader, follower = await stable_group(coordinator, 2)
    error, member_errors = coordinator.leave_group("g", [(follower.member_id, None),
                                                         ("nobody", None)])
    assert (error, member_errors) == (ErrorCode.none, [ErrorCode.none, ErrorCode.unknown_member_id])
    assert coordinator.heartbeat("g", 1, leader.member_id, None) == ErrorCode.rebalance_in_progress
    alone = await join(coordinator, leader.member_id)
    assert (alone.generation_id, len(alone.members)) == (2, 1)


async def test_last_member_leaving_empties_the_group(coordinator, settle):
    [only] = await stable_group(coordinator, 1)
    coordinator.leave_group("g", [(only.member_id, None)])
    await settle(50)
    assert state(coordinator) == GroupState.EMPTY
    assert coordinator.groups["g"].generation_id == 2


async def test_silent_member_is_removed_when_its_session_expires(coordinator, settle):
    leader, follower = await stable_group(coordinator, 2)
    for _ in range(6):
        await settle(SESSION_MS // 4)
        assert coordinator.heartbeat("g", 1, leader.member_id, None) in (
            ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert follower.member_id not in coordinator.groups["g"].members
    assert coordinator.heartbeat("g", 1, follower.member_id, None) == ErrorCode.unknown_member_id


async def test_member_that_does_not_rejoin_in_time_is_dropped(coordinator):
    leader, follower = await stable_group(coordinator, 2)
    rejoined = await join(coordinator, leader.member_id)  # waits out the rebalance timeout
    assert (rejoined.generation_id, [m for m, _, _ in rejoined.members]) == (2, [leader.member_id])


async def test_member_that_does_not_sync_in_time_is_dropped(coordinator, settle):
    joined = await join_all(coordinator, "", "")
    leader = next(r for r in joined if r.members)
    follower = next(r for r in joined if not r.members)
    assert (await sync(coordinator, leader, {})).error == ErrorCode.none
    heartbeats = []
    for _ in range(6):  # the leader stays alive meanwhile
        await settle(REBALANCE_MS // 4)
        heartbeats.append(coordinator.heartbeat("g", 1, leader.member_id, None))
    assert follower.member_id not in coordinator.groups["g"].members
    assert heartbeats[0] == ErrorCode.none and heartbeats[-1] == ErrorCode.rebalance_in_progress


async def test_member_id_handed_out_but_never_used_expires(coordinator, settle):
    [only] = await stable_group(coordinator, 1)
    first = await coordinator.join_group(request())
    assert first.error == ErrorCode.member_id_required
    assert first.member_id in coordinator.groups["g"].pending_members
    await settle(SESSION_MS + 100)
    assert first.member_id not in coordinator.groups["g"].pending_members


# --- static membership --------------------------------------------------------------------


async def test_restarted_static_member_keeps_its_assignment_without_rebalance(coordinator):
    first = await join(coordinator, instance="i-1")
    assert first.error == ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
    await sync(coordinator, first, {first.member_id: b"p0"})
    restarted = await join(coordinator, instance="i-1")
    assert restarted.member_id != first.member_id
    assert (restarted.generation_id, restarted.members) == (1, ())
    # The old leader id comes back, so the restarted member does not run an assignment.
    assert restarted.leader_id == first.member_id
    assert state(coordinator) == GroupState.STABLE
    synced = await sync(coordinator, restarted)
    assert synced.assignment == b"p0"
    assert coordinator.heartbeat("g", 1, first.member_id, "i-1") == ErrorCode.fenced_instance_id
    assert (await join(coordinator, first.member_id, instance="i-1")).error == \
        ErrorCode.fenced_instance_id


async def test_static_member_is_removed_by_instance_id_alone(coordinator):
    first = await join(coordinator, instance="i-1")
    await sync(coordinator, first, {})
    assert coordinator.leave_group("g", [("", "i-1")]) == (ErrorCode.none, [ErrorCode.none])
    assert coordinator.leave_group("g", [("", "i-1")]) == (ErrorCode.none,
                                                            [ErrorCode.unknown_member_id])


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol_type, protocols", [("", RANGE), ("consumer", [])])
async def test_empty_protocol_type_or_list_is_inconsistent(coordinator, protocol_type, protocols):
    result = await coordinator.join_group(request(protocol_type=protocol_type,
                                                  protocols=protocols))
    assert result.error == ErrorCode.inconsistent_group_protocol
    assert "g" not in coordinator.groups


async def test_join_must_match_the_groups_protocols(coordinator):
    await stable_group(coordinator, 1)
    wrong_type = await join(coordinator, protocol_type="connect")
    no_common = await join(coordinator, protocols=[("sticky", b"")])
    assert wrong_type.error == no_common.error == ErrorCode.inconsistent_group_protocol
    assert state(coordinator) == GroupState.STABLE


async def test_unknown_member_and_stale_generation(coordinator):
    leader, follower = await stable_group(coordinator, 2)
    assert coordinator.heartbeat("g", 1, "ghost", None) == ErrorCode.unknown_member_id
    assert coordinator.heartbeat("nope", 1, "ghost", None) == ErrorCode.unknown_member_id
    assert coordinator.heartbeat("g", 0, leader.member_id, None) == ErrorCode.illegal_generation
    assert (await join(coordinator, "ghost")).error == ErrorCode.unknown_member_id
    assert (await join(coordinator, "ghost", group="new")).error == ErrorCode.unknown_member_id
    assert (await coordinator.sync_group("g", 7, leader.member_id, None, None, None, {})
            ).error == ErrorCode.illegal_generation
    commit = {("t", 0): OffsetCommit(1, -1, "")}
    assert await coordinator.commit_offsets("g", 0, leader.member_id, None, commit) == {
        ("t", 0): ErrorCode.illegal_generation}
    assert await coordinator.commit_offsets("g", 1, "ghost", None, commit) == {
        ("t", 0): ErrorCode.unknown_member_id}
    assert await coordinator.commit_offsets("g", -1, "", None, commit) == {
        ("t", 0): ErrorCode.unknown_member_id}  # only members commit to a non-empty group
    assert await coordinator.commit_offsets("gone", 3, "m", None, commit) == {
        ("t", 0): ErrorCode.illegal_generation}
    assert state(coordinator) == GroupState.STABLE


async def test_session_timeout_outside_the_allowed_range(coordinator):
    result = await coordinator.join_group(request(session_ms=5))
    assert result.error == ErrorCode.invalid_session_timeout


async def test_sync_while_preparing_and_commit_while_completing(coordinator, settle):
    leader, follower = await stable_group(coordinator, 2)
    rejoin = asyncio.ensure_future(join(coordinator, leader.member_id))
    await settle()
    assert (await sync(coordinator, follower)).error == ErrorCode.rebalance_in_progress
    again = await join(coordinator, follower.member_id)
    await rejoin
    assert state(coordinator) == GroupState.COMPLETING_REBALANCE
    assert await coordinator.commit_offsets("g", again.generation_id, again.member_id, None, {
        ("t", 0): OffsetCommit(1, -1, "")}) == {("t", 0): ErrorCode.rebalance_in_progress}


async def test_followers_waiting_in_sync_learn_of_a_new_rebalance(coordinator, settle):
    joined = await join_all(coordinator, "", "")
    follower = next(r for r in joined if not r.members)
    waiting = asyncio.ensure_future(sync(coordinator, follower))
    await settle()
    newcomer = asyncio.ensure_future(join(coordinator))
    assert (await waiting).error == ErrorCode.rebalance_in_progress
    newcomer.cancel()


# --- offsets ------------------------------------------------------------------------------


async def test_simple_commit_and_fetch_without_membership(coordinator):
    commit = {("t", 0): OffsetCommit(10, 3, "meta"), ("t", 1): OffsetCommit(20, -1, "")}
    assert set((await coordinator.commit_offsets("simple", -1, "", None, commit)).values()) == {
        ErrorCode.none}
    error, fetched = coordinator.fetch_offsets("simple", [("t", 0), ("t", 2)])
    assert error == ErrorCode.none
    assert (fetched[("t", 0)].offset, fetched[("t", 0)].leader_epoch,
            fetched[("t", 0)].metadata) == (10, 3, "meta")
    assert fetched[("t", 2)] is None
    assert set(coordinator.fetch_offsets("simple", None)[1]) == {("t", 0), ("t", 1)}
    assert coordinator.fetch_offsets("unknown", [("t", 0)]) == (ErrorCode.none, {("t", 0): None})


async def test_storage_failure_is_reported_and_nothing_changes(coordinator, store):
    store.failure = ErrorCode.not_coordinator
    assert await coordinator.commit_offsets("g", -1, "", None, {
        ("t", 0): OffsetCommit(1, -1, "")}) == {("t", 0): ErrorCode.not_coordinator}
    assert coordinator.fetch_offsets("g", [("t", 0)])[1] == {("t", 0): None}


async def test_delete_offsets_and_groups(coordinator):
    commit = {("t", 0): OffsetCommit(1, -1, ""), ("u", 0): OffsetCommit(2, -1, "")}
    await coordinator.commit_offsets("simple", -1, "", None, commit)
    assert await coordinator.delete_offsets("simple", [("t", 0)]) == (
        ErrorCode.none, {("t", 0): ErrorCode.none})
    assert set(coordinator.fetch_offsets("simple", None)[1]) == {("u", 0)}
    assert await coordinator.delete_offsets("nope", [("t", 0)]) == (
        ErrorCode.group_id_not_found, {})
    [only] = await stable_group(coordinator, 1)
    assert await coordinator.delete_groups(["g", "simple", "nope"]) == {
        "g": ErrorCode.non_empty_group, "simple": ErrorCode.none,
        "nope": ErrorCode.group_id_not_found}
    assert "simple" not in coordinator.groups


async def test_offsets_of_subscribed_topics_cannot_be_deleted_from_a_live_group(coordinator):
    # ConsumerProtocolSubscription v0: version, topics ["t"], user data null.
    subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    joined = await join(coordinator, protocols=[("range", subscription)])
    await sync(coordinator, joined, {})
    await coordinator.commit_offsets("g", 1, joined.member_id, None, {
        ("t", 0): OffsetCommit(1, -1, ""), ("u", 0): OffsetCommit(1, -1, "")})
    assert await coordinator.delete_offsets("g", [("t", 0), ("u", 0)]) == (
        ErrorCode.none, {("t", 0): ErrorCode.group_subscribed_to_topic,
                         ("u", 0): ErrorCode.none})


# --- loading and ownership ----------------------------------------------------------------


async def test_state_is_reloaded_from_the_topic_log(coordinator, store, clock):
    leader, follower = await stable_group(coordinator, 2)
    await coordinator.commit_offsets("g", 1, leader.member_id, None, {
        ("t", 0): OffsetCommit(7, 2, "m")})
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 1): OffsetCommit(9, -1, "")})
    await coordinator.stop()

    reloaded = await started(store, clock)
    try:
        group = reloaded.groups["g"]
        assert (group.state, group.generation_id, group.leader_id) == (
            GroupState.STABLE, 1, leader.member_id)
        assert set(group.members) == {leader.member_id, follower.member_id}
        assert reloaded.heartbeat("g", 1, follower.member_id, None) == ErrorCode.none
        synced = await sync(reloaded, follower)
        assert synced.assignment == follower.member_id.encode()
        assert reloaded.fetch_offsets("g", [("t", 0)])[1][("t", 0)].offset == 7
        assert reloaded.fetch_offsets("simple", [("t", 1)])[1][("t", 1)].offset == 9
    finally:
        await reloaded.stop()


async def test_deleted_group_stays_deleted_after_reload(coordinator, store, clock):
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 1): OffsetCommit(9, -1, "")})
    await coordinator.delete_groups(["simple"])
    await coordinator.stop()
    reloaded = await started(store, clock)
    assert "simple" not in reloaded.groups
    await reloaded.stop()


async def test_requests_while_loading_or_elsewhere(store, clock, settle):
    coordinator = GroupCoordinator(CONFIG, store, clock.timer)
    assert coordinator.heartbeat("g", 1, "m", None) == ErrorCode.coordinator_not_available
    store.replay_gate = asyncio.Event()
    await coordinator.start()
    assert coordinator.heartbeat("g", 1, "m", None) == ErrorCode.coordinator_load_in_progress
    assert coordinator.list_groups()[0] == ErrorCode.coordinator_load_in_progress
    store.replay_gate.set()
    await settle()
    assert coordinator.heartbeat("g", 1, "m", None) == ErrorCode.unknown_member_id
    store.led.discard(store.partition_for("g"))
    coordinator.on_metadata_change()
    assert coordinator.heartbeat("g", 1, "m", None) == ErrorCode.not_coordinator
    await coordinator.stop()


async def test_losing_leadership_answers_waiting_members(coordinator, store, settle):
    waiting = asyncio.ensure_future(join(coordinator))
    await settle()
    store.led.clear()
    coordinator.on_metadata_change()
    assert (await waiting).error == ErrorCode.not_coordinator
    assert coordinator.groups == {}


# --- offsets committed in transactions ---------------------------------------------------

PRODUCER = TxnProducer(producer_id=7, producer_epoch=0)


async def txn_commit(coordinator, offsets: dict[tuple[str, int], int], *, group="simple",
                     producer=PRODUCER, generation=-1, member_id="", instance=None):
    return await coordinator.commit_offsets(
        group, generation, member_id, instance,
        {tp: OffsetCommit(offset, -1, "") for tp, offset in offsets.items()}, producer)


def end_transaction(coordinator, store, group: str, producer_id: int, commit: bool) -> None:
    """What WriteTxnMarkers does to the group's partition: the marker, then the coordinator."""
    partition = store.partition_for(group)
    store.write_marker(partition, producer_id, commit)
    coordinator.complete_transaction(partition, producer_id, commit)


def fetched(coordinator, tp=("t", 0), group="simple") -> int | None:
    found = coordinator.fetch_offsets(group, [tp])[1][tp]
    return None if found is None else found.offset


async def test_transactional_offsets_are_pending_until_the_commit_marker(coordinator, store):
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(3, -1, "")})
    assert await txn_commit(coordinator, {("t", 0): 5, ("t", 1): 6}) == {
        ("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    [*_, record] = store.logs[store.partition_for("simple")]
    assert record.producer_id == PRODUCER.producer_id
    assert (fetched(coordinator), fetched(coordinator, ("t", 1))) == (3, None)
    assert coordinator.pending_partitions("simple") == {("t", 0), ("t", 1)}
    # Another producer's marker, or this producer's in another partition, decides nothing.
    end_transaction(coordinator, store, "simple", 8, commit=True)
    coordinator.complete_transaction(store.partition_for("simple") + 1, 7, commit=True)
    assert fetched(coordinator) == 3
    end_transaction(coordinator, store, "simple", 7, commit=True)
    assert (fetched(coordinator), fetched(coordinator, ("t", 1))) == (5, 6)
    assert coordinator.pending_partitions("simple") == set()


async def test_aborted_transactional_offsets_are_dropped(coordinator, store):
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(3, -1, "")})
    await txn_commit(coordinator, {("t", 0): 5})
    end_transaction(coordinator, store, "simple", 7, commit=False)
    assert fetched(coordinator) == 3
    assert coordinator.pending_partitions("simple") == set()


async def test_a_commit_written_after_the_transactional_one_wins(coordinator, store):
    await txn_commit(coordinator, {("t", 0): 5})
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(8, -1, "")})
    end_transaction(coordinator, store, "simple", 7, commit=True)
    assert fetched(coordinator) == 8


@pytest.mark.parametrize("commit", [True, False])
async def test_a_marker_written_while_the_commit_awaits_the_isr_decides_it(coordinator, store,
                                                                         settle, commit):
    store.acknowledge_gate = asyncio.Event()
    writing = asyncio.ensure_future(txn_commit(coordinator, {("t", 0): 5}))
    await settle()
    end_transaction(coordinator, store, "simple", 7, commit=commit)
    store.acknowledge_gate.set()
    assert await writing == {("t", 0): ErrorCode.none}
    assert fetched(coordinator) == (5 if commit else None)
    assert coordinator.pending_partitions("simple") == set()


async def test_transactional_commits_check_the_generation_from_v3_on(coordinator, settle):
    leader, follower = await stable_group(coordinator, 2)
    tp = {("t", 0): 1}
    assert await txn_commit(coordinator, tp, group="g", generation=1,
                            member_id=leader.member_id) == {("t", 0): ErrorCode.none}
    assert await txn_commit(coordinator, tp, group="g", generation=2,
                            member_id=leader.member_id) == {("t", 0): ErrorCode.illegal_generation}
    assert await txn_commit(coordinator, tp, group="g", generation=1,
                            member_id="ghost") == {("t", 0): ErrorCode.unknown_member_id}
    # v0-v2 carry no member id nor generation: accepted whatever the group's state.
    assert await txn_commit(coordinator, tp, group="g") == {("t", 0): ErrorCode.none}
    # An unknown group can only be a "simple" one.
    assert await txn_commit(coordinator, tp, group="new", generation=1,
                            member_id="m") == {("t", 0): ErrorCode.illegal_generation}
    # Unlike OffsetCommit, a group completing a rebalance takes transactional commits.
    rejoined = await join_all(coordinator, leader.member_id, follower.member_id)
    assert state(coordinator) == GroupState.COMPLETING_REBALANCE
    assert await txn_commit(coordinator, tp, group="g", generation=2,
                            member_id=rejoined[0].member_id) == {("t", 0): ErrorCode.none}


async def test_transactional_commit_of_a_fenced_static_member(coordinator):
    first = await join(coordinator, instance="instance-1")
    await sync(coordinator, first)
    again = await join(coordinator, instance="instance-1")
    assert again.member_id != first.member_id
    assert await txn_commit(coordinator, {("t", 0): 1}, group="g", generation=1,
                            member_id=first.member_id, instance="instance-1") == {
        ("t", 0): ErrorCode.fenced_instance_id}


async def test_pending_offsets_survive_a_reload_until_their_marker(coordinator, store, clock):
    await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): OffsetCommit(3, -1, "")})
    await txn_commit(coordinator, {("t", 0): 5})
    await txn_commit(coordinator, {("t", 1): 6}, producer=TxnProducer(8, 0))
    await txn_commit(coordinator, {("t", 2): 7}, producer=TxnProducer(9, 0))
    end_transaction(coordinator, store, "simple", 8, commit=True)
    end_transaction(coordinator, store, "simple", 9, commit=False)
    await coordinator.stop()

    reloaded = await started(store, clock)
    try:
        assert [fetched(reloaded, ("t", i)) for i in range(3)] == [3, 6, None]
        assert reloaded.pending_partitions("simple") == {("t", 0)}
        end_transaction(reloaded, store, "simple", 7, commit=True)
        assert fetched(reloaded) == 5
    finally:
        await reloaded.stop()


async def test_a_marker_written_while_the_partition_loads_is_replayed(store, clock, settle):
    coordinator = await started(store, clock)
    await txn_commit(coordinator, {("t", 0): 5})
    await coordinator.stop()
    store.replay_gate = asyncio.Event()
    reloaded = await started(store, clock)
    try:
        end_transaction(reloaded, store, "simple", 7, commit=True)  # ignored while loading
        store.replay_gate.set()
        await settle()
        assert fetched(reloaded) == 5
    finally:
        await reloaded.stop()


async def test_deleting_pending_offsets_deletes_them_for_good(coordinator, store, clock):
    await txn_commit(coordinator, {("t", 0): 5, ("t", 1): 6})
    assert await coordinator.delete_offsets("simple", [("t", 0)]) == (
        ErrorCode.none, {("t", 0): ErrorCode.none})
    assert coordinator.pending_partitions("simple") == {("t", 1)}
    end_transaction(coordinator, store, "simple", 7, commit=True)
    assert (fetched(coordinator), fetched(coordinator, ("t", 1))) == (None, 6)

    await txn_commit(coordinator, {("t", 2): 7})
    assert await coordinator.delete_groups(["simple"]) == {"simple": ErrorCode.none}
    end_transaction(coordinator, store, "simple", 7, commit=True)
    assert "simple" not in coordinator.groups
    await coordinator.stop()
    reloaded = await started(store, clock)
    assert "simple" not in reloaded.groups
    await reloaded.stop()


# --- the manual timer ---------------------------------------------------------------------


def test_manual_timer_runs_due_callbacks_in_deadline_order_at_their_own_time():
    timer = ManualTimer(start_ms=0)
    ran: list[tuple[str, int]] = []

    def note(name: str) -> None:
        ran.append((name, timer.now_ms()))

    timer.schedule(30, note, "c")
    timer.schedule(10, note, "a")
    timer.schedule(10, note, "b")  # same deadline: in the order scheduled
    timer.schedule(20, note, "cancelled").cancel()
    # A callback may schedule another that falls due within the same advance.
    timer.schedule(15, lambda: timer.schedule(5, note, "chained"))
    timer.schedule(50, note, "later")
    assert timer.advance(40) == 5
    assert ran == [("a", 10), ("b", 10), ("chained", 20), ("c", 30)]
    assert (timer.now_ms(), timer.next_deadline_ms()) == (40, 50)
