"""ControllerChannel and the forwarding of controller requests: an admin change stands once
the controller committed it; concurrent creations of one topic are one request; a request
another node forwarded is never forwarded again."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from broker.handlers.admin import _on_controller
from broker.handlers.registry import RequestContext
from broker.services import ControllerChannel
from protocol.apis import ApiKey
from protocol.framing import RequestHeader


class _SlowFollower:
    """A broker still applying a large metadata change (thousands of partitions)."""

    async def catch_up(self) -> None:
        raise TimeoutError


async def test_a_broker_slow_to_apply_metadata_still_answers(caplog):
    channel = ControllerChannel(None, None, _SlowFollower())
    with caplog.at_level(logging.WARNING):
        await channel.catch_up()  # returns: the request's answer goes out
    assert "before this broker applied the latest metadata" in caplog.text


class _Controller:
    """The network side of the channel: counts the CreateTopics it is sent."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, api_key, request, timeout, version=None):
        self.calls += 1
        await asyncio.sleep(0.05)
        return SimpleNamespace(topics=(SimpleNamespace(error_code=ErrorCode.none),))


async def test_concurrent_creations_of_one_topic_are_one_request():
    """The first produces to a diskless topic ask for the coordinator's topic hundreds at
    once: one CreateTopics goes to the controller, every caller gets its outcome."""
    controller = _Controller()
    channel = ControllerChannel(None, controller, None)
    outcomes = await asyncio.gather(*(channel.create_topic("__diskless-metadata", 1, 3)
                                      for _ in range(200)))
    assert controller.calls == 1 and set(outcomes) == {ErrorCode.none}
    await channel.create_topic("__diskless-metadata", 1, 3)  # a later one asks again
    assert controller.calls == 2


class _InactiveVoter:
    """A voter's channel while its controller is not active (an election under way)."""

    controller = object()

    def __init__(self) -> None:
        self.forwarded = []

    async def becomes_local(self) -> bool:
        return False

    async def forward(self, header, request):
        self.forwarded.append(request)
        return "answered by the voter it takes for the leader"

    async def catch_up(self) -> None:
        pass


@pytest.mark.parametrize("broker_node, answer", [
    (None, "answered by the voter it takes for the leader"),  # a client's request
    (-1, "answered by the voter it takes for the leader"),  # `kipper cluster` tools
    (2, "NOT_CONTROLLER from here"),  # forwarded by broker 2: never forwarded again
])
async def test_a_forwarded_request_is_never_forwarded_again(broker_node, answer):
    channel = _InactiveVoter()
    ctx = RequestContext(RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "c"),
                         SimpleNamespace(controller_channel=channel), "peer", broker_node)

    async def handle_locally(ctx, request):
        return "NOT_CONTROLLER from here"  # the inactive controller's operations refuse

    assert await _on_controller(ctx, "request", handle_locally) == answer
    assert len(channel.forwarded) == (answer != "NOT_CONTROLLER from here")
