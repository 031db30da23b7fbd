"""The broker process: controller, logs, partitions and the Kafka listener."""

from __future__ import annotations

import asyncio
import logging
import time

from coordinator.controller import Controller
from coordinator.group_config import GroupConfig
from coordinator.group_coordinator import GroupCoordinator
from coordinator.offsets_store import OffsetsStore
from storage.manager import LogManager

from .config import BrokerConfig, split_host_port
from .connection import Connection
from .handlers.producer_id import ProducerIdAllocator
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.controller = Controller(config.data_dir / "__cluster_metadata",
                                     config.default_partitions, config.default_replication_factor)
        self.controller_id = config.node_id
        self.logs = LogManager(config.data_dir)
        self.replicas = ReplicaManager(config.node_id, self.image, self.logs,
                                       config.topic_config_defaults())
        self.controller.listeners.append(self.replicas.on_metadata_record)
        group_config = GroupConfig()
        self.group_coordinator = GroupCoordinator(group_config, OffsetsStore(
            config.node_id, self.controller, self.replicas, group_config))
        # After the replica manager's listener: it creates the partitions this one looks at.
        self.controller.listeners.append(lambda _: self.group_coordinator.on_metadata_change())
        self.producer_ids = ProducerIdAllocator(config.data_dir / "producer_id_block",
                                                config.node_id)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._background: list[asyncio.Task] = []
        self.bound_port = 0

    @property
    def image(self):
        return self.controller.image

    async def start(self) -> None:
        host, port = self.config.host_port
        self._server = await asyncio.start_server(self._accept, host, port, limit=1 << 20)
        self.bound_port = self._server.sockets[0].getsockname()[1]
        advertised_host, advertised_port = split_host_port(
            self.config.advertised_listener or f"{host}:{self.bound_port}")
        if advertised_port == 0:
            advertised_port = self.bound_port
        self.controller.register_broker(self.config.node_id, advertised_host, advertised_port,
                                        self.config.rack)
        started = time.monotonic()
        self.replicas.load_all()
        log.info("loaded %d partitions in %.2f s", len(self.replicas.partitions),
                 time.monotonic() - started)
        await self.group_coordinator.start()
        self._background = [
            asyncio.create_task(self.logs.run_retention(
                self.config.log_retention_check_interval_ms / 1000)),
            asyncio.create_task(self.logs.run_flush(self.config.log_flush_interval_ms / 1000)),
        ]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await Connection(self, reader, writer).run()
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting, finish connections, close logs cleanly."""
        if self._server is not None:
            self._server.close()
        # Before connections are cancelled: it answers the JoinGroup/SyncGroup requests
        # still waiting, which their connections' response senders wait for.
        await self.group_coordinator.stop()
        for task in list(self._connections) + self._background:
            task.cancel()
        await asyncio.gather(*self._connections, *self._background, return_exceptions=True)
        await self.replicas.close()
        log.info("broker %d stopped", self.config.node_id)
