"""The leader's upload loop wakes for appends, not on a clock: a broker with no
active-tiered partition written to does not look every ``upload_interval_ms``."""

import asyncio
from types import SimpleNamespace

from storage.active_tiered.uploader import WalUploader


async def test_upload_rounds_follow_appends_only():
    uploader = WalUploader(store=None, bucket="b", key_prefix="p/", interval_ms=5,
                           max_bytes=1 << 20, metrics=None, timeout_ms=1000)
    rounds = 0

    async def upload_once() -> bool:
        nonlocal rounds
        rounds += 1
        return False

    uploader.upload_once = upload_once
    uploader.start(publish=None, leaders=None)
    try:
        await asyncio.sleep(0.1)
        assert rounds == 0  # 20 intervals, nothing appended
        uploader.appended(SimpleNamespace(upload=SimpleNamespace(waiting_since=None)), 100)
        await asyncio.sleep(0.1)
        assert rounds == 1
        uploader.healthy = False  # a failed PUT: the next round tries again
        uploader.appended(SimpleNamespace(upload=SimpleNamespace(waiting_since=None)), 100)
        await asyncio.sleep(0.1)
        assert rounds > 3
    finally:
        await uploader.stop()
