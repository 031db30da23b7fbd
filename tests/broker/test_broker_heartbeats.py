"""A broker's heartbeats to the controller (broker.metadata_follower): every
broker_heartbeat_interval_ms, and at once when its data directory fills or has room again,
so the controller moves the leaderships of a full disk without waiting for the next one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from broker.metadata_follower import MetadataFollower
from protocol.apis import ApiKey
from replication.cluster_metadata import MetadataImage


class Controller:
    """Stands in for the connection to the active controller: keeps the heartbeats."""

    def __init__(self) -> None:
        self.heartbeats: list = []
        self.arrived = asyncio.Event()

    async def call(self, api_key: ApiKey, request, timeout: float):
        assert api_key == ApiKey.BROKER_HEARTBEAT
        self.heartbeats.append(request)
        self.arrived.set()
        return SimpleNamespace(error_code=ErrorCode.none, is_fenced=False)


async def next_heartbeat(controller: Controller):
    controller.arrived.clear()
    async with asyncio.timeout(10):
        await controller.arrived.wait()
    return controller.heartbeats[-1]


async def test_a_full_data_directory_is_reported_at_once_then_its_recovery():
    controller, full = Controller(), False
    follower = MetadataFollower(1, controller, None, MetadataImage(), lambda record: None,
                                heartbeat_interval_s=3600, log_dir_full=lambda: full)
    beating = asyncio.create_task(follower._heartbeat_loop())
    try:
        await asyncio.sleep(0.01)
        assert controller.heartbeats == []  # the first is an hour away
        full = True
        assert (await next_heartbeat(controller)).offline_log_dirs
        full = False
        assert not (await next_heartbeat(controller)).offline_log_dirs
        assert len(controller.heartbeats) == 2
    finally:
        beating.cancel()


async def test_heartbeats_come_every_interval():
    controller = Controller()
    follower = MetadataFollower(1, controller, None, MetadataImage(), lambda record: None,
                                heartbeat_interval_s=0.05)
    beating = asyncio.create_task(follower._heartbeat_loop())
    try:
        for _ in range(3):
            assert not (await next_heartbeat(controller)).offline_log_dirs
    finally:
        beating.cancel()
