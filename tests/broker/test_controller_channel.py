"""ControllerChannel: an admin change stands once the controller committed it."""

from __future__ import annotations

import logging

from broker.services import ControllerChannel


class _SlowFollower:
    """A broker still applying a large metadata change (thousands of partitions)."""

    async def catch_up(self) -> None:
        raise TimeoutError


async def test_a_broker_slow_to_apply_metadata_still_answers(caplog):
    channel = ControllerChannel(None, None, _SlowFollower())
    with caplog.at_level(logging.WARNING):
        await channel.catch_up()  # returns: the request's answer goes out
    assert "before this broker applied the latest metadata" in caplog.text
