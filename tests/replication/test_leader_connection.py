"""How a node finds the active controller among the voters (replication.raft.leader_connection):
a refused connection or NOT_CONTROLLER moves on, to the leader an answer names if any; a call
hung on a voter cut off (a network partition: no error, no answer) is left as soon as another
voter is known to lead, or after ``attempt_s``."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.raft.leader_connection import ActiveController

VOTERS = {0: ("127.0.0.1", 9000), 1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
HANGS = object()  # a voter cut off: the call is answered by nothing but its timeout


@dataclass
class Answer:
    error_code: ErrorCode


class Voters:
    """NodeClient stand-in: each voter's behaviour by port, and the calls it got."""

    def __init__(self, behaviour: dict[int, object]) -> None:
        self.behaviour = behaviour
        self.calls: list[int] = []

    def connection(self, host: str, port: int, purpose: str = "control") -> "Voters":
        self.port = port
        return self

    async def call(self, api_key, body, timeout=30.0, version=None):
        node = self.port - 9000
        self.calls.append(node)
        outcome = self.behaviour[node]
        if outcome is HANGS:
            async with asyncio.timeout(timeout):
                await asyncio.Event().wait()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def test_calls_move_past_a_dead_voter_and_a_follower_to_the_leader():
    voters = Voters({0: ConnectionRefusedError(), 1: Answer(ErrorCode.not_controller),
                     2: Answer(ErrorCode.none)})
    leadership = ActiveController(VOTERS)
    response = await leadership.connection(voters).call(ApiKey.BROKER_HEARTBEAT, None, 5)
    assert response.error_code == ErrorCode.none
    assert voters.calls == [0, 1, 2]
    assert (leadership.leader_id, leadership.known) == (2, True)
    # The next call goes straight to it.
    await leadership.connection(voters).call(ApiKey.BROKER_HEARTBEAT, None, 5)
    assert voters.calls[-1] == 2 and len(voters.calls) == 4


async def test_without_a_leader_the_refusal_is_returned_once_time_is_up():
    voters = Voters({n: Answer(ErrorCode.not_controller) for n in VOTERS})
    leadership = ActiveController(VOTERS)
    response = await leadership.connection(voters).call(ApiKey.BROKER_HEARTBEAT, None, 0.3)
    assert response.error_code == ErrorCode.not_controller
    assert set(voters.calls) == {0, 1, 2} and not leadership.known


async def test_a_call_hung_on_a_cut_off_leader_follows_the_new_one_at_once():
    voters = Voters({0: HANGS, 1: Answer(ErrorCode.none), 2: HANGS})
    leadership = ActiveController(VOTERS)
    started = time.monotonic()
    heartbeat = asyncio.create_task(
        leadership.connection(voters).call(ApiKey.BROKER_HEARTBEAT, None, 5))
    await asyncio.sleep(0.1)
    assert not heartbeat.done()
    leadership.elected(1, 2)  # this node's voter saw 1 win epoch 2
    response = await heartbeat
    assert response.error_code == ErrorCode.none and voters.calls == [0, 1]
    assert time.monotonic() - started < 1


async def test_attempt_s_leaves_a_hung_voter_for_the_next():
    voters = Voters({0: HANGS, 1: Answer(ErrorCode.none), 2: HANGS})
    leadership = ActiveController(VOTERS)
    started = time.monotonic()
    response = await leadership.connection(voters).call(ApiKey.FETCH, None, 5, attempt_s=0.2)
    assert response.error_code == ErrorCode.none and voters.calls == [0, 1]
    assert time.monotonic() - started < 1 and leadership.leader_id == 1


async def test_a_voter_never_guesses_itself_as_the_leader():
    voters = Voters({0: ConnectionRefusedError(), 1: ConnectionRefusedError(),
                     2: Answer(ErrorCode.none)})
    leadership = ActiveController(VOTERS, own_id=1)
    response = await leadership.connection(voters).call(ApiKey.CREATE_TOPICS, None, 5)
    assert response.error_code == ErrorCode.none and voters.calls == [0, 2]
    leadership.elected(1, 3)  # known, not guessed: then it is itself
    assert leadership.leader_id == 1


async def test_a_just_elected_voter_asks_itself_again_until_its_controller_is_active():
    voters = Voters({0: Answer(ErrorCode.none), 1: Answer(ErrorCode.not_controller),
                     2: Answer(ErrorCode.none)})
    leadership = ActiveController(VOTERS, own_id=1)
    leadership.elected(1, 1)
    call = asyncio.create_task(
        leadership.connection(voters).call(ApiKey.BROKER_REGISTRATION, None, 5))
    await asyncio.sleep(0.2)
    voters.behaviour[1] = Answer(ErrorCode.none)  # active now
    assert (await call).error_code == ErrorCode.none
    assert set(voters.calls) == {1}


@dataclass(frozen=True)
class TopicResult:
    name: str
    error_code: ErrorCode


@dataclass(frozen=True)
class PerTopicAnswer:
    """A CreateTopics-like answer: no top-level error code, one per entry."""

    topics: tuple[TopicResult, ...]


async def test_entries_refused_with_not_controller_move_on_to_the_next_voter():
    """A voter whose controller is not active answers a forwarded CreateTopics with
    NOT_CONTROLLER per topic (broker.handlers.admin): the call tries the next voter."""
    refused = PerTopicAnswer((TopicResult("t", ErrorCode.not_controller),))
    created = PerTopicAnswer((TopicResult("t", ErrorCode.none),))
    voters = Voters({0: refused, 1: created, 2: refused})
    leadership = ActiveController(VOTERS)
    response = await leadership.connection(voters).call(ApiKey.CREATE_TOPICS, None, 5)
    assert response == created and voters.calls == [0, 1]
