"""Keeps this broker's Partitions in step with cluster metadata: leads or follows each one."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from itertools import islice

from kio.schema.alter_partition.v3.request import (
    AlterPartitionRequest,
    BrokerState,
)
from kio.schema.alter_partition.v3.request import PartitionData as AlterPartitionData
from kio.schema.alter_partition.v3.request import TopicData as AlterTopicData
from kio.schema.errors import ErrorCode

from protocol.apis import ApiKey
from protocol.build import make
from replication.cluster_metadata import NO_LEADER, MetadataImage, PartitionInfo
from replication.fetcher import LeaderFetcher
from storage.config import InvalidConfig, LogConfig
from storage.log import KafkaStorageError, Leadership, PartitionLog
from storage.manager import LogManager, is_internal_topic

from .dynamic_config import DynamicConfigs
from .leaderless_partition import LeaderlessPartition
from .shared_partition import SharedPartition
from .node_client import NodeClient, NodeConnection
from .loop_slice import LoopSlice
from .partition import IsrChanges, Partition, PartitionError, ReplicatedPartition
from .storage_switch import StorageSwitcher
from .throttle import FOLLOWER_RATE, LEADER_RATE, ReplicationQuota, lists_replica, throttled_rate

log = logging.getLogger(__name__)
# ISR changes one AlterPartition carries (the controller checks them in turns and commits
# them together), and how long its answer may take. A restart of 10,000 partitions makes
# about 20,000 (a partition's followers join its ISR one after the other), and each request
# costs every node a commit and an application besides its records: restarts until every
# partition answered ListOffsets took 20-43 s (median 30) at 500 per request, 18-25 s
# (median 22) at 2,000, five of each on a 2-core machine.
ISR_PROPOSALS_PER_REQUEST = 2000
ALTER_PARTITION_TIMEOUT_S = 30.0
# How long the background opener opens logs (a deletion deletes them, the ISR check checks
# them, an AlterPartition answer is applied to them) before it yields to the event loop.
OPEN_SLICE_S = 0.002
# Directories of new logs the background opener has made per job, off the event loop, ahead
# of their opens (LogManager.make_directories).
DIRECTORIES_PER_JOB = 500


@dataclass
class IsrProposal:
    partition: ReplicatedPartition
    new_isr: list[int]
    answered: asyncio.Future


class ReplicaManager:
    def __init__(self, node_id: int, image: MetadataImage, logs: LogManager,
                 configs: DynamicConfigs, nodes: NodeClient,
                 controller: NodeConnection | None, replica_lag_time_max_ms: int = 30_000) -> None:
        self.node_id = node_id
        self.image = image
        self.logs = logs
        self.configs = configs
        # A dynamic broker config changed: topic configs left to their default may too.
        configs.listeners.append(self._reconfigure)
        self.nodes = nodes
        self.controller = controller
        self.replica_lag_time_max_s = replica_lag_time_max_ms / 1000
        # The partitions hosted and opened; those hosted but not opened yet (an ordered set:
        # _on_partition_record), and the task opening them.
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._unopened: dict[tuple[str, int], None] = {}
        # Of those, the ones this broker followed when it was told of them (ordered set).
        self._open_first: dict[tuple[str, int], None] = {}
        # Of those, the ones created since start (new logs), whose directories the opener
        # makes first (ordered set).
        self._new_dirs: dict[tuple[str, int], None] = {}
        self._opener: asyncio.Task | None = None
        # Hosted partitions whose log could not be opened, and why: offline here (Kafka's
        # partitions of a failed log directory) until the next change of the partition or
        # restart tries again.
        self.offline: dict[tuple[str, int], str] = {}
        # Called after each unopened partition is opened: what lives as long as a partition
        # is made then (the broker freezes it out of the collector's sight, broker.heap).
        self.opened_listeners: list[Callable[[], None]] = []
        # Called after each hosted partition is dropped (deleted, moved away), with how many
        # are still hosted: what it was made of goes then.
        self.dropped_listeners: list[Callable[[int], None]] = []
        self._started = False
        self._fetchers: dict[int, LeaderFetcher] = {}
        # Log deletions, fetcher shutdowns and ISR expansions under way, awaited by close().
        self._background: set[asyncio.Task] = set()
        self._isr_task: asyncio.Task | None = None
        # ISR changes waiting to be sent (_propose_isr), and the task sending them.
        self._isr_proposals: dict[tuple[str, int], IsrProposal] = {}
        self._isr_sender: asyncio.Task | None = None
        self.broker_epoch = -1
        self.isr_changes = IsrChanges()
        # When each follower broker last fetched from this one (time.monotonic()).
        self._follower_fetches: dict[int, float] = {}
        # The partitions led here that the periodic ISR check looks at (the others are
        # isr_settled): walking all of them every replica_lag_time_max_ms / 2 was a sixth
        # of an idle broker's CPU with 10,000 partitions.
        self._isr_unsettled: set[ReplicatedPartition] = set()
        # The replication throttle (replication.throttle): bytes sent to, and fetched for,
        # throttled replicas out of the ISR.
        self.leader_quota = ReplicationQuota(lambda: throttled_rate(configs, LEADER_RATE))
        self.follower_quota = ReplicationQuota(lambda: throttled_rate(configs, FOLLOWER_RATE))
        # Live storage-mode switches of the partitions this broker leads.
        self.switcher = StorageSwitcher(node_id, image, logs, controller, self.log_config,
                                        lambda topic, index: self.partitions.get((topic, index)))

    def start(self) -> None:
        """Once the broker has caught up with the metadata: from now on what it hosts is
        opened in the background (until then, only what a request asks for: the
        background opener would take turns of the event loop from catching up)."""
        self._isr_task = asyncio.create_task(self._shrink_isr_loop())
        self._started = True
        self._open_in_background()

    def log_config(self, topic: str) -> LogConfig:
        return self.configs.log_config(self.image.topics[topic])

    def write_mode(self, info: PartitionInfo) -> str:
        """The storage mode the partition's appends go to (its newest span's)."""
        return info.write_mode(self.log_config(info.topic).storage_mode)

    def served_anywhere(self, info: PartitionInfo) -> bool:
        return info.served_anywhere(self.log_config(info.topic).storage_mode)

    def _reconfigure(self, topic: str | None = None) -> None:
        """Give the hosted partitions of ``topic`` (None: all) their current configs."""
        configs: dict[str, LogConfig] = {}
        for (name, _), partition in self.partitions.items():
            if (topic is None or name == topic) and name in self.image.topics:
                if name not in configs:
                    configs[name] = self.log_config(name)
                if partition.log.config != configs[name]:
                    partition.log.reconfigure(configs[name])

    def on_metadata_record(self, record: dict) -> None:
        """Called after ``record`` was applied to the image."""
        kind = record["type"]
        if kind == "partition":
            self._on_partition_record(
                self.image.topics[record["topic"]].partitions[record["partition"]])
        elif kind == "config":
            self._reconfigure(record["topic"])
        elif kind == "remove_topic":
            keys = [k for k in self.partitions if k[0] == record["name"]]
            for key in keys:
                self._stop_serving(key)
            unopened = [k for k in self._unopened if k[0] == record["name"]]
            for key in unopened:
                self._forget_unopened(key)
            for key in [k for k in self.offline if k[0] == record["name"]]:
                del self.offline[key]
            # One task deletes them one after another: thousands of deletions started at
            # once would all run their first step in one turn of the event loop.
            detached = [log_ for key in keys if (log_ := self.logs.detach(*key)) is not None]
            self._in_background(self._delete_logs(detached, unopened))
        elif kind == "broker" and record["node_id"] in self._fetchers:
            # The leader moved to a new address (restart): reconnect its fetcher.
            for partition in list(self._fetchers[record["node_id"]].partitions.values()):
                self._follow(partition)
        elif kind == "unfence_broker":
            # Its caught-up replicas may join ISRs now (they were not eligible while it was
            # fenced), without waiting for the periodic check: their partitions may be idle
            # in its fetch session, and then no fetch lists them.
            self._in_background(self._expand_isrs_with(record["node_id"]))

    def _on_partition_record(self, info: PartitionInfo) -> None:
        """A partition this broker starts hosting is opened later: on first use (``get``)
        or by the background opener (once started), for 2 ms at a time between turns of
        the event loop. Opening a log reads its directory and files (about a millisecond): a
        broker restarting with 10,000 partitions caught up with the metadata, and so was
        unfenced, only once it had opened all of them, and creating thousands of
        partitions stalled the event loop. Internal topics' partitions (the coordinators
        watch their leadership) are opened at once."""
        key = (info.topic, info.partition)
        if key in self.partitions or is_internal_topic(info.topic):
            self._apply_partition(info)
        elif self._hosts(info):
            # Followers first: nothing else opens them, and a leader shrinks the ISR of a
            # follower that fetches nothing for replica.lag.time.max.ms. What this broker
            # leads (and a diskless partition) is opened by the first request for it.
            if (info.leader not in (self.node_id, NO_LEADER)
                    and self.write_mode(info) != "diskless"):
                self._open_first[key] = None
            if self._started and key not in self._unopened and not info.spans:
                # A new log (those hosted when the broker started have their directories).
                self._new_dirs[key] = None
            self._unopened[key] = None
            if self._started:
                self._open_in_background()
        elif key in self._unopened or key in self.offline:
            if key in self._unopened:
                self._forget_unopened(key)
            self.offline.pop(key, None)
            log.info("%s-%d no longer has a replica here: deleting it", *key)
            self._in_background(self.logs.delete_partition(*key))

    def _forget_unopened(self, key: tuple[str, int]) -> None:
        """``key`` is opened or no longer hosted: nothing is left to open or make for it."""
        del self._unopened[key]
        self._new_dirs.pop(key, None)

    def _hosts(self, info: PartitionInfo) -> bool:
        # Leaderless: every broker serves every diskless partition, replica or not.
        return self.node_id in info.replicas or self.write_mode(info) == "diskless"

    def _open(self, key: tuple[str, int]) -> None:
        """Host the unopened partition ``key`` as the image has it now."""
        if key not in self._unopened:
            return
        self._forget_unopened(key)
        topic = self.image.topics.get(key[0])
        info = topic.partitions.get(key[1]) if topic is not None else None
        if info is not None:
            self._apply_partition(info)
            for listener in self.opened_listeners:
                listener()

    def _open_in_background(self) -> None:
        if self._opener is None or self._opener.done():
            self._opener = asyncio.create_task(self._open_unopened())

    async def _open_unopened(self) -> None:
        # A slice of time, not of partitions: the metadata being applied meanwhile (a topic
        # of thousands of partitions created) gets the turns in between, and a slice of 16
        # opens (16-50 ms on a loaded machine) per turn starved it.
        turns = LoopSlice(OPEN_SLICE_S)
        while self._unopened:
            if self._new_dirs:
                # All of them first: a leader's logs are opened by its followers' first
                # fetches, which come meanwhile.
                await self._make_directories()
                continue
            self._open(self._next_to_open())
            await turns.pause()

    async def _make_directories(self) -> None:
        keys = list(islice(self._new_dirs, DIRECTORIES_PER_JOB))
        for key in keys:
            del self._new_dirs[key]
        modes: dict[str, str] = {}
        for topic, _ in keys:
            if topic not in modes:
                try:
                    modes[topic] = self.log_config(topic).storage_mode
                except InvalidConfig:
                    modes[topic] = ""  # no directory made: the open reports it
        await self.logs.make_directories([(topic, index, modes[topic]) for topic, index in keys])

    def _next_to_open(self) -> tuple[str, int]:
        while self._open_first:
            key = next(iter(self._open_first))
            del self._open_first[key]
            if key in self._unopened:  # else opened or deleted meanwhile
                return key
        return next(iter(self._unopened))

    def _apply_partition(self, info: PartitionInfo) -> None:
        key = (info.topic, info.partition)
        self.offline.pop(key, None)
        try:
            self._host_partition(info)
        except (InvalidConfig, KafkaStorageError) as e:
            # e.g. a diskless topic on a broker without an object store, or a log that
            # cannot be loaded: serve the others.
            log.error("cannot host %s-%d: %s", info.topic, info.partition, e)
            if isinstance(e, KafkaStorageError) and key not in self.partitions:
                self.offline[key] = str(e)

    def _partition_log(self, info: PartitionInfo, config: LogConfig) -> PartitionLog:
        """The partition's log over its storage spans (storage.spans): a span of a
        leader-based mode is held by its replicas only, a diskless span by every broker."""
        chain = info.span_chain(config.storage_mode)
        return self.logs.open_spans(info.topic, info.partition, config, [
            (span.mode, span.base_offset, span.mode == "diskless" or self.node_id in info.replicas)
            for span in chain])

    def _host_partition(self, info: PartitionInfo) -> None:
        key = (info.topic, info.partition)
        config = self.log_config(info.topic)
        current = self.partitions.get(key)
        if self.write_mode(info) == "diskless":
            # Leaderless: every broker serves every diskless partition, replica or not.
            if isinstance(current, LeaderlessPartition):
                current.update_info(info)
                current.served_anywhere = self.served_anywhere(info)
            else:
                if current is not None:  # switched live from a leader-based mode
                    self._stop_following(*key)
                    current.notify_waiters()
                self.partitions[key] = LeaderlessPartition(
                    self.node_id, self._partition_log(info, config), info,
                    self.served_anywhere(info))
            self.switcher.on_partition(info)
            return
        if self.node_id not in info.replicas:
            if key in self.partitions:
                # Reassigned away (KIP-455): this broker's replica is no longer wanted.
                log.info("%s-%d no longer has a replica here: deleting it", *key)
                self._delete_replica(key)
            return
        partition = current if isinstance(current, ReplicatedPartition) else None
        if partition is None:
            log_ = self._partition_log(info, config)
            if config.storage_mode == "shared":  # never switched live: one span
                partition = SharedPartition(self.node_id, log_, info)
            else:
                if current is not None:
                    current.notify_waiters()  # switched live from diskless
                # Below the newest span's base everything is committed (by another engine).
                partition = ReplicatedPartition(self.node_id, log_, info, self._propose_isr,
                                                self.isr_changes, self.last_fetch_by,
                                                committed_offset=info.span_chain(
                                                    config.storage_mode)[-1].base_offset,
                                                isr_eligible=self._isr_eligible,
                                                unsettled=self._isr_unsettled.add)
            self.partitions[key] = partition
        else:
            if info.spans:  # its chain gets the spans recorded
                partition.log = self._partition_log(info, config)
            partition.update_info(info)
        # A shared partition's other replicas fetch nothing: object storage holds its data.
        if (partition.is_leader or info.leader == NO_LEADER
                or isinstance(partition, SharedPartition)):
            self._stop_following(*key)
        else:
            self._follow(partition)
        self.switcher.on_partition(info)

    def _delete_replica(self, key: tuple[str, int]) -> None:
        self._stop_serving(key)
        self._in_background(self.logs.delete_partition(*key))

    def _stop_serving(self, key: tuple[str, int]) -> None:
        self._stop_following(*key)
        partition = self.partitions.pop(key)
        self._isr_unsettled.discard(partition)
        partition.log.on_leadership_change(Leadership.STOPPED, partition.leader_epoch)
        partition.notify_waiters()
        for listener in self.dropped_listeners:
            listener(len(self.partitions))

    async def _delete_logs(self, logs: list[PartitionLog],
                           unopened: list[tuple[str, int]]) -> None:
        # In turns: thousands of deletions held the event loop for a quarter of a second.
        # The unopened partitions' directories are renamed aside by a child process for
        # DIRECTORIES_PER_JOB of them at a time (LogManager.delete_unopened).
        turns = LoopSlice(OPEN_SLICE_S)
        for log_ in logs:
            await self.logs.delete_detached(log_)
            await turns.pause()
        for start in range(0, len(unopened), DIRECTORIES_PER_JOB):
            await self.logs.delete_unopened(unopened[start:start + DIRECTORIES_PER_JOB])
            await turns.pause()

    def follower_fetched(self, replica_id: int) -> None:
        self._follower_fetches[replica_id] = time.monotonic()

    def last_fetch_by(self, replica_id: int) -> float:
        return self._follower_fetches.get(replica_id, 0.0)

    def _isr_eligible(self, replica_id: int) -> bool:
        broker = self.image.brokers.get(replica_id)
        return broker is not None and not broker.fenced

    def leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Whether what this broker, as leader, sends follower ``replica_id`` counts against
        leader.replication.throttled.rate (a throttled replica out of the ISR)."""
        return replica_id not in partition.isr and lists_replica(
            partition.log.config.leader_throttled_replicas, partition.index, self.node_id)

    def follower_throttled(self, partition: ReplicatedPartition) -> bool:
        """Whether this broker's fetches for ``partition`` count against
        follower.replication.throttled.rate."""
        return self.node_id not in partition.isr and lists_replica(
            partition.log.config.follower_throttled_replicas, partition.index, self.node_id)

    def _follow(self, partition: ReplicatedPartition) -> None:
        self._stop_following(partition.topic, partition.index)
        leader = self.image.brokers.get(partition.leader)
        if leader is None:
            return
        fetcher = self._fetchers.get(leader.node_id)
        if fetcher is None or (fetcher.connection.host, fetcher.connection.port) != (leader.host, leader.port):
            if fetcher is not None:
                self._in_background(fetcher.stop())
            fetcher = LeaderFetcher(self.node_id, leader.node_id,
                                    self.nodes.connection(leader.host, leader.port, "replication"),
                                    self.follower_throttled, self.follower_quota)
            fetcher.start()
            self._fetchers[leader.node_id] = fetcher
        fetcher.add(partition)

    def _stop_following(self, topic: str, index: int) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(topic, index)

    async def _propose_isr(self, partition: ReplicatedPartition, new_isr: list[int]) -> None:
        """Propose an ISR change to the controller (KIP-497 AlterPartition); return once
        its answer is applied. Proposals are sent together, one AlterPartition in flight
        (Kafka's AlterPartitionManager): after a restart the leader of thousands of
        partitions takes every follower back into their ISRs at once, and one request per
        partition queued thousands of round trips on the controller."""
        if self.controller is None:
            return
        answered = asyncio.get_running_loop().create_future()
        self._isr_proposals[(partition.topic, partition.index)] = IsrProposal(
            partition, new_isr, answered)
        if self._isr_sender is None or self._isr_sender.done():
            self._isr_sender = asyncio.create_task(self._send_isr_proposals())
        await answered

    async def _send_isr_proposals(self) -> None:
        while self._isr_proposals:
            keys = list(self._isr_proposals)[:ISR_PROPOSALS_PER_REQUEST]
            proposals = [self._isr_proposals.pop(key) for key in keys]
            for proposal in proposals:
                proposal.new_isr = proposal.partition.isr_to_send(proposal.new_isr,
                                                                  self.replica_lag_time_max_s)
            try:
                await self._alter_partitions(proposals)
            except Exception:
                log.exception("AlterPartition of %d partitions failed", len(proposals))
            finally:
                for proposal in proposals:
                    if not proposal.answered.done():
                        proposal.answered.set_result(None)

    async def _alter_partitions(self, proposals: list[IsrProposal]) -> None:
        by_topic: dict[uuid.UUID, list[IsrProposal]] = {}
        for proposal in proposals:
            topic = self.image.topics.get(proposal.partition.topic)
            if topic is not None:
                by_topic.setdefault(topic.topic_id, []).append(proposal)
        if not by_topic:
            return
        request = make(AlterPartitionRequest, broker_id=self.node_id, broker_epoch=self.broker_epoch,
                       topics=tuple(make(AlterTopicData, topic_id=topic_id, partitions=tuple(
                           make(AlterPartitionData, partition_index=p.partition.index,
                                leader_epoch=p.partition.leader_epoch,
                                new_isr_with_epochs=tuple(make(BrokerState, broker_id=r,
                                                               broker_epoch=-1)
                                                          for r in p.new_isr),
                                leader_recovery_state=0,
                                partition_epoch=p.partition.partition_epoch)
                           for p in asked)) for topic_id, asked in by_topic.items()))
        try:
            response = await self.controller.call(ApiKey.ALTER_PARTITION, request,
                                                  ALTER_PARTITION_TIMEOUT_S)
        except (ConnectionError, OSError, asyncio.TimeoutError) as e:
            log.warning("ISR changes of %d partitions not sent: %s", len(proposals), e)
            return
        if response.error_code != ErrorCode.none:
            log.warning("ISR changes of %d partitions refused: %s", len(proposals),
                        response.error_code.name)
            return
        changed = []
        refused: dict[str, list[str]] = {}  # error name -> partitions
        turns = LoopSlice(OPEN_SLICE_S)
        for topic in response.topics:
            asked = {p.partition.index: p.partition for p in by_topic.get(topic.topic_id, ())}
            for result in topic.partitions:
                partition = asked.get(result.partition_index)
                if partition is None:
                    continue
                name = f"{partition.topic}-{partition.index}"
                if self._apply_isr_answer(partition, result):
                    changed.append(f"{name}: {list(result.isr)}")
                else:
                    refused.setdefault(result.error_code.name, []).append(name)
                await turns.pause()
        # One line per answer and outcome, not per partition: a restart of 10,000 partitions
        # changes about 20,000 ISRs (13,000 lines in a few seconds when each had its own),
        # and a cluster stopping refuses thousands at once.
        _log_some(logging.INFO, "ISR of %d partition(s) changed: %s", changed)
        for error, names in refused.items():
            _log_some(logging.INFO, f"ISR change of %d partition(s) refused ({error}): %s",
                      names)

    def _apply_isr_answer(self, partition: ReplicatedPartition, result) -> bool:
        """Whether the controller accepted the change."""
        if result.error_code == ErrorCode.none:
            # Apply now rather than when the metadata log brings it: acks=all may be waiting.
            known = self.image.topics.get(partition.topic)
            info = known.partitions.get(partition.index) if known is not None else None
            # The image's entry keeps what the answer does not carry (reassignment, spans).
            base = info or PartitionInfo(partition.topic, partition.index, partition.replicas,
                                         [], result.leader_id)
            partition.update_info(replace(
                base, isr=list(result.isr), leader=result.leader_id,
                leader_epoch=result.leader_epoch, partition_epoch=result.partition_epoch))
            return True
        return False

    async def _led_with_isr(self) -> AsyncIterator[ReplicatedPartition]:
        """The partitions this broker leads that have an ISR (leaderless ones have none), in
        turns of the event loop: the walk alone over 20,000 hosted partitions held it 76 ms
        (one that stopped leading meanwhile is still given)."""
        turns = LoopSlice(OPEN_SLICE_S)
        for partition in list(self.partitions.values()):
            await turns.pause()
            if isinstance(partition, ReplicatedPartition) and partition.is_leader:
                yield partition

    async def _expand_isrs_with(self, node_id: int) -> None:
        async for partition in self._led_with_isr():
            if node_id in partition.replicas:
                partition.maybe_expand_isr(self.replica_lag_time_max_s)

    async def _shrink_isr_loop(self) -> None:
        """Every replica_lag_time_max_ms / 2, as Kafka's isr-expiration task: followers
        not caught up for that long leave the ISR, caught-up ones out of it join. Only the
        unsettled partitions are looked at, unless a follower broker has not fetched for
        that long: then its replicas of every partition are due, settled ones included."""
        lag = self.replica_lag_time_max_s
        while True:
            await asyncio.sleep(lag / 2)
            now = time.monotonic()
            silent = any(now - at > lag for at in self._follower_fetches.values())
            async for partition in (self._led_with_isr() if silent else self._unsettled()):
                partition.maybe_shrink_isr(lag)
                partition.maybe_expand_isr(lag)
                if partition.isr_settled():
                    self._isr_unsettled.discard(partition)

    async def _unsettled(self) -> AsyncIterator[ReplicatedPartition]:
        """The unsettled partitions (see _led_with_isr), dropped from the set once they no
        longer lead here."""
        turns = LoopSlice(OPEN_SLICE_S)
        for partition in list(self._isr_unsettled):
            await turns.pause()
            if partition.is_leader:
                yield partition
            else:
                self._isr_unsettled.discard(partition)

    def _in_background(self, work) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def hosted(self) -> int:
        """How many partitions this broker hosts, opened or not."""
        return len(self.partitions) + len(self._unopened)

    async def open_hosted(self, keys: set[tuple[str, int]] | None = None) -> None:
        """Open the hosted partitions not opened yet (``keys``: only those), yielding after
        each: a request about every log (DescribeLogDirs) must see them all."""
        for key in [k for k in self._unopened if keys is None or k in keys]:
            self._open(key)
            await asyncio.sleep(0)

    def get(self, topic: str, partition: int) -> Partition:
        """The hosted partition, opened now if it was not yet."""
        if (topic, partition) in self._unopened:
            self._open((topic, partition))
        found = self.partitions.get((topic, partition))
        if found is None:
            if (reason := self.offline.get((topic, partition))) is not None:
                raise PartitionError(ErrorCode.kafka_storage_error,
                                     f"This server cannot open the partition's log: {reason}")
            raise PartitionError(ErrorCode.unknown_topic_or_partition,
                                 "This server does not host this topic-partition.")
        return found

    async def close(self) -> None:
        for task in (self._isr_task, self._isr_sender, self._opener):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(f.stop() for f in self._fetchers.values()),
                             *self._background, return_exceptions=True)
        for partition in self.partitions.values():
            partition.log.on_leadership_change(Leadership.STOPPED, partition.leader_epoch)
        await self.logs.close_all()


def _log_some(level: int, message: str, names: list[str]) -> None:
    """``message`` with the count of ``names`` and the first three of them (all of them at
    DEBUG); nothing when there are none."""
    if not names:
        return
    log.log(level, message, len(names), ", ".join(names[:3]) + (", ..." if len(names) > 3 else ""))
    if len(names) > 3 and log.isEnabledFor(logging.DEBUG):
        log.debug(message, len(names), ", ".join(names))
