"""The metadata log's writes (coordinator.metadata_log): durable before they return, with
their fsyncs off the event loop."""

from __future__ import annotations

import asyncio
import threading

from coordinator.metadata_log import MetadataLog


async def test_the_fsyncs_run_on_a_thread_and_nothing_changes_the_log_meanwhile(tmp_path):
    log = MetadataLog(tmp_path)
    flushed_in, release = [], threading.Event()
    blocking_flush = log.log.flush_blocking

    def slow_flush() -> None:  # a busy file system: the fsyncs take a while
        flushed_in.append(threading.current_thread())
        release.wait(10)
        blocking_flush()

    log.log.flush_blocking = slow_flush
    appending = asyncio.create_task(log.append([{"type": "unfence_broker", "node_id": 0}], 1))
    while not flushed_in:
        await asyncio.sleep(0.01)  # the event loop keeps running while the fsyncs wait
    assert flushed_in[0] is not threading.main_thread()
    truncating = asyncio.create_task(log.truncate_to(0))
    await asyncio.sleep(0.05)
    assert not truncating.done() and log.log_end_offset == 1  # waits for the flush
    release.set()
    assert await appending == 0
    await truncating
    assert log.log_end_offset == 0
    await log.close()
