"""The controller's broker lifecycle: registered fenced, unfenced when ready, as in KRaft."""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from coordinator.controller import Controller, ControllerSettings
from replication.cluster_metadata import NO_LEADER


async def test_a_broker_leads_nothing_until_it_is_ready_and_is_not_fenced_while_loading(
        tmp_path, caplog):
    controller = Controller(tmp_path, ControllerSettings(session_timeout_ms=200))
    await controller.start()
    try:
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        assert controller.image.brokers[0].fenced
        assert await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False) \
            == (ErrorCode.none, False)
        await controller.create_topic("t", 1, 1, {})

        def leader() -> int:
            return controller.image.topics["t"].partitions[0].leader

        assert leader() == 0

        # A restart: controlled shutdown, then registration while its logs load.
        await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=True)
        assert leader() == NO_LEADER
        epoch = await controller.register_broker(0, "127.0.0.1", 9092, "az1")
        with caplog.at_level(logging.WARNING, logger="coordinator.controller"):
            # Loading takes longer than a session, heartbeats late or not at all.
            await asyncio.sleep(0.5)
            assert await controller.heartbeat(0, epoch, want_fence=True, want_shut_down=False) \
                == (ErrorCode.none, True)
            await asyncio.sleep(0.5)
        assert "fencing broker" not in caplog.text
        assert leader() == NO_LEADER

        assert await controller.heartbeat(0, epoch, want_fence=False, want_shut_down=False) \
            == (ErrorCode.none, False)
        assert leader() == 0
    finally:
        await controller.stop()
