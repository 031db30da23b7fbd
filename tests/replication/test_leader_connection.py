"""How a node finds the active controller among the voters (replication.raft.leader_connection):
a refused connection or NOT_CONTROLLER moves on, to the leader an answer names if any."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from replication.raft.leader_connection import ActiveController

VOTERS = {0: ("127.0.0.1", 9000), 1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}


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
