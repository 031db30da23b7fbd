"""A kipper node: the Kafka listener, and the broker and/or controller roles behind it."""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import socket
import ssl
import time
import uuid
from collections.abc import Awaitable

from coordinator.controller import Controller, ControllerError, ControllerQuorum, ControllerSettings
from coordinator.diskless import (
    BatchCoordinator,
    CheckpointSettings,
    CheckpointStore,
    Housekeeping,
    HousekeepingSettings,
)
from coordinator.group.rack_aware import ClusterTopics
from coordinator.group.service import GroupCoordinator
from coordinator.internal_topic import (
    OFFSETS_TOPIC,
    SHARE_GROUP_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
    InternalTopicLog,
)
from coordinator.transaction.markers import MarkerWriter, marker_sender
from coordinator.transaction.partition_adder import TransactionPartitionAdder
from coordinator.transaction.service import TransactionCoordinator
from coordinator.transaction_config import TransactionConfig
from coordinator.group.timer import AsyncioTimer
from protocol.internal import ClusterCredentials, InternalApiKey
from replication.active_tiered import BrokerReplicaLink
from replication.shared_streams import BrokerStreamMetadata
from replication.cluster_metadata import DISKLESS_METADATA_TOPIC, MetadataImage
from replication.fetch_session import FetchSessionCache
from replication.frame_reader import FrameProtocol, FrameReader, start_frame_server
from replication.node_client import NodeClient
from replication.raft import QuorumSettings, parse_voters
from replication.raft.leader_connection import ActiveController
from replication.replica_manager import ReplicaManager
from replication.scram_credentials import (
    ScramCredential,
    ScramMechanism,
    credential_from_password,
)
from storage.active_tiered import ActiveTiered
from storage.shared import SharedStorage
from storage.diskless import ReadCache, WalWriter
from storage.diskless.log import log_factory as diskless_log_factory
from storage.log_cleaner import CleanerSettings
from storage.manager import LogManager
from storage.objectstore import ObjectStore, ObjectStoreConfig, ObjectStoreUnavailable

from .broker_metrics import (
    BrokerMetrics,
    ConsumerLag,
    EventLoopLag,
    LogCleanerMetrics,
    RequestMetrics,
    TopicMetrics,
)
from .config import BrokerConfig, split_host_port
from .connection import Connection
from .diskless_metrics import DisklessMetrics
from .handlers.txn_markers import local_marker_writer
from .heap import Heap
from .listening import binding
from .metadata_follower import Endpoint, MetadataFollower
from .metrics import MetricsServer
from .producer_ids import ProducerIdAllocator
from .response_memory import ResponseMemory
from .tls_listener import SocketAcceptor
from .security.listener_security import (
    AuthenticationFailures,
    ListenerSecurity,
    inter_broker_security,
    listener_config,
    listener_securities,
)
from .security.listeners import SecurityProtocol
from .security.tls import PrincipalMappingError, peer_principal
from .services import BrokerServices, ControllerChannel
from .share_groups import ShareGroupParts, group_configs, share_group_parts
from .stall_watch import StallWatch
from .static_configs import dynamic_configs
from .traffic import NetworkTraffic, node_client_id

log = logging.getLogger(__name__)
# Each step of a stop (but closing logs) gets this long: see Broker.stop.
STOP_STEP_TIMEOUT_S = 2.0
# How long a starting broker waits for its object store to answer.
OBJECT_STORE_START_TIMEOUT_S = 60.0
# Kafka's ids of the security protocols, as BrokerRegistration carries them.
_PROTOCOL_IDS = {SecurityProtocol.PLAINTEXT: 0, SecurityProtocol.SSL: 1,
                 SecurityProtocol.SASL_PLAINTEXT: 2, SecurityProtocol.SASL_SSL: 3}
# The id `--controller host:port` leaves its node with (no quorum to name it).
UNKNOWN_NODE = -1
# The internal topics whose partition leaders coordinate (groups, transactions).
COORDINATOR_TOPICS = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        # What this broker knows of the cluster: applied from the controller's metadata log.
        self.image = MetadataImage()
        # Effective broker configs and topic defaults: static settings under dynamic ones.
        self.dynamic_configs = dynamic_configs(config, self.image)
        # Group configs: set on each group (the metadata image) over these settings.
        self.group_configs = group_configs(config, self.image)
        # Peers' racks come from the metadata (a controller-only node's: its controller's).
        self.traffic = NetworkTraffic(config.rack, self.image)
        if not config.cluster_secret:
            log.info("no cluster_secret (KIPPER_CLUSTER_SECRET) set: node %d accepts "
                     "broker-only requests from itself alone, so no other node can join it",
                     config.node_id)
        # What this node proves its membership with, and checks its peers' proofs against.
        self.credentials = ClusterCredentials(
            config.node_id, config.cluster_secret or secrets.token_hex(32))
        # The listeners, each with its TLS context and SASL mechanisms; refused here, before
        # anything is bound, when a setting is wrong.
        self.listeners = listener_config(config)
        self.failed_authentications = AuthenticationFailures()
        self._bootstrap_credentials: dict[tuple[str, ScramMechanism], ScramCredential] = {}
        self.listener_securities = listener_securities(
            config, self.listeners, self._scram_credential, self.failed_authentications)
        self.nodes = NodeClient(node_client_id(config.node_id), self.credentials, self.traffic,
                                inter_broker_security(config, self.listeners))
        # The controller quorum: the voters named, or a quorum of one (this node, unless
        # it is given another's address).
        self.voters = (parse_voters(config.controller_quorum_voters)
                       if config.controller_quorum_voters else {})
        self.controller: Controller | None = None
        if (config.node_id in self.voters) if self.voters else config.controller is None:
            self.controller = self._controller()
            # The controller's image is a copy of the metadata of its own, applied (and on a
            # restart replayed) before the broker's: frozen out of the collector's sight the
            # same way (while it replayed 10,000 partitions the node stood 0.3 s at one
            # allocation, a full collection by all signs, and the voters elected again).
            controller_heap = Heap()
            self.controller.applier.listeners.append(
                lambda offset, record, result: controller_heap.added())
            if not config.broker_role:
                self.traffic.image = self.controller.image
        self.metrics: MetricsServer | None = None
        if config.metrics_listener is not None:
            self.metrics = MetricsServer(config.metrics_listener,
                                         {"node_id": config.node_id, "rack": config.rack})
            self.metrics.add_source("network", self.traffic)
        self.logs = LogManager(config.data_dir, config.log_dir_reserved_bytes, CleanerSettings(
            threads=config.log_cleaner_threads,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            backoff_ms=config.log_cleaner_backoff_ms,
            io_max_bytes_per_second=self.cleaner_io_max_bytes_per_second))
        # Shared by the engines that keep data in object storage (active-tiered, diskless).
        self.object_store: ObjectStore | None = None
        self.active_tiered: ActiveTiered | None = None
        self.shared_storage: SharedStorage | None = None
        if config.broker_role and config.s3_endpoint is not None:
            self.object_store = ObjectStore(ObjectStoreConfig(
                endpoint_url=config.s3_endpoint, access_key=config.s3_access_key,
                secret_key=config.s3_secret_key, az=config.rack or "az1",
                latency_profile=config.s3_latency_profile,
                request_timeout_s=config.s3_request_timeout_ms / 1000))
            if self.metrics is not None:
                self.metrics.add_object_store(self.object_store)
            self.active_tiered = ActiveTiered(
                self.object_store, node_id=config.node_id, az=self.object_store.config.az,
                key_prefix=config.s3_key_prefix,
                upload_interval_ms=config.active_tiered_upload_interval_ms,
                upload_max_bytes=config.active_tiered_upload_max_bytes,
                upload_timeout_ms=config.active_tiered_upload_timeout_ms,
                download_timeout_ms=config.active_tiered_download_timeout_ms)
            self.logs.register_engine("active-tiered", self.active_tiered.open_log)
            self.shared_storage = SharedStorage(
                self.object_store, node_id=config.node_id, key_prefix=config.s3_key_prefix,
                wal_interval_ms=config.shared_wal_interval_ms,
                wal_max_bytes=config.shared_wal_max_bytes,
                data_object_interval_ms=config.shared_data_object_interval_ms)
            self.logs.register_engine("shared", self.shared_storage.open_log)
            if self.metrics is not None:
                self.metrics.add_source("active_tiered", self.active_tiered.metrics)
        self.capture = None
        if config.capture_trace_dir:
            from .capture import TraceCapture  # pyarrow: half a second of every start
            self.capture = TraceCapture(config.capture_trace_dir)
        self.replicas: ReplicaManager | None = None
        self.batch_coordinator: BatchCoordinator | None = None
        self.wal_writer: WalWriter | None = None
        self.housekeeping: Housekeeping | None = None
        self.follower: MetadataFollower | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self.share: ShareGroupParts | None = None
        self.producer_ids = ProducerIdAllocator(
            lambda: self.controller_channel.allocate_producer_ids(config.node_id,
                                                                  self.follower.epoch))
        self.controller_channel: ControllerChannel | None = None
        # What the request handlers use; connections wait for it (see _accept).
        self.services: BrokerServices | None = None
        self._services_ready = asyncio.Event()
        # Plaintext listeners are asyncio servers; TLS listeners accept sockets themselves.
        self._servers: list[asyncio.base_events.Server | SocketAcceptor] = []
        self._connections: set[asyncio.Task] = set()
        self.response_memory = ResponseMemory(config.max_queued_response_bytes)
        self._background: list[asyncio.Task] = []
        self.bound_port = 0
        self.request_metrics = RequestMetrics()
        self.topic_metrics = TopicMetrics()
        self.loop_lag = EventLoopLag()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        if self.metrics is not None:
            lag = ConsumerLag(lambda: self.group_coordinator, lambda: self.replicas, self.image,
                              self.nodes)
            self.metrics.refresh_before_scrape(lag.refresh)
            broker_metrics = BrokerMetrics(
                self.request_metrics, self.topic_metrics, lag, self.loop_lag,
                self.response_memory, lambda: len(self._connections), lambda: self.replicas,
                self.controller, self.fetch_sessions, self.failed_authentications)
            self.metrics.refresh_before_scrape(broker_metrics.refresh)
            self.metrics.add_source("broker", broker_metrics)
            self.metrics.add_source("log_cleaner", LogCleanerMetrics(self.logs.cleaner.metrics))

    def _controller(self) -> Controller:
        config = self.config
        return Controller(config.data_dir, ControllerSettings(
            default_partitions=config.default_partitions,
            default_replication_factor=config.default_replication_factor,
            session_timeout_ms=config.broker_session_timeout_ms,
            unclean_leader_election=config.unclean_leader_election,
            default_storage_mode=config.default_storage_mode,
            auto_leader_rebalance=config.auto_leader_rebalance_enable,
            leader_imbalance_per_broker_percentage=(
                config.leader_imbalance_per_broker_percentage),
            leader_imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
            snapshot_max_new_record_bytes=(
                config.metadata_log_max_record_bytes_between_snapshots),
            snapshot_max_interval_s=config.metadata_log_max_snapshot_interval_ms / 1000),
            ControllerQuorum(config.node_id, self.voters or None, self.nodes, QuorumSettings(
                fetch_timeout_s=config.controller_quorum_fetch_timeout_ms / 1000,
                fetch_jitter_s=0.3 * config.controller_quorum_fetch_timeout_ms / 1000,
                election_timeout_s=config.controller_quorum_election_timeout_ms / 1000,
                check_quorum_timeout_s=1.5 * config.controller_quorum_fetch_timeout_ms / 1000)))

    async def start(self) -> None:
        if self.config.loop_stall_log_ms > 0:  # from the start: loading stalls too
            self._background.append(asyncio.create_task(
                StallWatch(self.config.loop_stall_log_ms / 1000).run()))
        buckets: asyncio.Task | None = None
        if self.object_store is not None:
            await self.object_store.start()
            # `kipper cluster up` starts the object store with the brokers: while it starts,
            # this node's listeners and controller quorum start too (a restarting cluster
            # elects its controller meanwhile); the engines that use it wait for it.
            buckets = asyncio.create_task(self._ensure_buckets())
        try:
            await self._start(buckets)
        finally:
            if buckets is not None and not buckets.done():
                buckets.cancel()  # start failed before it needed them

    async def _start(self, buckets: asyncio.Task | None) -> None:
        ports = {}
        for security in self.listener_securities:
            listener = security.listener
            flag = "--listeners" if self.config.listeners else "--listener"
            with binding(listener.address, flag):
                if security.tls is None:
                    server = await start_frame_server(
                        functools.partial(self._accept, security, principal="User:ANONYMOUS"),
                        listener.bind_host, listener.port)
                    ports[listener.name] = server.sockets[0].getsockname()[1]
                else:
                    server = await SocketAcceptor.bind(
                        listener.bind_host, listener.port,
                        functools.partial(self._accepted_tls, security))
                    ports[listener.name] = server.port
            self._servers.append(server)
        # Ports and host names filled in: what is registered and printed.
        self.listeners = self.listeners.with_bound_ports(ports)
        self.bound_port = ports[self.listeners.listeners[0].name]
        # The active controller is found among the voters; without any, at the address
        # given, or this node itself (a quorum of one), on its own inter-broker listener.
        own = self.listeners.listener(self.listeners.inter_broker.name)
        if self.voters:
            voters = self.voters
        elif self.controller is not None:
            voters = {self.config.node_id: (own.host or "127.0.0.1", own.port)}
        else:  # another node's quorum of one; its id is not known here, nor needed
            voters = {UNKNOWN_NODE: split_host_port(self.config.controller)}
        self.active_controller = ActiveController(
            voters, self.config.node_id if self.controller is not None else None)
        if self.controller is not None:
            # A voter knows who won an election before any call to the old leader fails,
            # which in a network partition it never does: it hangs.
            self.controller.raft.leader_listeners.append(self.active_controller.elected)
        controller_connection = self.active_controller.connection(self.nodes)
        # ISR changes have a connection of their own: ISR changes queued behind one another
        # must not hold up the heartbeats (a broker whose heartbeats wait is fenced).
        self.replicas = ReplicaManager(
            self.config.node_id, self.image, self.logs, self.dynamic_configs,
            self.nodes, self.active_controller.connection(self.nodes, "isr-changes"),
            self.config.replica_lag_time_max_ms)
        if self.config.broker_role:
            self.follower = MetadataFollower(
                self.config.node_id, controller_connection,
                # Long polls get their own connection so heartbeats never queue behind them.
                self.active_controller.connection(self.nodes, "metadata-fetch"), self.image,
                self._on_metadata_record,
                # At least four per session timeout (Kafka's defaults: 2 s and 9 s): a cluster
                # set up to fail over fast shortens the session timeout alone.
                min(self.config.broker_heartbeat_interval_ms,
                    self.config.broker_session_timeout_ms / 4) / 1000,
                log_dir_full=self.logs.disk_space.is_full,
                quorum_fetch_timeout_s=self.config.controller_quorum_fetch_timeout_ms / 1000,
                local=self.controller)
            self.replicas.opened_listeners.append(self.follower.heap.added)
            self.replicas.dropped_listeners.append(self.follower.heap.dropped)
        self.controller_channel = ControllerChannel(
            self.controller, self.active_controller.connection(self.nodes, "forwarding"),
            self.follower)
        if self.controller is not None:
            await self.controller.start()
            if self.controller.active:  # a quorum of one: before any client or broker comes
                await self.controller.bootstrap_scram_users(self.config.sasl_scram_bootstrap_users)
            else:
                self._background.append(asyncio.create_task(self._bootstrap_scram_users()))
        if buckets is not None:
            await buckets
        if self.config.broker_role and self.object_store is not None:
            self._start_diskless()
        if self.config.broker_role:
            group_config = self.group_configs.group
            self.group_coordinator = GroupCoordinator(group_config, InternalTopicLog(
                self.image, self.controller_channel.create_topic, self.replicas,
                group_config.offsets_topic()), topics=ClusterTopics(
                    self.image, lambda topic: self.replicas.log_config(topic).storage_mode),
                consumer_group_settings=self.group_configs.consumer_group)
            self.transaction_coordinator = self._transaction_coordinator()
            self.share = share_group_parts(self.config, self.image, self.replicas,
                                           self.controller_channel.create_topic, self.nodes,
                                           self.group_coordinator, self.group_configs)
        self._serve_requests()
        if self.config.broker_role:
            await self.follower.start(self._endpoints(), self.config.rack)
            self.replicas.broker_epoch = self.follower.epoch
            self.replicas.start()
            if self.active_tiered is not None:
                await self.active_tiered.start(BrokerReplicaLink(
                    self.replicas, self.image, self.nodes, self.controller_channel.create_topic))
            if self.shared_storage is not None:
                await self.shared_storage.start(BrokerStreamMetadata(
                    self.config.node_id, self.image,
                    self.active_controller.connection(self.nodes, "shared-streams")))
            await self.group_coordinator.start()
            await self.transaction_coordinator.start()
            await self.share.start()
            log.info("broker %d joined with %d partitions", self.config.node_id,
                     self.replicas.hosted)
        self._background += [
            asyncio.create_task(self.logs.run_retention(
                self.config.log_retention_check_interval_ms / 1000)),
            asyncio.create_task(self.logs.run_flush(self.config.log_flush_interval_ms / 1000)),
            asyncio.create_task(self.logs.run_cleaner()),
            asyncio.create_task(self.logs.run_producer_expiration(
                self.config.producer_id_expiration_check_interval_ms / 1000,
                self.config.producer_id_expiration_ms)),
            asyncio.create_task(self.loop_lag.probe()),
        ]
        if self.metrics is not None:
            with binding(self.config.metrics_listener, "--metrics-listener"):
                await self.metrics.start()

    async def _ensure_buckets(self) -> None:
        """The object store may still be starting (`kipper cluster up` starts it with the
        brokers, not before them): unreachable, it is asked again for a while."""
        deadline = time.monotonic() + OBJECT_STORE_START_TIMEOUT_S
        while True:
            try:
                await self.object_store.ensure_buckets([self.object_store.config.az])
                return
            except ObjectStoreUnavailable as e:
                if time.monotonic() > deadline:
                    raise
                log.info("object store not reachable yet: %s", e)
                await asyncio.sleep(0.2)

    def _endpoints(self) -> tuple[Endpoint, ...]:
        """The advertised listeners to register, the inter-broker one first."""
        inter_broker = self.listeners.inter_broker
        return tuple(Endpoint(listener.name, listener.host, listener.port,
                              _PROTOCOL_IDS[listener.protocol])
                     for listener in (inter_broker, *(listener for listener in
                                                      self.listeners.advertised
                                                      if listener != inter_broker)))

    def _scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """A user's SCRAM credential, from the freshest image this node has: the
        controller's own if it runs it (a broker authenticating to it reads nothing before)."""
        image = self.controller.image if self.controller is not None else self.image
        found = image.scram_credentials.lookup(user, mechanism)
        if found is None and user in self.config.sasl_scram_bootstrap_users:
            # Before any controller is active, voters authenticate each other (to elect
            # one) with the bootstrap users every node is given: Kafka's formatted bootstrap
            # snapshot plays that part.
            key = (user, mechanism)
            if key not in self._bootstrap_credentials:
                self._bootstrap_credentials[key] = credential_from_password(
                    mechanism, self.config.sasl_scram_bootstrap_users[user])
            found = self._bootstrap_credentials[key]
        return found

    def cleaner_io_max_bytes_per_second(self) -> float:
        """The log cleaner's I/O limit, read before each throttling decision (so that the
        dynamic broker config `log.cleaner.io.max.bytes.per.second` can apply at once)."""
        return self.dynamic_configs.broker_number("log.cleaner.io.max.bytes.per.second")

    def _serve_requests(self) -> None:
        """Hand the handlers their services: from now on connections are served."""
        self.services = BrokerServices(
            config=self.config,
            image=self.image, replicas=self.replicas, dynamic_configs=self.dynamic_configs,
            group_configs=self.group_configs,
            controller=self.controller,
            controller_channel=self.controller_channel,
            group_coordinator=self.group_coordinator,
            transaction_coordinator=self.transaction_coordinator,
            batch_coordinator=self.batch_coordinator,
            producer_ids=self.producer_ids, capture=self.capture,
            storage_modes=self.logs.engines.keys(), topic_metrics=self.topic_metrics,
            fetch_sessions=self.fetch_sessions, share=self.share,
            transaction_partitions=None if self.transaction_coordinator is None
            else TransactionPartitionAdder(self.transaction_coordinator, self.nodes,
                                           self.config.node_id))
        self._services_ready.set()

    def _transaction_coordinator(self) -> TransactionCoordinator:
        config = TransactionConfig(
            state_log_num_partitions=self.config.transaction_state_log_num_partitions,
            state_log_segment_bytes=self.config.transaction_state_log_segment_bytes,
            max_timeout_ms=self.config.transaction_max_timeout_ms,
            transactional_id_expiration_ms=self.config.transactional_id_expiration_ms,
            abort_timed_out_transaction_cleanup_interval_ms=(
                self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            remove_expired_transaction_cleanup_interval_ms=(
                self.config.transaction_remove_expired_transaction_cleanup_interval_ms))
        timer = AsyncioTimer()
        return TransactionCoordinator(
            config,
            InternalTopicLog(self.image, self.controller_channel.create_topic, self.replicas,
                             config.state_topic()),
            MarkerWriter(self.image, marker_sender(
                self.nodes, self.config.node_id,
                # Handlers are served (and so this broker's own markers written) once the
                # services exist: the coordinator sends none before it starts.
                lambda request: local_marker_writer(self.services, self.config.node_id)(request)),
                config.retry_backoff_ms, timer),
            self.producer_ids.next_id, timer)

    def _start_diskless(self) -> None:
        """The diskless engine: WAL writer, read cache, and this broker's part of the batch
        coordinator (registered before the metadata opens any diskless partition)."""
        config = self.config
        self.batch_coordinator = BatchCoordinator(
            config.node_id, config.data_dir / "diskless-coordinator.sqlite", self.image,
            lambda: self.replicas.partitions.get((DISKLESS_METADATA_TOPIC, 0)),
            lambda host, port, body, timeout_s: self.nodes.connection(
                host, port, "diskless-coordinator").call(
                    InternalApiKey.DISKLESS_COORDINATOR_APPEND, body, timeout_s),
            self.controller_channel.create_topic,
            # Not behind the appends pipelined on the connection above.
            lambda host, port, timeout_s: self.nodes.connection(
                host, port, "diskless-committed-offset").latest_offset(
                    DISKLESS_METADATA_TOPIC, 0, timeout_s),
            config.diskless_catch_up_timeout_ms / 1000,
            CheckpointStore(self.object_store, config.s3_key_prefix), CheckpointSettings(
                config.diskless_coordinator_checkpoint_interval_records,
                config.diskless_coordinator_checkpoint_interval_ms))
        cache = ReadCache(self.object_store, config.diskless_read_cache_max_bytes)
        self.wal_writer = WalWriter(
            self.object_store, self.batch_coordinator, config.s3_key_prefix, config.node_id,
            config.diskless_append_commit_interval_ms, config.diskless_append_buffer_max_bytes,
            cache=cache, hedge_after_s=config.wal_hedge_after_s(),
            commit_per_partition=config.diskless_append_commit_per_partition)
        self.batch_coordinator.on_change.append(self._wake_diskless_readers)
        self.batch_coordinator.start()
        self.housekeeping = Housekeeping(
            self.batch_coordinator, lambda: self.batch_coordinator.is_writable, self.image,
            self.object_store, config.s3_key_prefix,
            self.dynamic_configs, HousekeepingSettings(
                interval_ms=config.diskless_housekeeping_interval_ms,
                object_delete_delay_ms=config.diskless_object_delete_delay_ms,
                orphan_grace_ms=config.diskless_orphan_grace_ms,
                merge_max_object_bytes=config.diskless_merge_max_object_bytes,
                merge_min_objects=config.diskless_merge_min_objects,
                merge_min_age_ms=config.diskless_merge_min_age_ms))
        # Retention of every diskless log runs with the other logs' (LogManager.run_retention).
        self.logs.register_engine("diskless", diskless_log_factory(
            self.batch_coordinator, self.wal_writer, cache,
            lambda topic: str(self.image.topics[topic].topic_id)),
            retention=self.housekeeping.apply_retention,
            producer_expiration=self.housekeeping.expire_producers)
        self.housekeeping.start()
        if self.metrics is not None:
            self.metrics.add_source("diskless", DisklessMetrics(
                self.batch_coordinator, self.wal_writer, cache, self.housekeeping))

    def _wake_diskless_readers(self, changed: set[tuple[str, int]]) -> None:
        for topic_id, index in changed:
            topic = self.image.topics_by_id.get(uuid.UUID(topic_id))
            partition = topic and self.replicas.partitions.get((topic.name, index))
            if partition is not None:
                partition.notify_waiters()

    def _on_metadata_record(self, record: dict) -> None:
        self.dynamic_configs.on_metadata_record(record)
        self.replicas.on_metadata_record(record)
        # After the replica manager: leadership of __consumer_offsets and
        # __transaction_state partitions may move, though not with a partition record of
        # another topic (thousands of them when a large topic is created).
        if record["type"] != "partition" or record["topic"] in COORDINATOR_TOPICS:
            self.group_coordinator.on_metadata_change()
            self.transaction_coordinator.on_metadata_change()
            self.share.on_metadata_change()

    async def _bootstrap_scram_users(self) -> None:
        """The first SCRAM users, written by whichever voter is the first to be active."""
        users = self.config.sasl_scram_bootstrap_users
        while users:
            if self.controller.active:
                try:
                    await self.controller.bootstrap_scram_users(users)
                    return
                except ControllerError:
                    pass  # lost the leadership meanwhile: the next active controller writes them
            await asyncio.sleep(0.1)

    def _accepted_tls(self, security: ListenerSecurity, connection: socket.socket) -> None:
        task = asyncio.get_running_loop().create_task(self._handshake(security, connection))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _handshake(self, security: ListenerSecurity, connection: socket.socket) -> None:
        """The TLS handshake of a TLS listener's connection, bounded in time; a failure is
        logged (one line) and counted, and the connection closed. Then it is served as the
        principal of its client certificate (SSL) or as SASL decides (SASL_SSL)."""
        loop = asyncio.get_running_loop()
        protocol = FrameProtocol()
        reader = protocol.reader
        try:
            peer = "%s:%s" % connection.getpeername()[:2]
        except OSError:
            peer = "unknown"
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, connection, ssl=security.tls,
                ssl_handshake_timeout=self.config.ssl_handshake_timeout_ms / 1000)
            writer = protocol.writer(transport)
            principal = "User:ANONYMOUS"  # SASL_SSL: SASL decides
            if security.protocol is SecurityProtocol.SSL:
                principal = peer_principal(writer.get_extra_info("ssl_object"),
                                           security.principal_mapper)
        except (ssl.SSLError, OSError, TimeoutError, PrincipalMappingError) as error:
            security.failures.add()
            log.warning("closing %s on listener %s: TLS handshake failed: %s", peer,
                        security.name, error or type(error).__name__)
            connection.close()
            return
        except asyncio.CancelledError:
            connection.close()
            return
        await self._accept(security, reader, writer, principal=principal)

    async def _accept(self, security: ListenerSecurity, reader: FrameReader,
                      writer: asyncio.StreamWriter, principal: str) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            # The port is bound before the node has all its parts (its own address is part of
            # them): a connection waits until it can be served.
            await self._services_ready.wait()
            responses = self.response_memory.connection(
                self.config.connection_max_queued_response_bytes)
            await Connection(self.services, self.traffic, responses, self.credentials,
                             self.request_metrics, reader, writer, security, principal).run()
        except asyncio.CancelledError:
            pass  # shutdown: asyncio would log a cancelled connection callback as an error
        finally:
            self._connections.discard(task)

    async def stop(self) -> None:
        """Graceful shutdown: hand leaderships over, stop accepting, close logs cleanly.

        Every step but closing the logs and the controller's metadata log (what must be
        durable) is bounded: a step stuck past STOP_STEP_TIMEOUT_S is logged by name and
        abandoned, so a node always exits on SIGTERM rather than wait to be killed."""
        started = time.monotonic()
        if self.follower is not None:
            await _bounded("controlled shutdown", self.follower.shut_down())
        handed_over = time.monotonic()
        for server in self._servers:
            server.close()
        if self.wal_writer is not None:
            # It answers the produce requests it holds.
            await _bounded("the diskless WAL writer", self.wal_writer.close())
        if self.housekeeping is not None:
            await _bounded("diskless housekeeping", self.housekeeping.stop())
        # Before connections are cancelled: it answers the JoinGroup/SyncGroup requests
        # still waiting, which their connections' response senders wait for.
        if self.group_coordinator is not None:
            await _bounded("the group coordinator", self.group_coordinator.stop())
        if self.transaction_coordinator is not None:
            await _bounded("the transaction coordinator", self.transaction_coordinator.stop())
        if self.share is not None:
            await _bounded("the share coordinator", self.share.stop())
        if self.metrics is not None:
            await _bounded("the metrics listener", self.metrics.stop())
        if self.active_tiered is not None:
            await _bounded("active-tiered uploads", self.active_tiered.stop())
        if self.shared_storage is not None:
            await _bounded("shared WAL uploads", self.shared_storage.stop())
        for task in list(self._connections) + self._background:
            task.cancel()
        await _bounded("connections and background tasks", asyncio.gather(
            *self._connections, *self._background, return_exceptions=True))
        if self.batch_coordinator is not None:
            await _bounded("the batch coordinator", self.batch_coordinator.stop())
        closing = time.monotonic()
        if self.replicas is not None:
            await self.replicas.close()
        closed = time.monotonic()
        if self.controller is not None:
            await self.controller.stop()
        await _bounded("connections to other nodes", self.nodes.close())
        if self.object_store is not None:
            await _bounded("the object store client", self.object_store.close())
        if self.capture is not None:
            self.capture.close()
        log.info("node %d stopped in %.1f s (controlled shutdown %.1f s, closing logs %.1f s)",
                 self.config.node_id, time.monotonic() - started, handed_over - started,
                 closed - closing)


async def _bounded(step: str, awaitable: Awaitable[object]) -> None:
    """One step of Broker.stop, abandoned (and named in the log) if it takes too long."""
    try:
        async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
            await awaitable
    except TimeoutError:
        log.warning("stopping: %s did not finish in %.0f s; going on without it",
                    step, STOP_STEP_TIMEOUT_S)
