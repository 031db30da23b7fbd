"""The metadata quorum's state machine (replication.raft, KIP-595) on a simulated network:
elections, fetches, divergence, snapshots, and its safety under loss, reordering,
duplication and crashes. No sockets, no sleeps: the test owns the clock and the messages."""

from __future__ import annotations

import asyncio
import json

import pytest
from kio.schema.errors import ErrorCode

from replication.raft import NotLeader, RaftFetch, Role, VoteRequest, parse_voters
from support.raft_sim import SimNetwork


async def test_three_voters_elect_one_leader_and_commit_by_majority():
    net = SimNetwork([0, 1, 2], seed=1)
    await net.start_all()
    leader = await net.run_until_stable()
    offset = await leader.append([{"type": "x", "n": 1}])
    assert leader.high_watermark <= offset  # not committed before a follower holds it
    follower = next(n for n in net.nodes.values() if n is not leader)
    with pytest.raises(NotLeader) as refused:
        await follower.append([{"type": "x"}])
    assert refused.value.leader_id == leader.node_id
    await net.run_until_stable()
    assert leader.high_watermark == offset + 1
    assert all(n.log.entries == leader.log.entries for n in net.nodes.values())


async def test_a_dead_leader_is_replaced_and_its_uncommitted_tail_truncated():
    net = SimNetwork([0, 1, 2], seed=2)
    await net.start_all()
    old = await net.run_until_stable()
    await old.append([{"type": "x", "n": 1}])
    await net.run_until_stable()
    # Appended, never fetched by anyone: not committed, and gone once another leads.
    await old.append([{"type": "x", "n": "lost"}])
    net.in_flight.clear()
    net.crash(old.node_id)
    for _ in range(40):
        await net.tick(0.1)
        await net.deliver_all()
    new = net.leader()
    assert new is not None and new.node_id != old.node_id and new.epoch > old.epoch
    await net.start(old.node_id)
    await net.run_until_stable()
    assert all(n.log.entries == new.log.entries for n in net.nodes.values())
    assert {"type": "x", "n": "lost"} not in [r for _, r in new.log.entries]
    assert {"type": "x", "n": 1} in [r for _, r in new.log.entries]


async def test_votes_go_to_an_up_to_date_log_once_per_epoch():
    net = SimNetwork([0, 1, 2], seed=3)
    await net.start_all()
    leader = await net.run_until_stable()
    await leader.append([{"type": "x"}])
    await net.run_until_stable()
    voter = next(n for n in net.nodes.values() if n is not leader)
    behind = VoteRequest(leader.epoch + 1, leader.node_id, 0, 0)
    answer = await voter.handle(behind)
    assert not answer.granted  # its log is behind the voter's
    epoch = voter.epoch + 1
    current = VoteRequest(epoch, leader.node_id, voter.log.last_epoch(), voter.log.log_end_offset)
    assert (await voter.handle(current)).granted
    other = next(n for n in net.nodes.values() if n not in (leader, voter))
    rival = VoteRequest(epoch, other.node_id, voter.log.last_epoch(), voter.log.log_end_offset)
    assert not (await voter.handle(rival)).granted  # voted in this epoch already
    assert net.stores[voter.node_id].state.voted_for == leader.node_id  # before answering


async def test_a_stale_leader_is_fenced_and_resigns_without_a_majority():
    """SIGSTOP of a leader, as the quorum sees it: the others elect a new one; the old one's
    writes are never committed, its fetch answers are refused as fenced, and it resigns."""
    net = SimNetwork([0, 1, 2], seed=4)
    await net.start_all()
    old = await net.run_until_stable()
    paused = net.nodes.pop(old.node_id)  # hears nothing, says nothing
    net.in_flight.clear()
    for _ in range(40):
        await net.tick(0.1)
        await net.deliver_all()
    new = net.leader()
    assert new is not None and new.epoch > paused.epoch
    await paused.append([{"type": "x", "n": "stale"}])  # it still thinks it leads
    answer = await new.handle(RaftFetch(paused.node_id, paused.epoch, 0, -1))
    assert answer.error == ErrorCode.fenced_leader_epoch and answer.leader_id == new.node_id
    await paused.tick()  # check-quorum: no fetch from a majority for long
    assert paused.role is not Role.LEADER
    net.nodes[paused.node_id] = paused
    await net.run_until_stable()
    assert paused.leader_id == new.node_id
    assert {"type": "x", "n": "stale"} not in [r for _, r in paused.log.entries]


async def test_a_voter_cut_off_for_a_while_cannot_depose_a_working_leader():
    """Pre-vote (KIP-996): a follower whose fetches go unanswered asks the others whether it
    would win; they still hear from the leader and say no, so no epoch changes, and once
    its fetches are answered again it is a follower as before."""
    net = SimNetwork([0, 1, 2], seed=8)
    await net.start_all()
    leader = await net.run_until_stable()
    cut_off = next(n for n in net.nodes.values() if n is not leader)
    epoch = leader.epoch
    for _ in range(30):  # 3 s: three fetch timeouts
        await net.tick(0.1)
        for message in list(net.in_flight):
            if cut_off.node_id in (message.source, message.destination) and \
                    not isinstance(message.request, VoteRequest):
                net.in_flight.remove(message)  # its fetches are lost, its pre-votes are not
        await net.deliver_all()
    assert cut_off.role is Role.PROSPECTIVE
    assert leader.is_leader and all(n.epoch == epoch for n in net.nodes.values())
    for _ in range(30):  # its next fetch (a lost one is asked again) is answered
        await net.tick(0.1)
        await net.deliver_all()
    assert cut_off.role is Role.FOLLOWER and leader.is_leader and leader.epoch == epoch


async def test_a_followers_own_stall_is_not_the_leaders_silence():
    """A follower whose event loop was held (its broker busy) could not read the leader's
    answers meanwhile: the stall moves its fetch deadline on, so it stands for no election
    when its ticks resume; a leader silent past the deadline after that is still noticed."""
    net = SimNetwork([0, 1, 2], seed=3)
    await net.start_all()
    leader = await net.run_until_stable()
    follower = next(n for n in net.nodes.values() if n is not leader)
    net.in_flight.clear()
    net.clock.now += 3.0  # the stall: no tick, no message read
    follower.stalled(3.0)
    await follower.tick()
    assert follower.role is Role.FOLLOWER
    net.crash(leader.node_id)
    for _ in range(30):  # 3 s: a fetch timeout (1-1.3 s) and an election
        await net.tick(0.1)
        await net.deliver_all()
    assert follower.epoch > leader.epoch and follower.leader_id != leader.node_id


async def test_late_ticks_of_a_busy_machine_do_not_delay_an_election():
    """Ticks each a few tens of ms late (a loaded machine, not a held loop) are no stall:
    the followers of a dead leader still stand after one fetch timeout."""
    net = SimNetwork([0, 1, 2], seed=5)
    await net.start_all()
    leader = await net.run_until_stable()
    net.crash(leader.node_id)
    elapsed = 0.0
    while (new := net.leader()) is None and elapsed < 5:
        for node in net.nodes.values():
            node.stalled(0.04)  # of a 50 ms tick period
        await net.tick(0.05)
        await net.deliver_all()
        elapsed += 0.05
    assert new is not None
    # A fetch timeout with its jitter (1.3 s) and a round of pre-votes and votes.
    assert elapsed < 2.0, elapsed


async def test_a_leader_that_resigns_is_replaced_within_one_round_of_votes():
    """A graceful stop of the leader (EndQuorumEpoch): its followers elect one of them
    without waiting for a fetch or election timeout, pre-vote included: a follower told
    that its leader resigned no longer vouches for it."""
    net = SimNetwork([0, 1, 2], seed=9)
    await net.start_all()
    old = await net.run_until_stable()
    await old.resign()
    await net.deliver_all()
    net.crash(old.node_id)
    new, elapsed = await net.until_a_leader()
    assert new is not None and new.epoch == old.epoch + 1
    # Less than the election timeout: a tick, a pre-vote round and a vote round.
    assert elapsed < net.settings.election_timeout_s / 2, elapsed


async def test_a_whole_quorum_restarted_elects_without_waiting_out_a_fetch_timeout():
    """Every voter stopped and started again (a cluster restarted): the followers resume
    following the old leader, which resumes as a voter of no leader and asks for a
    pre-vote. Its own pre-vote tells them it no longer leads: they grant it at once instead
    of vouching for it until their fetch timeout (1-1.3 s of every restart)."""
    net = SimNetwork([0, 1, 2], seed=10)
    await net.start_all()
    old = await net.run_until_stable()
    for node in list(net.nodes):
        net.crash(node)
    net.in_flight.clear()
    await net.start_all()
    new, elapsed = await net.until_a_leader()
    assert new is not None and new.epoch == old.epoch + 1
    # The old leader's election timeout (0.3-0.6 s) and a round of pre-votes and votes.
    assert elapsed < 2 * net.settings.election_timeout_s, elapsed
    assert elapsed < net.settings.fetch_timeout_s, elapsed


async def test_a_voter_reads_its_own_replica_committed_only_and_snapshots_below_its_start():
    """What a combined node's broker applies from its own voter (read_committed): never
    the uncommitted tail (it may be truncated), the snapshot when asked below the log
    start, and a read waiting for news is answered by the commit that brings it."""
    net = SimNetwork([0, 1, 2], seed=11)
    await net.start_all()
    leader = await net.run_until_stable()
    follower = next(n for n in net.nodes.values() if n is not leader)
    committed = follower.high_watermark
    first = await follower.read_committed(0, 1 << 20, 0)
    assert first.snapshot is None and first.records
    assert (await follower.read_committed(committed, 1 << 20, 0)).records == b""

    # (The simulated clock runs ahead of the real one the wait uses: no deadline here.)
    waiting = asyncio.ensure_future(follower.read_committed(committed, 1 << 20, 1e9))
    await leader.append([{"type": "x", "n": 1}])
    # The follower holds it as its fetch would give it, not committed yet.
    await follower.log.append_as_follower(
        await leader.log.read(committed, 1 << 20, leader.log.log_end_offset))
    assert follower.log.log_end_offset > committed and follower.high_watermark == committed
    assert (await follower.read_committed(committed, 1 << 20, 0)).records == b""
    await asyncio.sleep(0)
    assert not waiting.done()
    await net.run_until_stable()
    answer = await asyncio.wait_for(waiting, 5)
    assert [record for _, _, record in json.loads(answer.records)] == [{"type": "x", "n": 1}]

    for n in range(4):
        await leader.append([{"type": "x", "n": n}])
        await net.run_until_stable()
    follower.log.take_snapshot(follower.high_watermark - 1)
    below = await follower.read_committed(0, 1 << 20, 0)
    assert below.snapshot == follower.log.latest_snapshot() and below.records == b""


async def test_a_voter_told_less_than_the_high_watermark_is_answered_at_once():
    """A commit reaches every voter in one round, so a combined node's broker, which
    applies what its voter holds committed, learns new metadata as fast as one fetching it
    from the leader: the voter whose fetch comes after the one that committed is not held
    for a long poll, because its last answer told it less."""
    net = SimNetwork([0, 1, 2], seed=12)
    await net.start_all()
    leader = await net.run_until_stable()
    first, second = (n.node_id for n in net.nodes.values() if n is not leader)
    end = leader.log.log_end_offset

    def fetch(voter: int, offset: int) -> RaftFetch:
        return RaftFetch(voter, leader.epoch, offset, leader.log.last_epoch())

    held_for_news = 1e9  # the simulated clock runs ahead of the real one: no deadline
    for voter in (first, second):
        told = await leader.long_poll_fetch(fetch(voter, end), 0)
        assert told.high_watermark == end
    offset = await leader.append([{"type": "x"}])
    for voter in (first, second):
        assert (await leader.long_poll_fetch(fetch(voter, end), held_for_news)).records
    committing = await leader.long_poll_fetch(fetch(first, offset + 1), held_for_news)
    assert committing.high_watermark == leader.high_watermark == offset + 1
    late = await asyncio.wait_for(
        leader.long_poll_fetch(fetch(second, offset + 1), held_for_news), 5)
    assert late.high_watermark == offset + 1 and late.records == b""
    # Told it now: its next fetch waits for news again.
    waiting = asyncio.ensure_future(leader.long_poll_fetch(fetch(second, offset + 1), 1e9))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()


async def test_a_voter_below_the_log_start_loads_the_snapshot():
    net = SimNetwork([0, 1, 2], seed=5)
    await net.start_all()
    leader = await net.run_until_stable()
    lagging = next(n for n in net.nodes.values() if n is not leader)
    net.crash(lagging.node_id)
    for n in range(10):
        await leader.append([{"type": "x", "n": n}])
        await net.run_until_stable()
    leader.log.take_snapshot(leader.high_watermark - 2)
    await net.start(lagging.node_id)
    await net.run_until_stable()
    restarted = net.nodes[lagging.node_id]
    assert restarted.log.latest_snapshot() == leader.log.latest_snapshot()
    end = leader.log.log_end_offset
    assert restarted.log.committed_prefix(end)[-2:] == leader.log.committed_prefix(end)[-2:]


async def test_a_single_voter_leads_at_once():
    net = SimNetwork([0], seed=6)
    await net.start_all()
    assert net.nodes[0].is_leader
    offset = await net.nodes[0].append([{"type": "x"}])
    assert net.nodes[0].high_watermark == offset + 1


def test_voters_are_parsed_in_kafkas_form():
    assert parse_voters("0@127.0.0.1:9092, 1@localhost:9093") == {
        0: ("127.0.0.1", 9092), 1: ("localhost", 9093)}
    for bad in ("0@host", "x@host:1", "0@host:1,0@host:2"):
        with pytest.raises(ValueError):
            parse_voters(bad)


def _assert_log_matching(net: SimNetwork) -> None:
    """Two logs holding a record of the same epoch at an offset hold the same records up
    to it (Raft's log matching)."""
    logs = list(net.logs.values())
    for a in logs:
        for b in logs:
            common = min(a.log_end_offset, b.log_end_offset)
            same = [o for o in range(max(a.start, b.start), common)
                    if a.epoch_at(o) == b.epoch_at(o)]
            if same:
                last = same[-1]
                low = max(a.start, b.start)
                assert a.entries[low - a.start:last + 1 - a.start] == \
                    b.entries[low - b.start:last + 1 - b.start]


@pytest.mark.parametrize("seed", range(12))
async def test_safety_under_loss_reordering_duplication_and_crashes(seed):
    """Random schedules (graceful stops among the crashes): one leader per epoch, log
    matching, and nothing committed is ever lost; once the network heals, all voters
    converge on one log."""
    net = SimNetwork([0, 1, 2, 3, 4] if seed % 2 else [0, 1, 2], seed=seed)
    rng = net.rng
    await net.start_all()
    committed: list = []  # the longest committed prefix seen
    written = 0
    for _ in range(1500):
        roll = rng.random()
        if roll < 0.55 and net.in_flight:
            message = rng.choice(net.in_flight)  # any order
            if rng.random() < 0.1:
                net.in_flight.remove(message)  # lost
            else:
                if rng.random() < 0.05:
                    net.in_flight.append(message)  # duplicated
                await net.deliver(message)
        elif roll < 0.75:
            await net.tick(rng.uniform(0.01, 0.4))
        elif roll < 0.78 and len(net.nodes) > len(net.voters) // 2 + 1:
            stopping = rng.choice(sorted(net.nodes))
            if rng.random() < 0.5:
                await net.nodes[stopping].resign()  # a graceful stop (a leader's EndQuorumEpoch)
            net.crash(stopping)
        elif roll < 0.83 and len(net.nodes) < len(net.voters):
            await net.start(rng.choice([v for v in net.voters if v not in net.nodes]))
        elif (leader := net.leader()) is not None:
            written += 1
            await leader.append([{"type": "x", "n": written}])
        _assert_log_matching(net)
        for node in net.nodes.values():
            prefix = node.log.committed_prefix(node.high_watermark)
            shorter, longer = sorted((prefix, committed), key=len)
            assert longer[:len(shorter)] == shorter, "committed records differ"
            committed = longer
        leader = net.leader()
        if leader is not None:  # a leader holds everything committed
            assert leader.log.committed_prefix(len(committed)) == committed
    for voter in net.voters:
        if voter not in net.nodes:
            await net.start(voter)
    leader = await net.run_until_stable(5000)
    assert leader.log.committed_prefix(len(committed)) == committed
    assert all(n.log.entries == leader.log.entries for n in net.nodes.values())


async def test_a_leaders_own_stall_is_not_its_followers_silence():
    """A leader whose event loop was held could not read its followers' fetches meanwhile:
    it does not resign for want of them when its ticks resume, but still does when they
    stay silent past a fetch timeout after that."""
    net = SimNetwork([0, 1, 2], seed=4)
    await net.start_all()
    leader = await net.run_until_stable()
    net.in_flight.clear()
    net.clock.now += 3.0  # the stall: no tick, no fetch read
    leader.stalled(3.0)
    await leader.tick()
    assert leader.is_leader
    for node in list(net.nodes):
        if node != leader.node_id:
            net.crash(node)
    for _ in range(20):  # 2 s: past the fetch timeout given after the stall
        await net.tick(0.1)
    assert not leader.is_leader
