"""The stall watch (loop_stall_log_ms) names where the event loop was held."""

from __future__ import annotations

import asyncio
import logging
import time

from broker.stall_watch import StallWatch


def hold_the_loop_for_a_while() -> None:
    time.sleep(0.4)


async def test_a_held_loop_is_logged_once_with_the_stack_that_held_it(caplog):
    watch = asyncio.create_task(StallWatch(0.05).run())
    await asyncio.sleep(0.1)
    with caplog.at_level(logging.WARNING, logger="broker.stall_watch"):
        hold_the_loop_for_a_while()
        await asyncio.sleep(0.1)
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    stalls = [r.getMessage() for r in caplog.records]
    assert len(stalls) == 1, stalls
    assert "hold_the_loop_for_a_while" in stalls[0]
